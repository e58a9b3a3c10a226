package nftables_test

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/nfttest"
	"github.com/svcproxy/svcproxy/ruleset"
)

// The test kit both layouts share (internal/testkit/nfttest), under the
// short names these tests use.

// fataler is what *testing.T and *rapid.T have in common.
type fataler = nfttest.Fataler

func helper(tb fataler) { nfttest.Helper(tb) }

// world feeds Services and EndpointSlices through the trackers and builds
// Rulesets, as a proxy does, failing the test on any warning
// (nfttest.World).
type world struct{ *nfttest.World }

func newWorld(tb fataler, cfg ruleset.Config) *world {
	helper(tb)
	return &world{nfttest.NewWorld(tb, cfg)}
}

func (w *world) add(objs ...any) { helper(w.TB); w.Add(objs...) }

func (w *world) build() *ruleset.Ruleset { helper(w.TB); return w.Build() }

// update makes the Ruleset of the trackers' state with Builder.Update (see
// nfttest.World.Update).
func (w *world) update(prev *ruleset.Ruleset) *ruleset.Ruleset { helper(w.TB); return w.Update(prev) }

// The node the rules are for, and the addresses of the tests: pods in
// 198.18.64.0/18 (2001:db8:18:40::/58), Services in 198.19.0.0/16
// (2001:db8:19::/108), nodes in 198.18.0.0/24.
const node = nfttest.Node

var (
	config4, config6 = nfttest.Config4, nfttest.Config6
	// svc is a ClusterIP Service ns/name with one TCP port "p80" (80 →
	// 8080), changed by the options that follow.
	svc                          = nfttest.Svc
	nodePort, loadBalancer       = nfttest.NodePort, nfttest.LoadBalancer
	sourceRanges, externalIPs    = nfttest.SourceRanges, nfttest.ExternalIPs
	externalLocal, internalLocal = nfttest.ExternalLocal, nfttest.InternalLocal
	affinity, udp                = nfttest.Affinity, nfttest.UDP
	// apply runs a transaction on a Fake, failing the test on what the
	// kernel would refuse (nfttest.Apply).
	apply = nfttest.Apply
	// danglingRefs reports rules and elements that name what the table
	// does not hold.
	danglingRefs = nfttest.DanglingRefs
	// canonical sorts the element lines of a Fake dump.
	canonical = nfttest.Canonical
)

// ep is one endpoint of a slice: ready and serving unless notReady or
// terminating.
type ep struct {
	ip, node              string
	notReady, terminating bool
}

// slice is the EndpointSlice ns/name-1 of Service ns/name with port "p80"
// (TCP, or proto) on targetPort.
func slice(ns, name string, targetPort int32, eps ...ep) *discovery.EndpointSlice {
	return nfttest.Slice(ns, name, targetPort, kitEndpoints(eps)...)
}

func sliceProto(ns, name string, proto v1.Protocol, targetPort int32, eps ...ep) *discovery.EndpointSlice {
	return nfttest.SliceProto(ns, name, proto, targetPort, kitEndpoints(eps)...)
}

func kitEndpoints(eps []ep) []nfttest.EP {
	out := make([]nfttest.EP, len(eps))
	for i, e := range eps {
		out[i] = nfttest.EP{IP: e.ip, Node: e.node, NotReady: e.notReady, Terminating: e.terminating}
	}
	return out
}
