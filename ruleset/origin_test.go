package ruleset_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

func TestClientOf(t *testing.T) {
	nodeAddrs := []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("198.18.0.1")}
	for _, tc := range []struct {
		name   string
		cfg    ruleset.Config
		origin ruleset.Origin
		want   ruleset.Client
	}{
		{"outside", v4Config(), ruleset.OriginOutside, ruleset.Client{Addr: netip.IPv4Unspecified()}},
		{"pod: last address of the cluster CIDR", v4Config(func(c *ruleset.Config) {
			c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")}
		}), ruleset.OriginPod, ruleset.Client{Addr: netip.MustParseAddr("198.18.127.255")}},
		{"pod: a cluster CIDR whose last address is the node's is passed over", v4Config(func(c *ruleset.Config) {
			c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.0.1/32"), netip.MustParsePrefix("198.18.1.0/24")}
		}), ruleset.OriginPod, ruleset.Client{Addr: netip.MustParseAddr("198.18.1.255")}},
		{"pod without cluster CIDRs is the outside", v4Config(), ruleset.OriginPod, ruleset.Client{Addr: netip.IPv4Unspecified()}},
		{"node: its address of the family", v4Config(), ruleset.OriginNode, ruleset.Client{Addr: netip.MustParseAddr("198.18.0.1"), FromNode: true}},
		{"node, IPv6", ruleset.Config{Family: v1.IPv6Protocol}, ruleset.OriginNode, ruleset.Client{Addr: netip.MustParseAddr("2001:db8::1"), FromNode: true}},
		{"unknown origin", v4Config(), ruleset.Origin(9), ruleset.Client{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := build(t, tc.cfg, nil, nil)
			if got := rs.ClientOf(tc.origin, nodeAddrs); got != tc.want {
				t.Errorf("ClientOf(%v) = %+v, want %+v", tc.origin, got, tc.want)
			}
		})
	}
	var nilRS *ruleset.Ruleset
	if got := nilRS.ClientOf(ruleset.OriginNode, nil); got != (ruleset.Client{Addr: netip.IPv4Unspecified(), FromNode: true}) {
		t.Errorf("nil Ruleset: ClientOf(node) = %+v", got)
	}
}

// TestDecidePerOrigin checks that one Decide call gives the whole answer
// for each origin, the source-range firewall included, on a
// LoadBalancer Service with externalTrafficPolicy Local and source ranges.
func TestDecidePerOrigin(t *testing.T) {
	cfg := v4Config(func(c *ruleset.Config) {
		c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.128.0/17")}
		c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.1")}
	})
	svc := service("ns", "web", "198.19.0.10", loadBalancer("198.19.100.1"), eTPLocal, sourceRanges("198.18.0.0/16"))
	rs := build(t, cfg, []*v1.Service{svc}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "a",
		ep{ip: "198.18.128.5", node: "node-a"}, ep{ip: "198.18.200.6", node: "node-b"})})
	s, _ := rs.Service(webPort("ns", "web"))
	type want struct {
		verdict     ruleset.Verdict
		targets     int
		masq, short bool
	}
	for _, tc := range []struct {
		kind   ruleset.FrontendKind
		origin ruleset.Origin
		want   want
	}{
		{ruleset.KindLoadBalancerIP, ruleset.OriginOutside, want{verdict: ruleset.VerdictFirewall}},
		{ruleset.KindLoadBalancerIP, ruleset.OriginPod, want{ruleset.VerdictForward, 2, false, true}},
		{ruleset.KindLoadBalancerIP, ruleset.OriginNode, want{ruleset.VerdictForward, 2, true, true}},
		{ruleset.KindNodePort, ruleset.OriginOutside, want{ruleset.VerdictForward, 1, false, false}},
		{ruleset.KindClusterIP, ruleset.OriginOutside, want{ruleset.VerdictForward, 2, true, false}},
		{ruleset.KindClusterIP, ruleset.OriginPod, want{ruleset.VerdictForward, 2, false, false}},
		{ruleset.KindClusterIP, ruleset.OriginNode, want{ruleset.VerdictForward, 2, true, false}},
	} {
		d := rs.Decide(s, tc.kind, rs.ClientOf(tc.origin, nil))
		got := want{d.Verdict, len(d.Targets), d.Masquerade, d.ShortCircuit}
		if got != tc.want {
			t.Errorf("%v from %v: %+v, want %+v", tc.kind, tc.origin, got, tc.want)
		}
		for _, c := range d.Targets {
			if c.Share.Cmp(ruleset.Share(len(d.Targets))) != 0 {
				t.Errorf("%v from %v: share %v of %d targets", tc.kind, tc.origin, c.Share, len(d.Targets))
			}
		}
	}
}

// TestDecideZonedSource checks that an IPv6 source's zone does not change
// what the rules tell of it: a pod address with a zone is still a pod's,
// and a target's own address with a zone is still hairpin.
func TestDecideZonedSource(t *testing.T) {
	cfg := ruleset.Config{Family: v1.IPv6Protocol, Node: thisNode, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8:18::/48")}}
	svc := service("ns", "web", "2001:db8:19::10")
	rs := build(t, cfg, []*v1.Service{svc}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "a", ep{ip: "2001:db8:18::9", node: "node-a"})})
	s, _ := rs.Service(webPort("ns", "web"))
	d := rs.Decide(s, ruleset.KindClusterIP, ruleset.Client{Addr: netip.MustParseAddr("2001:db8:18::7%eth0")})
	if d.Verdict != ruleset.VerdictForward || d.Masquerade {
		t.Errorf("zoned pod source: %+v, want forwarded, not masqueraded", d)
	}
	d = rs.Decide(s, ruleset.KindClusterIP, ruleset.Client{Addr: netip.MustParseAddr("2001:db8:18::9%eth0")})
	if len(d.Targets) != 1 || !d.Targets[0].Masquerade {
		t.Errorf("zoned copy of the target's address: %+v, want hairpin (masqueraded)", d)
	}
}

// TestNilRulesetAndService checks that a nil Ruleset reads as empty and a
// nil or zero Service as one with no frontend.
func TestNilRulesetAndService(t *testing.T) {
	var rs *ruleset.Ruleset
	if rs.Len() != 0 || rs.Services() != nil || rs.ServedFrontends() != nil || rs.SharedDestinations() != nil ||
		rs.Config().Family != "" || rs.ServicesAt(ruleset.Frontend{}) != nil {
		t.Error("a nil Ruleset is not empty")
	}
	if _, _, ok := rs.Owner(ruleset.Frontend{}); ok {
		t.Error("a nil Ruleset has an owner")
	}
	for _, s := range []*ruleset.Service{nil, {}} {
		if d := rs.Decide(s, ruleset.KindClusterIP, ruleset.Client{}); d.Verdict != ruleset.VerdictNotServed {
			t.Errorf("Decide(%v) = %v", s, d.Verdict)
		}
		if s.Frontends() != nil || s.UsesFirewall() || s.Firewalled(ruleset.KindLoadBalancerIP, netip.Addr{}) || !s.Equal(nil) {
			t.Errorf("Service %v has frontends or a firewall, or is not equal to nil", s)
		}
	}
	if ch := ruleset.Diff(build(t, v4Config(), []*v1.Service{service("ns", "web", "198.19.0.10")}, nil), nil); len(ch.Removed) != 1 {
		t.Errorf("Diff(one Service, nil) = %+v, want it removed", ch)
	}
}
