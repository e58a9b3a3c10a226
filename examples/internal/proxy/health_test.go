package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// freeLoopbackPort returns a TCP port free on 127.0.0.1.
func freeLoopbackPort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// localLB is a LoadBalancer Service with externalTrafficPolicy Local and
// the given health check node port.
func localLB(name, clusterIP string, healthCheckNodePort int32) *v1.Service {
	lb := service(name, clusterIP)
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	lb.Spec.HealthCheckNodePort = healthCheckNodePort
	lb.Spec.Ports[0].NodePort = 30080
	lb.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.19.100.1"}}
	return lb
}

// rulesetSource builds IPv4 Rulesets with Builder.Update, as the proxy does.
type rulesetSource struct {
	t        *testing.T
	services *servicemap.Tracker
	slices   *endpoints.Tracker
	builder  *ruleset.Builder
	rs       *ruleset.Ruleset
}

func newRulesetSource(t *testing.T) *rulesetSource {
	t.Helper()
	b, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	if err != nil {
		t.Fatal(err)
	}
	return &rulesetSource{
		t:        t,
		services: servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{}),
		slices:   endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{}),
		builder:  b,
	}
}

func (r *rulesetSource) build() map[v1.IPFamily]*ruleset.Ruleset {
	ss, _ := r.services.Snapshot()
	es, _ := r.slices.Snapshot()
	r.rs, _, _ = r.builder.Update(r.rs, ss, es)
	return map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: r.rs}
}

// TestHealthServersFollowRulesets: a health check node port server starts
// when a Service with one appears and stops when it goes, also when the
// Rulesets are made by Builder.Update.
func TestHealthServersFollowRulesets(t *testing.T) {
	port := freeLoopbackPort(t)
	src := newRulesetSource(t)
	h := newHealthServers(discardLogger(), false)
	defer h.close()

	src.services.Update(service("plain", "198.19.0.2"))
	h.update(src.build(), loopback)
	if len(h.servers) != 0 {
		t.Fatalf("servers %v without a health check node port", h.servers)
	}

	src.services.Update(localLB("lb", "198.19.0.1", port))
	h.update(src.build(), loopback)
	if hs, ok := h.servers[uint16(port)]; !ok || hs.service.Name != "lb" {
		t.Fatalf("no server on health check node port %d: %v", port, h.servers)
	}

	src.services.Delete("ns", "lb")
	h.update(src.build(), loopback)
	if len(h.servers) != 0 {
		t.Fatalf("servers %v after the Service went", h.servers)
	}
}

// TestHealthServersListenOnNodeAddressesOnly: a health check node port
// answers on the node's addresses and nowhere else (Linux routes all of
// 127.0.0.0/8 to lo, so 127.0.0.2 is a local address too), and moves when
// the addresses change.
func TestHealthServersListenOnNodeAddressesOnly(t *testing.T) {
	port := freeLoopbackPort(t)
	src := newRulesetSource(t)
	h := newHealthServers(discardLogger(), false)
	defer h.close()
	src.services.Update(localLB("lb", "198.19.0.1", port))
	rulesets := src.build()

	one, two := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	for _, tt := range []struct {
		addrs     []netip.Addr
		listening map[netip.Addr]bool
	}{
		{[]netip.Addr{one}, map[netip.Addr]bool{one: true, two: false}},
		{[]netip.Addr{two}, map[netip.Addr]bool{one: false, two: true}},
		{[]netip.Addr{one, two}, map[netip.Addr]bool{one: true, two: true}},
		{nil, map[netip.Addr]bool{one: false, two: false}},
	} {
		h.update(rulesets, tt.addrs)
		for a, want := range tt.listening {
			if got := answers(t, netip.AddrPortFrom(a, uint16(port))); got != want {
				t.Errorf("node addresses %v: %s:%d answers %v, want %v", tt.addrs, a, port, got, want)
			}
		}
	}
}

// answers reports whether a TCP connection to addr is accepted; a refused
// one is false, any other error fails the test.
func answers(t *testing.T, addr netip.AddrPort) bool {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr.String(), 2*time.Second)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	conn.Close()
	return true
}

// TestHealthCheckNodePortRange: with the range checked (manifest mode), a
// port outside 30000-32767 gets no server and one warning naming the
// Service; unchecked (API mode, where the API server allocates the ports),
// every port is served.
func TestHealthCheckNodePortRange(t *testing.T) {
	ports := map[string]int32{"ssh": 22, "below": 29999, "first": 30000, "last": 32767, "above": 32768}
	for _, tt := range []struct {
		checkRange bool
		want       []uint16
		warnings   []string
	}{
		{true, []uint16{30000, 32767}, []string{
			"Service ns/above: healthCheckNodePort 32768 is outside the NodePort range 30000-32767: not served",
			"Service ns/below: healthCheckNodePort 29999 is outside the NodePort range 30000-32767: not served",
			"Service ns/ssh: healthCheckNodePort 22 is outside the NodePort range 30000-32767: not served",
		}},
		{false, []uint16{22, 29999, 30000, 32767, 32768}, nil},
	} {
		src := newRulesetSource(t)
		i := 0
		for name, port := range ports {
			i++
			src.services.Update(localLB(name, netip.AddrFrom4([4]byte{198, 19, 0, byte(i)}).String(), port))
		}
		var log bytes.Buffer
		h := newHealthServers(slog.New(slog.NewTextHandler(&log, nil)), tt.checkRange)
		rulesets := src.build()
		for range 2 { // warned once, not every sync
			got := slices.Sorted(maps.Keys(h.wanted(rulesets)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("checkRange %v: ports served (-want +got):\n%s", tt.checkRange, diff)
			}
		}
		if diff := cmp.Diff(tt.warnings, logged(log.String())); diff != "" {
			t.Errorf("checkRange %v: warnings (-want +got):\n%s", tt.checkRange, diff)
		}
	}
}

// logged returns the msg of every log line in text.
func logged(text string) []string {
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if _, msg, ok := strings.Cut(line, " msg="); ok {
			msg, _, _ = strings.Cut(msg, " level=")
			msgs = append(msgs, strings.Trim(msg, `"`))
		}
	}
	return msgs
}
