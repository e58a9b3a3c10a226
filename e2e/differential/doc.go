// Package differential compares svcproxy's reference proxies with the real
// kube-proxy (the release svcproxy tracks, svcproxy.KubeProxyVersion) on the
// same cluster states.
//
// One kube-apiserver and etcd run in a network namespace of their own; each
// proxy runs on a node of its own (a netns.Cluster: node, pods, clients),
// all with the same addresses (node 198.18.0.1, 2001:db8:18::1) and
// settings, watching that API server. The test writes a cluster state
// through the API (the Node, Services with their load-balancer status,
// EndpointSlices), waits until every proxy has synced it, reads each
// proxy's rules back from its kernel (iptables-save, nft list table) and
// evaluates both with the trace evaluators (trace/iptrace, trace/nfttrace)
// for every frontend of every Service (cluster IPs, node ports on the
// node's address, on another local address and on the loopback, external
// and load-balancer IPs) × every kind of source (a pod on the node, a pod
// elsewhere, the node, two outside clients, the endpoints themselves) × the
// port's protocol and another. The outcomes (verdict, targets with their
// shares, masquerade, affinity) must be equal, except where a difference
// is listed, by name and with its reason, in the test's exclusions, which
// the test prints with their counts.
//
// For the first states, one probe of each class of kube-proxy's outcome is
// also sent as a real packet through both kernels: which pod answers,
// whether it sees the client's address, or whether the flow is refused or
// met with silence must agree between the kernels and with what each
// one's evaluator read, so that a bug a renderer and its evaluator share
// cannot hide.
//
// The states are generated with pgregory.net/rapid; SVCPROXY_DIFF_STATES
// sets how many (see CONTRIBUTING.md). The tests need root, the kernel
// tools and the API-server suite's binaries ($SVCPROXY_APISERVER_BIN_DIR,
// kube-proxy included); otherwise they skip, or fail when
// SVCPROXY_E2E=required.
package differential
