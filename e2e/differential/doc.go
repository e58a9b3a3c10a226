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
// shares, masquerade, affinity) must be equal. The only differences
// tolerated are in kube-proxy's undefined cases, where its outcome depends
// on the order it iterates a Go map and so varies between its runs while
// ours is fixed: copies of one endpoint in two slices of a Service port
// that kube-proxy may keep either of (the probes of that port, and in
// nftables mode hairpin from that address with the port's protocol, its
// element in the hairpin set), and a frontend that Service ports of two
// Services claim (the probes to it where the two proxies' rules name
// different Service ports). Each is named, with its reason, in the test's
// undefinedCases, and the test prints per mode the states and probes
// compared, the differences, the unexplained ones (which fail), each
// case's probes and differences, and the probes of Service ports with an
// endpoint listed twice outside the undefined cases (which must agree).
//
// For the first states, one probe of each class of kube-proxy's outcome is
// also sent as a real packet through both kernels: which pod answers,
// whether it sees the client's address, or whether the flow is refused or
// met with silence must agree between the kernels and with what each
// one's evaluator read, so that a bug a renderer and its evaluator share
// cannot hide.
//
// The states hold, at a modest rate, what the API server accepts that
// kube-proxy reads in its own way: port names of up to 63 characters or
// digits only, endpoints with several addresses (the first counts),
// conditions unset one by one, hints for other zones, for the zone "" and
// for other nodes, slice ports without a number, numbered 0 or named for
// no Service port, FQDN slices, slices without the service-name label or
// in another namespace, load-balancer IPs in special-purpose ranges
// (unspecified, loopback, link-local, multicast) and cluster IPs from
// ServiceCIDRs in such ranges (probed through the rules only: no real
// packet is sent to them).
//
// The states are generated with pgregory.net/rapid; SVCPROXY_DIFF_STATES
// sets how many (see CONTRIBUTING.md). The tests need root, the kernel
// tools and the API-server suite's binaries ($SVCPROXY_APISERVER_BIN_DIR,
// kube-proxy included); otherwise they skip, or fail when
// SVCPROXY_E2E=required.
package differential
