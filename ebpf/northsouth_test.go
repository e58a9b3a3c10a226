package ebpf_test

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

// Property: the model of the tc programs' lookups, over the maps
// RenderNorthSouth makes, gives trace.Trace's outcome for every IPv4 and
// IPv6 flow arriving from outside (a client outside the pod network, or
// inside a source range): the same verdict (the programs answer a
// rejected flow with an ICMP port unreachable), the same targets, each
// owning ⌊M/N⌋ or ⌈M/N⌉ of the M Maglev entries (a share within 1/M of
// trace's 1/N), and masquerading to the node's address exactly when
// trace masquerades.
func TestPropNorthSouthMatchesTrace(t *testing.T) {
	srcs := []string{"203.0.113.9", "198.18.0.7", "198.51.100.1"}
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		node := netip.MustParseAddr(conv(nodeIP.String(), v6))
		rs := genRuleset(t, v6)
		c := ebpf.Render(rs, nil)
		const m = 251
		ns, err := ebpf.RenderNorthSouth(rs, c, m)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")
			src := netip.MustParseAddr(conv(rapid.SampledFrom(srcs).Draw(t, "src"), v6))
			dst := genDst(t, v6)
			p := trace.Packet{Protocol: proto, Src: netip.AddrPortFrom(src, 40000), Dst: dst, ToNode: dst.Addr() == node}
			o := trace.Trace(rs, p, trace.Options{})
			num := map[v1.Protocol]uint8{v1.ProtocolTCP: ebpf.ProtoTCP, v1.ProtocolUDP: ebpf.ProtoUDP}[proto]
			got := ns.Lookup(c.Maps(), num, src, dst)
			external := o.Kind == ruleset.KindExternalIP || o.Kind == ruleset.KindNodePort || o.Kind == ruleset.KindLoadBalancerIP
			want := ruleset.VerdictNotServed
			if external || o.Verdict == ruleset.VerdictNotServed {
				want = o.Verdict
			}
			if got.Verdict != want {
				t.Fatalf("%v: model %v, trace %v %v (%+v)", p, got.Verdict, o.Kind, o.Verdict, o)
			}
			if want != ruleset.VerdictForward {
				continue
			}
			n := len(o.Targets)
			if len(got.Entries) != n {
				t.Fatalf("%v: model backends %v, trace targets %v", p, got.Entries, o.Targets)
			}
			for _, c := range o.Targets {
				if e := got.Entries[c.Endpoint]; e < m/n || e > (m+n-1)/n {
					t.Fatalf("%v: target %v owns %d of %d entries, want %d..%d", p, c.Endpoint, e, m, m/n, (m+n-1)/n)
				}
			}
			if got.Masquerade.IsValid() != o.Masquerade || o.Masquerade && got.Masquerade != node {
				t.Fatalf("%v: model masquerades to %v, trace %v", p, got.Masquerade, o.Masquerade)
			}
		}
	})
}

// Property: two nodes that hold the same Services and endpoints, built
// in different orders and with different histories (so with different
// group IDs and slots), pick the same backend for every flow to an
// external frontend with externalTrafficPolicy Cluster: their Maglev
// tables for it are equal entry by entry. IPv4 and IPv6.
func TestPropNorthSouthSameOnEveryNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		objs := genObjects(t, v6)
		cfg := func(node string) ruleset.Config {
			return ruleset.Config{Family: family(v6), Node: topology.Node{Name: node},
				ClusterCIDRs:      []netip.Prefix{netip.MustParsePrefix(convPrefix(podCIDR.String(), v6))},
				ServiceCIDRs:      []netip.Prefix{netip.MustParsePrefix(convPrefix(serviceCIDR.String(), v6))},
				NodePortAddresses: []netip.Addr{netip.MustParseAddr(conv(nodeIP.String(), v6))}}
		}
		reversed := slices.Clone(objs)
		slices.Reverse(reversed)
		rsA := fixture.Ruleset(t, cfg("node-a"), objs...)
		rsB := fixture.Ruleset(t, cfg("node-b"), reversed...)
		// Node b's IDs come after a history: a Service named before all
		// the others, since deleted, took the first group IDs.
		goneIP := conv("198.19.0.77", v6)
		gone := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "aaa"}, Spec: v1.ServiceSpec{
			ClusterIP: goneIP, ClusterIPs: []string{goneIP}, IPFamilies: []v1.IPFamily{family(v6)},
			Ports: []v1.ServicePort{{Name: "p", Protocol: v1.ProtocolTCP, Port: 80}}}}
		history := fixture.Ruleset(t, cfg("node-b"), append([]any{gone}, reversed...)...)
		cB := ebpf.Render(rsB, ebpf.Render(history, nil))
		cA := ebpf.Render(rsA, nil)
		const m = 251
		nsA, errA := ebpf.RenderNorthSouth(rsA, cA, m)
		nsB, errB := ebpf.RenderNorthSouth(rsB, cB, m)
		mA, mB := cA.Maps(), cB.Maps()
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		for _, s := range rsA.Services() {
			if s.ExternalPolicyLocal {
				continue
			}
			for _, f := range s.Frontends() {
				if f.Kind != ruleset.KindExternalIP && f.Kind != ruleset.KindLoadBalancerIP || !rsA.Owns(s, f) {
					continue
				}
				k := ebpf.ServiceKey{Addr: ebpf.AddrOf(f.Addr), Port: f.Port, Proto: map[v1.Protocol]uint8{v1.ProtocolTCP: ebpf.ProtoTCP, v1.ProtocolUDP: ebpf.ProtoUDP}[f.Protocol]}
				a, okA := nsA.Ext[k]
				b, okB := nsB.Ext[k]
				if okA != okB || a.Flags != b.Flags {
					t.Fatalf("%v: node a %+v %v, node b %+v %v", f, a, okA, b, okB)
				}
				if !okA || a.Flags&(ebpf.FlagReject|ebpf.FlagDrop) != 0 {
					continue
				}
				// The entries name slots, which differ between the
				// nodes; the backends in them do not.
				tabA, tabB := nsA.Maglev[a.ID], nsB.Maglev[b.ID]
				if tabA == nil || tabB == nil {
					t.Fatalf("%v: table on node a %v, on node b %v", f, tabA != nil, tabB != nil)
				}
				for i := range m {
					ea := mA.Backends[ebpf.BackendKey{ID: a.ID, Slot: uint32(tabA[i])}]
					eb := mB.Backends[ebpf.BackendKey{ID: b.ID, Slot: uint32(tabB[i])}]
					if ea.AddrPort() != eb.AddrPort() || !ea.AddrPort().IsValid() {
						t.Fatalf("%v: entry %d is %v on node a, %v on node b", f, i, ea.AddrPort(), eb.AddrPort())
					}
				}
			}
		}
	})
}
