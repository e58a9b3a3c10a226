package ruleset_test

import (
	"math/big"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

func TestExternalTraffic(t *testing.T) {
	local := ep{ip: "198.18.1.1", node: thisNode.Name}
	remote := ep{ip: "198.18.2.2", node: "node-b"}
	tests := []struct {
		name     string
		mods     []func(*v1.Service)
		eps      []ep
		external ruleset.Route
		want     ruleset.ExternalTraffic
	}{
		{"no external frontend", nil, []ep{local}, ruleset.RouteNone, ruleset.ExternalTraffic{}},
		{"Cluster policy", []func(*v1.Service){nodePort}, []ep{remote}, ruleset.RouteCluster,
			ruleset.ExternalTraffic{Steered: true, Masquerade: true}},
		{"Cluster policy, no endpoints", []func(*v1.Service){nodePort}, nil, ruleset.RouteReject, ruleset.ExternalTraffic{}},
		{"Local policy, local endpoint", []func(*v1.Service){loadBalancer("198.19.128.1"), eTPLocal}, []ep{local, remote}, ruleset.RouteLocal,
			ruleset.ExternalTraffic{Steered: true, ShortCircuit: true}},
		{"Local policy, remote endpoints only", []func(*v1.Service){externalIPs("198.18.0.100"), eTPLocal}, []ep{remote}, ruleset.RouteDrop,
			ruleset.ExternalTraffic{Steered: true, ShortCircuit: true}},
		{"Local policy, no endpoints", []func(*v1.Service){nodePort, eTPLocal}, nil, ruleset.RouteReject, ruleset.ExternalTraffic{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var slices []*discovery.EndpointSlice
			if tt.eps != nil {
				slices = append(slices, endpointSlice("ns", "svc", "svc-1", tt.eps...))
			}
			rs := build(t, v4Config(), []*v1.Service{service("ns", "svc", "198.19.0.10", tt.mods...)}, slices)
			s, _ := rs.Service(webPort("ns", "svc"))
			if s.External != tt.external {
				t.Errorf("External = %v, want %v", s.External, tt.external)
			}
			if diff := cmp.Diff(tt.want, s.ExternalTraffic); diff != "" {
				t.Errorf("ExternalTraffic (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClusterIPMasquerade(t *testing.T) {
	tests := []struct {
		name string
		cfg  ruleset.Config
		want ruleset.Masquerade
	}{
		{"no cluster CIDRs", v4Config(), ruleset.MasqueradeNone},
		{"cluster CIDRs", v4Config(func(c *ruleset.Config) { c.ClusterCIDRs = pfx("198.18.0.0/16") }), ruleset.MasqueradeOffCluster},
		{"MasqueradeAll", v4Config(func(c *ruleset.Config) { c.MasqueradeAll = true }), ruleset.MasqueradeAll},
		{"MasqueradeAll and cluster CIDRs", v4Config(func(c *ruleset.Config) { c.MasqueradeAll, c.ClusterCIDRs = true, pfx("198.18.0.0/16") }), ruleset.MasqueradeAll},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := build(t, tt.cfg, []*v1.Service{service("ns", "svc", "198.19.0.10")}, nil)
			s, _ := rs.Service(webPort("ns", "svc"))
			if s.ClusterIPMasquerade != tt.want {
				t.Errorf("ClusterIPMasquerade = %v, want %v", s.ClusterIPMasquerade, tt.want)
			}
		})
	}
}

// TestRoutesHaveTargets: a route that spreads over targets has targets,
// whatever the endpoints and policies.
func TestRoutesHaveTargets(t *testing.T) {
	here, there := ep{ip: "198.18.1.1", node: thisNode.Name}, ep{ip: "198.18.2.2", node: "node-b"}
	hereTerm := ep{ip: "198.18.1.3", node: thisNode.Name, state: "terminating"}
	unready := ep{ip: "198.18.2.4", node: "node-b", state: "unready"}
	policies := [][]func(*v1.Service){
		{nodePort}, {nodePort, eTPLocal}, {nodePort, iTPLocal}, {nodePort, eTPLocal, iTPLocal},
	}
	for _, eps := range [][]ep{nil, {here}, {there}, {hereTerm, there}, {unready}, {hereTerm}} {
		for _, mods := range policies {
			var slices []*discovery.EndpointSlice
			if eps != nil {
				slices = append(slices, endpointSlice("ns", "svc", "svc-1", eps...))
			}
			rs := build(t, v4Config(), []*v1.Service{service("ns", "svc", "198.19.0.10", mods...)}, slices)
			s, _ := rs.Service(webPort("ns", "svc"))
			for _, r := range []ruleset.Route{s.Internal, s.External} {
				if r == ruleset.RouteCluster && len(s.ClusterTargets) == 0 || r == ruleset.RouteLocal && len(s.LocalTargets) == 0 {
					t.Errorf("endpoints %v, %d policy mods: route %v without targets (Internal %v, External %v)", eps, len(mods), r, s.Internal, s.External)
				}
			}
			if s.ExternalTraffic.ShortCircuit && len(s.ClusterTargets) == 0 {
				t.Errorf("endpoints %v: ShortCircuit without cluster targets", eps)
			}
		}
	}
}

func TestTargetShare(t *testing.T) {
	eps := []ep{{ip: "198.18.1.1", node: thisNode.Name}, {ip: "198.18.2.2", node: "node-b"}, {ip: "198.18.2.3", node: "node-b"}}
	rs := build(t, v4Config(), []*v1.Service{service("ns", "svc", "198.19.0.10")}, []*discovery.EndpointSlice{endpointSlice("ns", "svc", "svc-1", eps...)})
	s, _ := rs.Service(webPort("ns", "svc"))
	reached := big.NewRat(1, 1) // the chance a walk of the list reaches target i
	n := len(s.ClusterTargets)
	if n != 3 || ruleset.Share(n).Cmp(big.NewRat(1, 3)) != 0 {
		t.Fatalf("%d targets, Share %v; want 3, 1/3", n, ruleset.Share(max(n, 1)))
	}
	for i := range s.ClusterTargets {
		// The cascade gives each target its share.
		got := new(big.Rat).Mul(reached, ruleset.Probability(i, n))
		if got.Cmp(ruleset.Share(n)) != 0 {
			t.Errorf("target %d: cascade gives %v, Share says %v", i, got, ruleset.Share(n))
		}
		reached.Sub(reached, got)
	}
}

func TestOwner(t *testing.T) {
	some := func(svc, ip string) *discovery.EndpointSlice {
		return endpointSlice("ns", svc, svc+"-1", ep{ip: ip, node: "node-b"})
	}
	lb := netip.MustParseAddr("198.18.0.100")
	at := ruleset.Frontend{Addr: lb, Protocol: v1.ProtocolTCP, Port: 80}
	type owner struct {
		Name string
		Kind ruleset.FrontendKind
	}
	tests := []struct {
		name   string
		svcs   []*v1.Service
		slices []*discovery.EndpointSlice
		f      ruleset.Frontend
		want   owner
	}{{
		name:   "one claimant",
		svcs:   []*v1.Service{service("ns", "a", "198.19.0.10", externalIPs("198.18.0.100"))},
		slices: []*discovery.EndpointSlice{some("a", "198.18.2.1")},
		f:      at, want: owner{"a", ruleset.KindExternalIP},
	}, {
		name: "both forward: the first in name order",
		svcs: []*v1.Service{
			service("ns", "b", "198.19.0.11", externalIPs("198.18.0.100")),
			service("ns", "a", "198.19.0.10", loadBalancer("198.18.0.100")),
		},
		slices: []*discovery.EndpointSlice{some("a", "198.18.2.1"), some("b", "198.18.2.2")},
		f:      at, want: owner{"a", ruleset.KindLoadBalancerIP},
	}, {
		name: "the first in name order rejects: the one that forwards wins",
		svcs: []*v1.Service{
			service("ns", "a", "198.19.0.10", externalIPs("198.18.0.100")),
			service("ns", "b", "198.19.0.11", externalIPs("198.18.0.100")),
		},
		slices: []*discovery.EndpointSlice{some("b", "198.18.2.2")},
		f:      at, want: owner{"b", ruleset.KindExternalIP},
	}, {
		name: "both reject: the first in name order",
		svcs: []*v1.Service{
			service("ns", "b", "198.19.0.11", externalIPs("198.18.0.100")),
			service("ns", "a", "198.19.0.10", externalIPs("198.18.0.100")),
		},
		f: at, want: owner{"a", ruleset.KindExternalIP},
	}, {
		name: "Local policy without local endpoints still steers: it wins in name order",
		svcs: []*v1.Service{
			service("ns", "a", "198.19.0.10", externalIPs("198.18.0.100"), eTPLocal),
			service("ns", "b", "198.19.0.11", externalIPs("198.18.0.100")),
		},
		slices: []*discovery.EndpointSlice{some("a", "198.18.2.1"), some("b", "198.18.2.2")},
		f:      at, want: owner{"a", ruleset.KindExternalIP},
	}, {
		name: "a cluster IP that drops loses to an external IP that forwards",
		svcs: []*v1.Service{
			service("ns", "a", "198.18.0.100", iTPLocal),
			service("ns", "b", "198.19.0.11", externalIPs("198.18.0.100")),
		},
		slices: []*discovery.EndpointSlice{some("a", "198.18.2.1"), some("b", "198.18.2.2")},
		f:      at, want: owner{"b", ruleset.KindExternalIP},
	}, {
		name: "within one port: the cluster IP before its external IP",
		svcs: []*v1.Service{
			service("ns", "a", "198.18.0.100", externalIPs("198.18.0.100")),
		},
		slices: []*discovery.EndpointSlice{some("a", "198.18.2.1")},
		f:      at, want: owner{"a", ruleset.KindClusterIP},
	}, {
		name: "node port: the one that forwards",
		svcs: []*v1.Service{
			service("ns", "a", "198.19.0.10", nodePort),
			service("ns", "b", "198.19.0.11", nodePort),
		},
		slices: []*discovery.EndpointSlice{some("b", "198.18.2.2")},
		f:      ruleset.Frontend{Kind: ruleset.KindNodePort, Protocol: v1.ProtocolTCP, Port: 30080},
		want:   owner{"b", ruleset.KindNodePort},
	}, {
		name: "the cluster IP as a whole: the first in name order",
		svcs: []*v1.Service{
			service("ns", "b", "198.19.0.10"),
			service("ns", "a", "198.19.0.10", func(s *v1.Service) { s.Spec.Ports[0].Port = 81 }),
		},
		slices: []*discovery.EndpointSlice{some("b", "198.18.2.2")},
		f:      ruleset.Frontend{Kind: ruleset.KindClusterAddress, Addr: netip.MustParseAddr("198.19.0.10")},
		want:   owner{"a", ruleset.KindClusterAddress},
	}, {
		name: "nobody",
		svcs: []*v1.Service{service("ns", "a", "198.19.0.10")},
		f:    at,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := build(t, v4Config(), tt.svcs, tt.slices)
			var got owner
			s, kind, ok := rs.Owner(tt.f)
			if ok {
				got = owner{s.Name.Name, kind}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Owner(%v) (-want +got):\n%s", tt.f, diff)
			}
			// Owns agrees, for every frontend of every port there.
			for _, s := range rs.Services() {
				for _, f := range s.Frontends() {
					if f.Addr != tt.f.Addr || f.Protocol != tt.f.Protocol || f.Port != tt.f.Port {
						continue
					}
					want := ok && s.Name.Name == tt.want.Name && f.Kind == tt.want.Kind
					if got := rs.Owns(s, f); got != want {
						t.Errorf("Owns(%v, %v) = %v, want %v", s.Name, f, got, want)
					}
				}
			}
		})
	}
}

func TestProbabilityAndShare(t *testing.T) {
	for _, tc := range []struct {
		i, n        int
		probability string
	}{
		{0, 1, "1"},
		{0, 3, "1/3"},
		{1, 3, "1/2"},
		{2, 3, "1"},
		{3, 3, "0"},
		{-1, 3, "0"},
		{0, 0, "0"},
	} {
		if got := ruleset.Probability(tc.i, tc.n).RatString(); got != tc.probability {
			t.Errorf("Probability(%d, %d) = %q, want %q", tc.i, tc.n, got, tc.probability)
		}
	}
	for _, tc := range []struct {
		n     int
		share string
	}{{1, "1"}, {4, "1/4"}, {0, "0"}, {-2, "0"}} {
		if got := ruleset.Share(tc.n).RatString(); got != tc.share {
			t.Errorf("Share(%d) = %q, want %q", tc.n, got, tc.share)
		}
	}
}
