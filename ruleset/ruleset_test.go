package ruleset_test

import (
	"math/big"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

func TestRoutes(t *testing.T) {
	const ip = "198.19.0.10"
	tests := []struct {
		name string
		svc  *v1.Service
		eps  []ep
		cfg  ruleset.Config // v4Config() when zero
		want summary
	}{{
		name: "ClusterIP with endpoints",
		svc:  service("ns", "web", ip),
		eps:  []ep{b1, a1},
		want: summary{
			Internal: "cluster", External: "none",
			Cluster:   []string{"198.18.1.1:8080 r2 local", "198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.1.1:8080", "198.18.2.1:8080"},
		},
	}, {
		name: "ClusterIP without endpoints rejects",
		svc:  service("ns", "web", ip),
		want: summary{Internal: "reject", External: "none"},
	}, {
		name: "ClusterIP whose endpoints are all unusable rejects",
		svc:  service("ns", "web", ip),
		eps:  []ep{aG, bG, bU},
		want: summary{Internal: "reject", External: "none"},
	}, {
		name: "NodePort without endpoints rejects internal and external traffic",
		svc:  service("ns", "web", ip, nodePort),
		want: summary{Internal: "reject", External: "reject"},
	}, {
		name: "LoadBalancer with endpoints",
		svc:  service("ns", "web", ip, loadBalancer("198.19.200.1")),
		eps:  []ep{a1, b1},
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster:   []string{"198.18.1.1:8080 r2 local", "198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.1.1:8080", "198.18.2.1:8080"},
		},
	}, {
		name: "LoadBalancer without endpoints rejects",
		svc:  service("ns", "web", ip, loadBalancer("198.19.200.1")),
		want: summary{Internal: "reject", External: "reject"},
	}, {
		name: "ClusterIP with externalIPs is externally accessible",
		svc:  service("ns", "web", ip, externalIPs("198.19.100.1")),
		eps:  []ep{b1},
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster:     []string{"198.18.2.1:8080 r1"},
			Endpoints:   []string{"198.18.2.1:8080"},
			ExternalIPs: []string{"198.19.100.1"},
		},
	}, {
		name: "iTP Local with local endpoints",
		svc:  service("ns", "web", ip, iTPLocal),
		eps:  []ep{a1, b1, a2},
		want: summary{
			Internal: "local", External: "none",
			Local:     []string{"198.18.1.1:8080 r2 local", "198.18.1.2:8080 r1 local"},
			Endpoints: []string{"198.18.1.1:8080", "198.18.1.2:8080"},
		},
	}, {
		name: "iTP Local without local endpoints drops when others exist elsewhere",
		svc:  service("ns", "web", ip, iTPLocal),
		eps:  []ep{b1, b2},
		want: summary{Internal: "drop", External: "none"},
	}, {
		name: "iTP Local with only a terminating endpoint elsewhere drops",
		svc:  service("ns", "web", ip, iTPLocal),
		eps:  []ep{bT},
		want: summary{Internal: "drop", External: "none"},
	}, {
		name: "iTP Local without endpoints anywhere rejects",
		svc:  service("ns", "web", ip, iTPLocal),
		eps:  []ep{aG, bG},
		want: summary{Internal: "reject", External: "none"},
	}, {
		name: "iTP Local on a node that does not know its name drops",
		svc:  service("ns", "web", ip, iTPLocal),
		eps:  []ep{a1},
		cfg:  ruleset.Config{Family: v1.IPv4Protocol},
		want: summary{Internal: "drop", External: "none"},
	}, {
		name: "eTP Local NodePort with local endpoints",
		svc:  service("ns", "web", ip, nodePort, eTPLocal),
		eps:  []ep{a1, b1},
		want: summary{
			Internal: "cluster", External: "local",
			Cluster:             []string{"198.18.1.1:8080 r2 local", "198.18.2.1:8080 r1"},
			Local:               []string{"198.18.1.1:8080 r1 local"},
			Endpoints:           []string{"198.18.1.1:8080", "198.18.2.1:8080"},
			ExternalPolicyLocal: true,
		},
	}, {
		name: "eTP Local NodePort without local endpoints drops external traffic only",
		svc:  service("ns", "web", ip, nodePort, eTPLocal),
		eps:  []ep{b1, b2},
		want: summary{
			Internal: "cluster", External: "drop",
			// Still there, for traffic short-circuited from pods and the node.
			Cluster:             []string{"198.18.2.1:8080 r2", "198.18.2.2:8080 r1"},
			Endpoints:           []string{"198.18.2.1:8080", "198.18.2.2:8080"},
			ExternalPolicyLocal: true,
		},
	}, {
		name: "eTP Local NodePort without endpoints anywhere rejects",
		svc:  service("ns", "web", ip, nodePort, eTPLocal),
		eps:  []ep{bG},
		want: summary{Internal: "reject", External: "reject", ExternalPolicyLocal: true},
	}, {
		name: "eTP Local falls back to a local terminating endpoint",
		svc:  service("ns", "web", ip, nodePort, eTPLocal),
		eps:  []ep{aT, b1},
		want: summary{
			Internal: "cluster", External: "local",
			Cluster:             []string{"198.18.2.1:8080 r1"},
			Local:               []string{"198.18.1.9:8080 r1 local"},
			Endpoints:           []string{"198.18.1.9:8080", "198.18.2.1:8080"},
			ExternalPolicyLocal: true,
		},
	}, {
		name: "eTP Local LoadBalancer with local endpoints",
		svc:  service("ns", "web", ip, loadBalancer("198.19.200.1"), eTPLocal),
		eps:  []ep{a1, b1},
		want: summary{
			Internal: "cluster", External: "local",
			Cluster:             []string{"198.18.1.1:8080 r2 local", "198.18.2.1:8080 r1"},
			Local:               []string{"198.18.1.1:8080 r1 local"},
			Endpoints:           []string{"198.18.1.1:8080", "198.18.2.1:8080"},
			ExternalPolicyLocal: true,
		},
	}, {
		name: "eTP Local on a ClusterIP Service without externalIPs is ignored",
		svc:  service("ns", "web", ip, eTPLocal),
		eps:  []ep{b1},
		want: summary{
			Internal: "cluster", External: "none",
			Cluster:   []string{"198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.2.1:8080"},
		},
	}, {
		name: "eTP Local on a ClusterIP Service whose externalIPs are all of the other family is ignored",
		svc:  service("ns", "web", ip, eTPLocal, externalIPs("2001:db8:100::1")),
		eps:  []ep{b1},
		want: summary{
			Internal: "cluster", External: "none",
			Cluster:   []string{"198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.2.1:8080"},
		},
	}, {
		name: "eTP Local LoadBalancer without node ports nor ingress IPs of the family is ignored",
		svc: service("ns", "web", ip, loadBalancer("2001:db8:200::1"), eTPLocal, func(s *v1.Service) {
			s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
			s.Spec.Ports[0].NodePort = 0
		}),
		eps: []ep{b1},
		want: summary{
			Internal: "cluster", External: "none",
			Cluster:   []string{"198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.2.1:8080"},
		},
	}, {
		name: "eTP Local and iTP Local with local endpoints",
		svc:  service("ns", "web", ip, nodePort, eTPLocal, iTPLocal),
		eps:  []ep{a1, b1},
		want: summary{
			Internal: "local", External: "local",
			Cluster:             []string{"198.18.1.1:8080 r2 local", "198.18.2.1:8080 r1"},
			Local:               []string{"198.18.1.1:8080 r1 local"},
			Endpoints:           []string{"198.18.1.1:8080", "198.18.2.1:8080"},
			ExternalPolicyLocal: true,
		},
	}, {
		name: "eTP Local and iTP Local without local endpoints",
		svc:  service("ns", "web", ip, nodePort, eTPLocal, iTPLocal),
		eps:  []ep{b1},
		want: summary{
			Internal: "drop", External: "drop",
			Cluster:             []string{"198.18.2.1:8080 r1"},
			Endpoints:           []string{"198.18.2.1:8080"},
			ExternalPolicyLocal: true,
		},
	}, {
		name: "eTP Local and iTP Local without endpoints anywhere",
		svc:  service("ns", "web", ip, nodePort, eTPLocal, iTPLocal),
		want: summary{Internal: "reject", External: "reject", ExternalPolicyLocal: true},
	}, {
		name: "only terminating endpoints: the serving ones take the traffic",
		svc:  service("ns", "web", ip, nodePort),
		eps:  []ep{aT, bT, bG, bU},
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster:   []string{"198.18.1.9:8080 r2 local", "198.18.2.9:8080 r1"},
			Endpoints: []string{"198.18.1.9:8080", "198.18.2.9:8080"},
		},
	}, {
		name: "terminating endpoints are not used while one is ready",
		svc:  service("ns", "web", ip),
		eps:  []ep{aT, bT, b1},
		want: summary{
			Internal: "cluster", External: "none",
			Cluster:   []string{"198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.2.1:8080"},
		},
	}, {
		name: "IPv6",
		svc:  service("ns", "web", "2001:db8:19::10", nodePort),
		eps: []ep{
			{ip: "2001:db8:18::2", node: "node-b"},
			{ip: "2001:db8:18::1", node: "node-a"},
		},
		cfg: ruleset.Config{Family: v1.IPv6Protocol, Node: thisNode},
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster:   []string{"[2001:db8:18::1]:8080 r2 local", "[2001:db8:18::2]:8080 r1"},
			Endpoints: []string{"[2001:db8:18::1]:8080", "[2001:db8:18::2]:8080"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Family == "" {
				cfg = v4Config()
			}
			var eslices []*discovery.EndpointSlice
			if tt.eps != nil {
				eslices = append(eslices, endpointSlice("ns", "web", "web-1", tt.eps...))
			}
			rs, warnings := buildWarned(t, cfg, []*v1.Service{tt.svc}, eslices)
			if len(warnings) > 0 {
				t.Errorf("warnings: %v", warnings)
			}
			if n := len(rs.Services()); n != 1 {
				t.Fatalf("got %d Services, want 1", n)
			}
			s := rs.Services()[0]
			if diff := cmp.Diff(tt.want, summarize(s)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrafficDistribution(t *testing.T) {
	const ip = "198.19.0.10"
	sameZone := trafficDistribution(v1.ServiceTrafficDistributionPreferSameZone)
	hints := v4Config(func(c *ruleset.Config) { c.ComputeHints = true })
	// zone hints that do not match the endpoints' zones
	a1h := a1
	a1h.zoneHints = []string{"z2"}
	b1h := b1
	b1h.zoneHints = []string{"z1"}
	c1h := c1
	c1h.zoneHints = []string{"z1"}
	cT := ep{ip: "198.18.3.9", node: "node-c", zone: "z1", state: "terminating"}
	tests := []struct {
		name        string
		svc         *v1.Service
		eps         []ep
		cfg         ruleset.Config
		wantCluster []string
	}{{
		name:        "ComputeHints PreferSameZone: only same-zone ready endpoints",
		svc:         service("ns", "web", ip, sameZone),
		eps:         []ep{a1, b1, c1, cT, b2},
		cfg:         hints,
		wantCluster: []string{"198.18.1.1:8080 r2 local", "198.18.3.1:8080 r1"},
	}, {
		name:        "ComputeHints PreferClose behaves as PreferSameZone",
		svc:         service("ns", "web", ip, trafficDistribution(v1.ServiceTrafficDistributionPreferClose)),
		eps:         []ep{a1, b1, c1},
		cfg:         hints,
		wantCluster: []string{"198.18.1.1:8080 r2 local", "198.18.3.1:8080 r1"},
	}, {
		name:        "ComputeHints PreferSameZone replaces the slices' hints",
		svc:         service("ns", "web", ip, sameZone),
		eps:         []ep{a1h, b1h, c1h},
		cfg:         hints,
		wantCluster: []string{"198.18.1.1:8080 r2 local", "198.18.3.1:8080 r1"},
	}, {
		name:        "ComputeHints PreferSameZone with no ready endpoint in this zone uses all",
		svc:         service("ns", "web", ip, sameZone),
		eps:         []ep{b1, b2},
		cfg:         hints,
		wantCluster: []string{"198.18.2.1:8080 r2", "198.18.2.2:8080 r1"},
	}, {
		name:        "ComputeHints PreferSameNode: only this node's ready endpoints",
		svc:         service("ns", "web", ip, trafficDistribution(v1.ServiceTrafficDistributionPreferSameNode)),
		eps:         []ep{a1, b1, c1},
		cfg:         hints,
		wantCluster: []string{"198.18.1.1:8080 r1 local"},
	}, {
		name:        "ComputeHints without trafficDistribution uses all",
		svc:         service("ns", "web", ip),
		eps:         []ep{a1, b1, c1},
		cfg:         hints,
		wantCluster: []string{"198.18.1.1:8080 r3 local", "198.18.2.1:8080 r2", "198.18.3.1:8080 r1"},
	}, {
		name:        "without ComputeHints trafficDistribution needs hints in the slices",
		svc:         service("ns", "web", ip, sameZone),
		eps:         []ep{a1, b1, c1, cT},
		cfg:         v4Config(),
		wantCluster: []string{"198.18.1.1:8080 r3 local", "198.18.2.1:8080 r2", "198.18.3.1:8080 r1"},
	}, {
		name:        "without ComputeHints the slices' hints are honoured",
		svc:         service("ns", "web", ip, sameZone),
		eps:         []ep{a1h, b1h, c1h},
		cfg:         v4Config(),
		wantCluster: []string{"198.18.2.1:8080 r2", "198.18.3.1:8080 r1"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, warnings := buildWarned(t, tt.cfg, []*v1.Service{tt.svc}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", tt.eps...)})
			if len(warnings) > 0 {
				t.Errorf("warnings: %v", warnings)
			}
			s, ok := rs.Service(webPort("ns", "web"))
			if !ok {
				t.Fatal("Service missing")
			}
			if diff := cmp.Diff(tt.wantCluster, targetStrings(s.ClusterTargets)); diff != "" {
				t.Errorf("ClusterTargets (-want +got):\n%s", diff)
			}
			if s.Internal != ruleset.RouteCluster {
				t.Errorf("Internal = %v, want cluster", s.Internal)
			}
		})
	}
}

// A topology hint that keeps a local endpoint out of the cluster targets:
// Endpoints is still the sorted union of both target lists, each endpoint
// once, even when two slices list the same endpoint.
func TestEndpointsUnion(t *testing.T) {
	a1h := a1
	a1h.zoneHints = []string{"z2"}
	b1h := b1
	b1h.zoneHints = []string{"z1"}
	c1h := c1
	c1h.zoneHints = []string{"z1"}
	svc := service("ns", "web", "198.19.0.10", nodePort, eTPLocal)
	rs := build(t, v4Config(), []*v1.Service{svc}, []*discovery.EndpointSlice{
		endpointSlice("ns", "web", "web-2", c1h, b1h),
		endpointSlice("ns", "web", "web-1", b1h, a1h),
	})
	s, _ := rs.Service(webPort("ns", "web"))
	want := summary{
		Internal: "cluster", External: "local",
		Cluster:             []string{"198.18.2.1:8080 r2", "198.18.3.1:8080 r1"},
		Local:               []string{"198.18.1.1:8080 r1 local"},
		Endpoints:           []string{"198.18.1.1:8080", "198.18.2.1:8080", "198.18.3.1:8080"},
		ExternalPolicyLocal: true,
	}
	if diff := cmp.Diff(want, summarize(s)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestTargets(t *testing.T) {
	eps := []ep{
		{ip: "198.18.2.4", node: "node-b"},
		{ip: "198.18.1.3", node: "node-a"},
		{ip: "198.18.9.9"}, // node unknown
		{ip: "198.18.1.1", node: "node-a"},
		{ip: "198.18.2.2", node: "node-b"},
	}
	svc := service("ns", "web", "198.19.0.10", nodePort, eTPLocal)
	rs := build(t, v4Config(), []*v1.Service{svc}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", eps...)})
	s, _ := rs.Service(webPort("ns", "web"))
	ap := netip.MustParseAddrPort
	wantCluster := []ruleset.Target{
		{Endpoint: ap("198.18.1.1:8080"), Local: true},
		{Endpoint: ap("198.18.1.3:8080"), Local: true},
		{Endpoint: ap("198.18.2.2:8080"), Local: false},
		{Endpoint: ap("198.18.2.4:8080"), Local: false},
		{Endpoint: ap("198.18.9.9:8080"), Local: false},
	}
	wantLocal := []ruleset.Target{
		{Endpoint: ap("198.18.1.1:8080"), Local: true},
		{Endpoint: ap("198.18.1.3:8080"), Local: true},
	}
	if diff := cmp.Diff(wantCluster, s.ClusterTargets, cmpOpts); diff != "" {
		t.Errorf("ClusterTargets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLocal, s.LocalTargets, cmpOpts); diff != "" {
		t.Errorf("LocalTargets (-want +got):\n%s", diff)
	}
	for i := range s.ClusterTargets {
		if got, want := ruleset.Probability(i, len(s.ClusterTargets)), big.NewRat(1, int64(5-i)); got.Cmp(want) != 0 {
			t.Errorf("target %d: Probability = %v, want %v", i, got, want)
		}
	}

	// With no node name nothing is local.
	rs = build(t, ruleset.Config{Family: v1.IPv4Protocol}, []*v1.Service{svc}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", eps...)})
	s, _ = rs.Service(webPort("ns", "web"))
	for _, tg := range s.ClusterTargets {
		if tg.Local {
			t.Errorf("without a node name, target %v is Local", tg.Endpoint)
		}
	}
	if s.LocalTargets != nil || s.External != ruleset.RouteDrop {
		t.Errorf("without a node name: LocalTargets %v, External %v; want none and drop", s.LocalTargets, s.External)
	}
}

func TestFamilyMismatch(t *testing.T) {
	svc := service("ns", "web", "198.19.0.10", func(s *v1.Service) {
		s.Spec.ClusterIPs = []string{"198.19.0.10", "2001:db8:19::10"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP})
	})
	ss, es := snapshots(t, v1.IPv6Protocol, []*v1.Service{svc}, nil)
	b, err := ruleset.NewBuilder(v4Config())
	if err != nil {
		t.Fatal(err)
	}
	rs, warnings := b.Build(ss, es)
	if n := len(rs.Services()); n != 0 {
		t.Errorf("got %d Services from an IPv6 snapshot in an IPv4 ruleset, want 0", n)
	}
	want := []svcproxy.Warning{
		{Kind: "Service", Namespace: "ns", Name: "web", Reason: `port "dns" is IPv6, the ruleset is IPv4: skipped`},
		{Kind: "Service", Namespace: "ns", Name: "web", Reason: `port "http" is IPv6, the ruleset is IPv4: skipped`},
	}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	// The same snapshot in an IPv6 ruleset is used.
	b6, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv6Protocol})
	if err != nil {
		t.Fatal(err)
	}
	rs, warnings = b6.Build(ss, es)
	if len(rs.Services()) != 2 || len(warnings) != 0 {
		t.Errorf("IPv6 ruleset: %d Services, warnings %v; want 2 and none", len(rs.Services()), warnings)
	}
}

func TestUsesFirewall(t *testing.T) {
	tests := []struct {
		name string
		svc  *v1.Service
		want bool
	}{
		{"LoadBalancer with source ranges", service("ns", "web", "198.19.0.10", loadBalancer("198.19.200.1"), sourceRanges("203.0.113.0/24")), true},
		{"LoadBalancer without source ranges", service("ns", "web", "198.19.0.10", loadBalancer("198.19.200.1")), false},
		{"LoadBalancer without ingress IP", service("ns", "web", "198.19.0.10", loadBalancer(), sourceRanges("203.0.113.0/24")), false},
		{"LoadBalancer with source ranges of the other family only", service("ns", "web", "198.19.0.10", loadBalancer("198.19.200.1"), sourceRanges("2001:db8::/64")), false},
		{"ClusterIP", service("ns", "web", "198.19.0.10"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := build(t, v4Config(), []*v1.Service{tt.svc}, nil)
			s, _ := rs.Service(webPort("ns", "web"))
			if got := s.UsesFirewall(); got != tt.want {
				t.Errorf("UsesFirewall() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRulesetServices(t *testing.T) {
	svcs := []*v1.Service{
		service("ns2", "b", "198.19.0.12"),
		service("ns1", "z", "198.19.0.13"),
		service("ns1", "a", "198.19.0.11", func(s *v1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP})
		}),
	}
	rs := build(t, v4Config(), svcs, nil)
	var got []servicemap.PortName
	for _, s := range rs.Services() {
		got = append(got, s.Name)
	}
	want := []servicemap.PortName{
		{Namespace: "ns1", Name: "a", Port: "dns", Protocol: v1.ProtocolUDP},
		webPort("ns1", "a"),
		webPort("ns1", "z"),
		webPort("ns2", "b"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Services() order (-want +got):\n%s", diff)
	}
	for _, name := range want {
		s, ok := rs.Service(name)
		if !ok || s.Name != name {
			t.Errorf("Service(%v) = %v, %v", name, s, ok)
		}
	}
	for _, name := range []servicemap.PortName{
		{Namespace: "ns1", Name: "a", Port: "dns", Protocol: v1.ProtocolTCP},
		webPort("ns1", "b"),
		webPort("ns3", "a"),
		{},
	} {
		if s, ok := rs.Service(name); ok {
			t.Errorf("Service(%v) = %v, want not found", name, s.Name)
		}
	}
	if cfg := rs.Config(); cfg.Family != v1.IPv4Protocol || cfg.Node != thisNode {
		t.Errorf("Config() = %+v", cfg)
	}
}

func TestRouteString(t *testing.T) {
	for r, want := range map[ruleset.Route]string{
		ruleset.RouteNone:    "none",
		ruleset.RouteCluster: "cluster",
		ruleset.RouteLocal:   "local",
		ruleset.RouteReject:  "reject",
		ruleset.RouteDrop:    "drop",
		ruleset.Route(42):    "Route(42)",
	} {
		if got := r.String(); got != want {
			t.Errorf("Route(%d).String() = %q, want %q", uint8(r), got, want)
		}
	}
}

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
