package ebpf_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/trace"
)

// Property: the model of the tc programs' lookups, over the maps
// RenderNorthSouth makes, gives trace.Trace's outcome for every IPv4 flow
// arriving from outside (a client outside the pod network, or inside a
// source range): the same verdict (a reject is a drop at tc, so both are
// compared as refusals), the same targets, each owning ⌊M/N⌋ or ⌈M/N⌉ of
// the M Maglev entries (a share within 1/M of trace's 1/N), and
// masquerading to the node's address exactly when trace masquerades.
func TestPropNorthSouthMatchesTrace(t *testing.T) {
	srcs := []string{"203.0.113.9", "198.18.0.7", "198.51.100.1"}
	rapid.Check(t, func(t *rapid.T) {
		rs := genRuleset(t, false)
		c := ebpf.Render(rs, nil)
		const m = 251
		ns, err := ebpf.RenderNorthSouth(rs, c, m)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")
			src := netip.MustParseAddr(rapid.SampledFrom(srcs).Draw(t, "src"))
			dst := genDst(t, false)
			p := trace.Packet{Protocol: proto, Src: netip.AddrPortFrom(src, 40000), Dst: dst, ToNode: dst.Addr() == nodeIP}
			o := trace.Trace(rs, p, trace.Options{})
			num := map[v1.Protocol]uint8{v1.ProtocolTCP: ebpf.ProtoTCP, v1.ProtocolUDP: ebpf.ProtoUDP}[proto]
			got := ns.Lookup(c.Maps().NodeAddrs, num, src, dst)
			external := o.Kind == 3 || o.Kind == 2 || o.Kind == 4 // external IP, node port, load-balancer IP
			want := ebpf.NotService
			if external || o.Result == trace.NotService {
				want = map[trace.Result]ebpf.Verdict{trace.NotService: ebpf.NotService, trace.Rejected: ebpf.Reject, trace.Dropped: ebpf.Drop,
					trace.Firewalled: ebpf.Firewall, trace.Forwarded: ebpf.Forward}[o.Result]
			}
			if got.Verdict != want {
				t.Fatalf("%v: model %v, trace %v %v (%+v)", p, got.Verdict, o.Kind, o.Result, o)
			}
			if want != ebpf.Forward {
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
			if got.Masquerade.IsValid() != o.Masquerade || o.Masquerade && got.Masquerade != nodeIP {
				t.Fatalf("%v: model masquerades to %v, trace %v", p, got.Masquerade, o.Masquerade)
			}
		}
	})
}
