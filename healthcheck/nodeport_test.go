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
	"strconv"
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
	h := NewNodePortServers(false, nil)
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
// the addresses change; with none, it answers on every address, as
// kube-proxy's do when no node address matches.
func TestHealthServersListenOnNodeAddressesOnly(t *testing.T) {
	must := warnings.Must(t)
	port := freeLoopbackPort(t)
	src := newRulesetSource(t)
	h := NewNodePortServers(false, nil)
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
		{nil, map[netip.Addr]bool{one: true, two: true}},
		{[]netip.Addr{one}, map[netip.Addr]bool{one: true, two: false}},
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
	h := NewNodePortServers(false, nil)
	defer h.Close()
	must.Used(src.services.Update(localLB("lb", "198.19.0.1", port)))
	rulesets := src.build()
	src.services.Delete("ns", "lb")
	none := src.build()
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	for i := range 20 {
		h.Update(rulesets, []netip.Addr{addr.Addr()})
		h.Update(none, []netip.Addr{addr.Addr()})
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
		h := NewNodePortServers(tt.checkRange, nil)
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

// TestHandlerAnswers: 200 with the local endpoint count when the node has
// local endpoints and the proxy is healthy, 503 otherwise, in kube-proxy's
// JSON with serviceProxyHealthy saying the proxy's health.
func TestHandlerAnswers(t *testing.T) {
	for _, tt := range []struct {
		local   int
		healthy bool
		code    int
	}{
		{2, true, 200},
		{0, true, 503},
		{2, false, 503},
		{0, false, 503},
	} {
		h := NewNodePortServers(false, func() bool { return tt.healthy })
		h.servers[30256] = &healthServer{local: tt.local}
		rec := httptest.NewRecorder()
		h.handler(30256).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		var body struct {
			LocalEndpoints      int
			ServiceProxyHealthy bool
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tt.code || body.LocalEndpoints != tt.local || body.ServiceProxyHealthy != tt.healthy {
			t.Errorf("%d local endpoints, healthy %v: %d %+v, want %d", tt.local, tt.healthy, rec.Code, body, tt.code)
		}
		if got := rec.Header().Get("X-Load-Balancing-Endpoint-Weight"); got != strconv.Itoa(tt.local) {
			t.Errorf("%d local endpoints: weight header %q", tt.local, got)
		}
	}
}

// TestBusyPortRetried: a port another socket holds is reported as unbound
// by every Update, and served by the first Update after it is freed.
func TestBusyPortRetried(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := int32(busy.Addr().(*net.TCPAddr).Port)
	must := warnings.Must(t)
	src := newRulesetSource(t)
	h := NewNodePortServers(false, nil)
	defer h.Close()
	must.Used(src.services.Update(localLB("lb", "198.19.0.1", port)))
	rulesets := src.build()
	for range 2 {
		r := h.Update(rulesets, loopback)
		if r.Unbound != 1 || r.Serving != 0 || len(r.Errors) != 1 || !errors.Is(r.Errors[0], syscall.EADDRINUSE) {
			t.Fatalf("Update with the port busy: %+v", r)
		}
	}
	busy.Close()
	r := h.Update(rulesets, loopback)
	if r.Unbound != 0 || r.Serving != 1 || len(r.Errors) != 0 {
		t.Fatalf("Update with the port free: %+v", r)
	}
	if !answers(t, netip.AddrPortFrom(loopback[0], uint16(port))) {
		t.Fatalf("port %d not served once free", port)
	}
}

// TestConflictingPorts: a healthCheckNodePort shared by two Services is
// served for the first in name order, one that is another Service's
// nodePort is not served; each conflict is warned about once.
func TestConflictingPorts(t *testing.T) {
	src := newRulesetSource(t)
	b := localLB("b", "198.19.0.2", 30100)
	b.Spec.Ports[0].NodePort = 30081
	a := localLB("a", "198.19.0.1", 30100)
	c := localLB("c", "198.19.0.3", 30081) // b's nodePort
	c.Spec.Ports[0].NodePort = 30082
	must := warnings.Must(t)
	for _, svc := range []*v1.Service{b, a, c} {
		must.Used(src.services.Update(svc))
	}
	h := NewNodePortServers(true, nil)
	rulesets := src.build()
	var warnings []string
	for range 2 {
		var report Report
		want := h.wanted(rulesets, &report)
		if len(want) != 1 || want[30100] == nil || want[30100].service.Name != "a" {
			t.Fatalf("served %v, want 30100 for ns/a alone", want)
		}
		for _, w := range report.Warnings {
			warnings = append(warnings, w.String())
		}
	}
	if diff := cmp.Diff([]string{
		"Service ns/b: healthCheckNodePort 30100 is also Service ns/a's, which comes first: not served for this one",
		"Service ns/c: healthCheckNodePort 30081 is the nodePort of Service ns/b: not served",
	}, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
