package ebpf_test

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// genPair draws two sets of objects and returns the Ruleset of the first
// (Build) and of the second made from it by Builder.Update, as a proxy
// does between syncs: ruleset.Diff then names only the ports that changed.
func genPair(t *rapid.T, v6 bool) (*ruleset.Ruleset, *ruleset.Ruleset) {
	cfg := ruleset.Config{
		Family:            family(v6),
		Node:              topology.Node{Name: "node-a"},
		ClusterCIDRs:      []netip.Prefix{netip.MustParsePrefix(convPrefix(podCIDR.String(), v6))},
		ServiceCIDRs:      []netip.Prefix{netip.MustParsePrefix(convPrefix(serviceCIDR.String(), v6))},
		NodePortAddresses: []netip.Addr{netip.MustParseAddr(conv(nodeIP.String(), v6))},
	}
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := servicemap.NewTracker(cfg.Family, servicemap.Filter{})
	et := endpoints.NewTracker(cfg.Family, servicemap.Filter{})
	feed := func(objs []any) map[[2]string]bool {
		names := map[[2]string]bool{}
		for _, o := range objs {
			switch o := o.(type) {
			case *v1.Service:
				st.Update(o)
				names[[2]string{"svc", o.Name}] = true
			case *discovery.EndpointSlice:
				et.Update(o)
				names[[2]string{"slice", o.Name}] = true
			}
		}
		return names
	}
	first := feed(genObjects(t, v6))
	ss, _ := st.Snapshot()
	es, _ := et.Snapshot()
	rs1, _ := b.Build(ss, es)
	second := feed(genObjects(t, v6))
	for k := range first {
		if !second[k] && rapid.Bool().Draw(t, "delete") {
			if k[0] == "svc" {
				st.Delete("ns", k[1])
			} else {
				et.Delete("ns", k[1])
			}
		}
	}
	ss, _ = st.Snapshot()
	es, _ = et.Snapshot()
	rs2, _, _ := b.Update(rs1, ss, es)
	return rs1, rs2
}

// Property: Render of an updated Ruleset from the previous Contents gives
// maps that the model reads as trace.Trace reads the new Ruleset; Changes
// gives the same Ops as Diff of the two Maps; AllOps writes every element
// into empty maps; GoneEndpoints are the
// endpoints of UDP ports in the old Ruleset that no UDP port has in the new.
func TestPropChanges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		rs1, rs2 := genPair(t, v6)
		c1 := ebpf.Render(rs1, nil)
		c2 := ebpf.Render(rs2, c1)
		m1, m2 := c1.Maps(), c2.Maps()
		want, got := ebpf.Diff(m1, m2), ebpf.Changes(c1, c2)
		if !equalOps(want, got) {
			t.Fatalf("Changes %+v\nDiff %+v", got, want)
		}
		if got := apply(ebpf.NewMaps(), c2.AllOps()); !got.Equal(m2) {
			t.Fatal("AllOps does not write the Contents' elements")
		}
		var gone []netip.AddrPort
		still := map[netip.AddrPort]bool{}
		for _, s := range rs2.Services() {
			if s.Name.Protocol == v1.ProtocolUDP {
				for _, t := range slices.Concat(s.ClusterTargets, s.LocalTargets) {
					still[t.Endpoint] = true
				}
			}
		}
		for _, s := range rs1.Services() {
			if s.Name.Protocol == v1.ProtocolUDP {
				for _, t := range slices.Concat(s.ClusterTargets, s.LocalTargets) {
					if !still[t.Endpoint] && !slices.Contains(gone, t.Endpoint) {
						gone = append(gone, t.Endpoint)
					}
				}
			}
		}
		slices.SortFunc(gone, netip.AddrPort.Compare)
		if g := ebpf.GoneEndpoints(c1, c2); !slices.Equal(g, gone) {
			t.Fatalf("GoneEndpoints %v, want %v", g, gone)
		}
		for range 20 {
			agree(t, rs2, m2, rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"), genDst(t, v6))
		}
	})
}

// equalOps compares two Ops, nil and empty lists alike.
func equalOps(a, b ebpf.Ops) bool {
	return slices.Equal(a.PutBackends, b.PutBackends) && slices.Equal(a.PutServices, b.PutServices) &&
		slices.Equal(a.PutNodeAddrs, b.PutNodeAddrs) && slices.Equal(a.PutClusterAddrs, b.PutClusterAddrs) &&
		slices.Equal(a.PutServiceCIDRs, b.PutServiceCIDRs) && slices.Equal(a.DelServices, b.DelServices) &&
		slices.Equal(a.DelBackends, b.DelBackends) && slices.Equal(a.DelNodeAddrs, b.DelNodeAddrs) &&
		slices.Equal(a.DelClusterAddrs, b.DelClusterAddrs) && slices.Equal(a.DelServiceCIDRs, b.DelServiceCIDRs)
}
