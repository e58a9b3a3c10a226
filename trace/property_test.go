package trace_test

import (
	"math/big"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// Property: for any packet, Trace is deterministic; a forwarded flow has
// targets whose shares sum to 1, each an endpoint of the Service port that
// took it; a flow from outside the pod CIDR to an external frontend of a
// port with externalTrafficPolicy Local goes to this node's endpoints only;
// and only forwarded flows have targets.
func TestPropTrace(t *testing.T) {
	configs := map[string]*ruleset.Ruleset{
		"default":        cluster(t),
		"masqueradeAll":  cluster(t, func(c *ruleset.Config) { c.MasqueradeAll = true }),
		"noClusterCIDRs": cluster(t, func(c *ruleset.Config) { c.ClusterCIDRs = nil }),
		"localhost":      cluster(t, func(c *ruleset.Config) { c.LocalhostNodePorts = true }),
	}
	names := []string{"default", "masqueradeAll", "noClusterCIDRs", "localhost"}
	addrs := []string{"198.19.0.10", "198.19.0.11", "198.19.0.12", "198.19.0.13", "198.19.0.14", "198.19.0.15", "198.19.0.99",
		"198.19.128.12", "198.19.128.13", "198.19.128.14", "198.19.100.14", "198.18.0.1", "127.0.0.1", "198.18.64.2", "198.18.200.7", "203.0.113.9", "2001:db8::1"}
	ports := []uint16{53, 80, 81, 8080, 30011, 30012, 30013, 30014, 30099}
	rapid.Check(t, func(t *rapid.T) {
		rs := configs[rapid.SampledFrom(names).Draw(t, "config")]
		p := trace.Packet{
			Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}).Draw(t, "proto"),
			Src:      netip.AddrPortFrom(netip.MustParseAddr(rapid.SampledFrom(addrs).Draw(t, "src")), 40000),
			Dst:      netip.AddrPortFrom(netip.MustParseAddr(rapid.SampledFrom(addrs).Draw(t, "dst")), rapid.SampledFrom(ports).Draw(t, "port")),
			FromNode: rapid.Bool().Draw(t, "fromNode"),
			ToNode:   rapid.Bool().Draw(t, "toNode"),
		}
		opts := trace.Options{RejectUnknownPorts: rapid.Bool().Draw(t, "rejectUnknown")}
		o := trace.Trace(rs, p, opts)
		if diff := cmp.Diff(o, trace.Trace(rs, p, opts), cmp.Comparer(func(a, b *big.Rat) bool { return a.Cmp(b) == 0 }),
			cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }), cmp.Comparer(func(a, b affinity.Policy) bool { return a == b })); diff != "" {
			t.Fatalf("%v: not deterministic:\n%s", p, diff)
		}
		if o.Verdict != ruleset.VerdictForward {
			if len(o.Targets) > 0 {
				t.Fatalf("%v: %s with targets %v", p, o.Verdict, o.Targets)
			}
			return
		}
		s, ok := rs.Service(o.Service)
		if !ok || len(o.Targets) == 0 {
			t.Fatalf("%v: forwarded by %v (known %v) to %d targets", p, o.Service, ok, len(o.Targets))
		}
		sum := new(big.Rat)
		for _, c := range o.Targets {
			sum.Add(sum, c.Share)
			if !slices.ContainsFunc(s.Endpoints, func(e endpoints.Endpoint) bool { return e.AddrPort() == c.Endpoint }) {
				t.Fatalf("%v: target %v is no endpoint of %v", p, c.Endpoint, o.Service)
			}
			if c.Endpoint.Addr() == p.Src.Addr() && !c.Masquerade {
				t.Fatalf("%v: hairpin target %v not masqueraded", p, c.Endpoint)
			}
		}
		if sum.Cmp(big.NewRat(1, 1)) != 0 {
			t.Fatalf("%v: shares sum to %v", p, sum)
		}
		podCIDRs := rs.Config().ClusterCIDRs
		fromPod := slices.ContainsFunc(podCIDRs, func(c netip.Prefix) bool { return c.Contains(p.Src.Addr()) })
		if o.Kind != ruleset.KindClusterIP && s.ExternalPolicyLocal && !p.FromNode && !fromPod {
			for _, c := range o.Targets {
				if !c.Local || c.Masquerade && c.Endpoint.Addr() != p.Src.Addr() {
					t.Fatalf("%v: eTP Local from outside: target %+v", p, c)
				}
			}
		}
	})
}
