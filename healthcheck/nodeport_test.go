package healthcheck

import (
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// service is a ClusterIP Service ns/name with one port.
func service(name, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: ip, Ports: []v1.ServicePort{{Name: "p", Port: 80}}},
	}
}

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
	rs, _, ws := r.builder.Update(r.rs, ss, es)
	warnings.None(r.t, ws)
	r.rs = rs
	return map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: r.rs}
}

// TestHealthServersFollowRulesets: a health check node port server starts
// when a Service with one appears and stops when it goes, also when the
// Rulesets are made by Builder.Update.
func TestHealthServersFollowRulesets(t *testing.T) {
	must := warnings.Must(t)
	port := freeLoopbackPort(t)
	src := newRulesetSource(t)
	h := NewNodePortServers(false)
	defer h.Close()

	must.Used(src.services.Update(service("plain", "198.19.0.2")))
	update(t, h, src.build(), loopback)
	if len(h.servers) != 0 {
		t.Fatalf("servers %v without a health check node port", h.servers)
	}

	must.Used(src.services.Update(localLB("lb", "198.19.0.1", port)))
	update(t, h, src.build(), loopback)
	if hs, ok := h.servers[uint16(port)]; !ok || hs.service.Name != "lb" {
		t.Fatalf("no server on health check node port %d: %v", port, h.servers)
	}

	src.services.Delete("ns", "lb")
	update(t, h, src.build(), loopback)
	if len(h.servers) != 0 {
		t.Fatalf("servers %v after the Service went", h.servers)
	}
}

// TestHealthServersListenOnNodeAddressesOnly: a health check node port
// answers on the node's addresses and nowhere else (Linux routes all of
// 127.0.0.0/8 to lo, so 127.0.0.2 is a local address too), and moves when
// the addresses change.
func TestHealthServersListenOnNodeAddressesOnly(t *testing.T) {
	must := warnings.Must(t)
	port := freeLoopbackPort(t)
	src := newRulesetSource(t)
	h := NewNodePortServers(false)
	defer h.Close()
	must.Used(src.services.Update(localLB("lb", "198.19.0.1", port)))
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
		h.Update(rulesets, tt.addrs)
		for a, want := range tt.listening {
			if got := answers(t, netip.AddrPortFrom(a, uint16(port))); got != want {
				t.Errorf("node addresses %v: %s:%d answers %v, want %v", tt.addrs, a, port, got, want)
			}
		}
	}
}

// TestHealthServersStoppedAcceptNothing: once Update has stopped a server,
// its port refuses connections, also when the server had no time to begin
// serving (one thread: its goroutine has not run yet).
func TestHealthServersStoppedAcceptNothing(t *testing.T) {
	must := warnings.Must(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	port := freeLoopbackPort(t)
	src := newRulesetSource(t)
	h := NewNodePortServers(false)
	defer h.Close()
	must.Used(src.services.Update(localLB("lb", "198.19.0.1", port)))
	rulesets := src.build()
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	for i := range 20 {
		h.Update(rulesets, []netip.Addr{addr.Addr()})
		h.Update(rulesets, nil)
		if answers(t, addr) {
			t.Fatalf("round %d: %s answers after its server was stopped", i, addr)
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
	must := warnings.Must(t)
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
			must.Used(src.services.Update(localLB(name, netip.AddrFrom4([4]byte{198, 19, 0, byte(i)}).String(), port)))
		}
		h := NewNodePortServers(tt.checkRange)
		rulesets := src.build()
		var warnings []string
		for range 2 { // warned once, not every sync
			var report Report
			got := slices.Sorted(maps.Keys(h.wanted(rulesets, &report)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("checkRange %v: ports served (-want +got):\n%s", tt.checkRange, diff)
			}
			for _, w := range report.Warnings {
				warnings = append(warnings, w.String())
			}
		}
		if diff := cmp.Diff(tt.warnings, warnings); diff != "" {
			t.Errorf("checkRange %v: warnings (-want +got):\n%s", tt.checkRange, diff)
		}
	}
}

// update is Update, failing t on anything reported.
func update(t *testing.T, h *NodePortServers, rulesets map[v1.IPFamily]*ruleset.Ruleset, addrs []netip.Addr) {
	t.Helper()
	if r := h.Update(rulesets, addrs); len(r.Warnings) > 0 || len(r.Errors) > 0 {
		t.Fatalf("Update: %+v", r)
	}
}

// TestNoAddressReported: a server with no address to listen on is
// reported, with the Service and port.
func TestNoAddressReported(t *testing.T) {
	must := warnings.Must(t)
	src := newRulesetSource(t)
	h := NewNodePortServers(false)
	defer h.Close()
	must.Used(src.services.Update(localLB("lb", "198.19.0.1", 30001)))
	r := h.Update(src.build(), nil)
	if len(r.Errors) != 1 || !errors.Is(r.Errors[0], ErrNoAddress) {
		t.Fatalf("Update without addresses: %+v; want ErrNoAddress", r)
	}
}

// TestHandlerAnswers: 200 with the local endpoint count when the node has
// local endpoints, 503 otherwise, in kube-proxy's JSON.
func TestHandlerAnswers(t *testing.T) {
	h := NewNodePortServers(false)
	h.servers[30256] = &healthServer{local: 2}
	h.servers[30257] = &healthServer{local: 0}
	for port, want := range map[uint16]int{30256: 200, 30257: 503} {
		rec := httptest.NewRecorder()
		h.handler(port).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		var body struct{ LocalEndpoints int }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != want || body.LocalEndpoints != h.servers[port].local {
			t.Errorf("port %d: %d %+v, want %d with %d local endpoints", port, rec.Code, body, want, h.servers[port].local)
		}
	}
}
