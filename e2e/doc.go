// Package e2e proves the reference proxies' Service behaviour with real
// packets in a real kernel. Each test builds its own network namespaces (a
// node, pods, clients: internal/testkit/netns), runs a reference proxy in the node
// namespace as a user would, from manifests it writes, and checks with real
// TCP and UDP sockets which pods are reached and what source address they
// see. The tests that take a backend run against the iptables proxy and the
// nftables proxy in both of its layouts (kube-proxy's, and the flat one with
// --nftables-layout flat). The tests run as root with ip, iptables and nft installed; otherwise
// they skip, or fail when SVCPROXY_E2E=required.
package e2e
