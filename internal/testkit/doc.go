// Package testkit is the root of svcproxy's test-only tree: helpers that the
// tests and benchmarks of the other packages import, never production code.
//
//   - netns: network namespaces, veth links, echo servers and clients for the
//     real-kernel tests (it imports "testing").
//   - cgroup: child cgroups of the cgroup v2 tree for the eBPF tests.
//   - proxybin: the reference proxies (examples/NAME-proxy), built once per
//     test binary, for the tests that run them as processes.
//   - apiserver: a real etcd and kube-apiserver run inside a netns namespace,
//     for the tests of the proxies' --kubeconfig mode.
//   - scalegen: kube-proxy-shaped clusters of N Services × E endpoints as
//     v1 objects, for benchmarks; it imports no svcproxy package above
//     servicemap, so that the tests of any package may use it.
//   - scaleworld: scalegen's clusters fed into trackers and built into
//     Rulesets, for the tests of ruleset and of the backends.
//   - fixture: the Ruleset of a test's objects, failing the test on any
//     skipped object or warning.
//   - warnings: checks of the Warnings a conversion returned, for the tests
//     of servicemap and endpoints.
//   - rapidgen: rapid generators of Services, EndpointSlices, their
//     histories and ruleset Configs, for the property tests of ruleset and
//     of state.
//   - nfttest: what the tests of both nftables layouts share.
//
// A helper here is imported only by packages at or above the svcproxy
// packages it imports itself.
package testkit
