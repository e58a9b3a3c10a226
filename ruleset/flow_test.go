package ruleset_test

import (
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// flowFixture: web (a load balancer open to 198.18.32.0/24 only, endpoints
// on node-a and node-b), local (a node port with externalTrafficPolicy
// Local, its endpoint on node-b), empty (no endpoints) and sticky (ClientIP
// affinity for 10 s), for node-a.
func flowFixture(t *testing.T, stickyEndpoints ...ep) *ruleset.Ruleset {
	t.Helper()
	clientIP := func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(10))}}
	}
	return build(t, v4Config(func(c *ruleset.Config) { c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.1")} }),
		[]*v1.Service{
			service("ns", "web", "198.19.0.1", loadBalancer("198.19.2.1"), sourceRanges("198.18.32.0/24")),
			service("ns", "local", "198.19.0.2", nodePort, eTPLocal),
			service("ns", "empty", "198.19.0.3"),
			service("ns", "sticky", "198.19.0.4", clientIP),
		},
		[]*discovery.EndpointSlice{
			endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1", node: "node-a"}, ep{ip: "198.18.65.1", node: "node-b"}),
			endpointSlice("ns", "local", "local-1", ep{ip: "198.18.65.2", node: "node-b"}),
			endpointSlice("ns", "sticky", "sticky-1", stickyEndpoints...),
		})
}

var (
	allowedClient = netip.MustParseAddr("198.18.32.5")
	deniedClient  = netip.MustParseAddr("198.18.33.5")
)

func TestChoose(t *testing.T) {
	rs := flowFixture(t)
	for _, tt := range []struct {
		name    string
		service string
		kind    ruleset.FrontendKind
		src     ruleset.Client
		x       float64
		want    string // "" for none
	}{
		{"cluster IP, low x: the first target", "web", ruleset.KindClusterIP, ruleset.Client{Addr: deniedClient}, 0.1, "198.18.64.1:8080"},
		{"cluster IP, high x: the second target", "web", ruleset.KindClusterIP, ruleset.Client{Addr: deniedClient}, 0.9, "198.18.65.1:8080"},
		{"load-balancer IP from a source range", "web", ruleset.KindLoadBalancerIP, ruleset.Client{Addr: allowedClient}, 0.9, "198.18.65.1:8080"},
		{"load-balancer IP from outside the source ranges: firewalled", "web", ruleset.KindLoadBalancerIP, ruleset.Client{Addr: deniedClient}, 0.1, ""},
		{"Local policy, no local endpoint, from outside: dropped", "local", ruleset.KindNodePort, ruleset.Client{Addr: deniedClient}, 0.1, ""},
		{"Local policy, from the node: the cluster-wide targets", "local", ruleset.KindNodePort, ruleset.Client{Addr: netip.MustParseAddr("198.18.0.1"), FromNode: true}, 0.1, "198.18.65.2:8080"},
		{"no endpoints: rejected", "empty", ruleset.KindClusterIP, ruleset.Client{Addr: allowedClient}, 0.1, ""},
		{"a kind the Service has not", "empty", ruleset.KindNodePort, ruleset.Client{Addr: allowedClient}, 0.1, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := rs.Service(webPort("ns", tt.service))
			var sticky affinity.Table[servicemap.PortName]
			got := rs.Choose(&sticky, s, tt.kind, tt.src, time.Unix(0, 0), tt.x)
			if want, _ := netip.ParseAddrPort(tt.want); got != want {
				t.Errorf("Choose = %v, want %v", got, want)
			}
			if sticky.Len() != 0 {
				t.Errorf("without affinity, Choose recorded %d affinities", sticky.Len())
			}
		})
	}
}

// TestChooseAffinity: with ClientIP affinity, a client's new flows go where
// its last one went, whatever x, until the timeout passes or the target is
// no longer offered.
func TestChooseAffinity(t *testing.T) {
	a, b := ep{ip: "198.18.64.3", node: "node-a"}, ep{ip: "198.18.65.3", node: "node-b"}
	both, onlyA := flowFixture(t, a, b), flowFixture(t, a)
	var sticky affinity.Table[servicemap.PortName]
	start, other := time.Unix(1000, 0), netip.MustParseAddr("198.18.32.6")
	for _, step := range []struct {
		name   string
		rs     *ruleset.Ruleset
		client netip.Addr
		at     time.Duration
		x      float64
		want   string
	}{
		{"first flow: by x", both, allowedClient, 0, 0.9, "198.18.65.3:8080"},
		{"within the timeout: the same target, whatever x", both, allowedClient, 9 * time.Second, 0.1, "198.18.65.3:8080"},
		{"another client: by x", both, other, 9 * time.Second, 0.9, "198.18.65.3:8080"},
		{"the timeout counts from the last flow", both, allowedClient, 18 * time.Second, 0.1, "198.18.65.3:8080"},
		{"after the timeout: by x", both, allowedClient, 28 * time.Second, 0.1, "198.18.64.3:8080"},
		{"sticky again", both, allowedClient, 30 * time.Second, 0.9, "198.18.64.3:8080"},
		{"the other client's target is gone: picked again", onlyA, other, 12 * time.Second, 0.9, "198.18.64.3:8080"},
	} {
		s, _ := step.rs.Service(webPort("ns", "sticky"))
		got := step.rs.Choose(&sticky, s, ruleset.KindClusterIP, ruleset.Client{Addr: step.client}, start.Add(step.at), step.x)
		if got.String() != step.want {
			t.Errorf("%s: Choose = %v, want %s", step.name, got, step.want)
		}
	}
}

func TestOffers(t *testing.T) {
	rs := flowFixture(t)
	web, _ := rs.Service(webPort("ns", "web"))
	for _, tt := range []struct {
		name   string
		kind   ruleset.FrontendKind
		src    netip.Addr
		target string
		want   bool
	}{
		{"a target of the Service", ruleset.KindClusterIP, deniedClient, "198.18.64.1:8080", true},
		{"another address", ruleset.KindClusterIP, deniedClient, "198.18.99.1:8080", false},
		{"another port", ruleset.KindClusterIP, deniedClient, "198.18.64.1:9090", false},
		{"through the firewall", ruleset.KindLoadBalancerIP, allowedClient, "198.18.64.1:8080", true},
		{"firewalled: nothing", ruleset.KindLoadBalancerIP, deniedClient, "198.18.64.1:8080", false},
	} {
		if got := rs.Offers(web, tt.kind, ruleset.Client{Addr: tt.src}, netip.MustParseAddrPort(tt.target)); got != tt.want {
			t.Errorf("%s: Offers = %v, want %v", tt.name, got, tt.want)
		}
	}
}
