package proxy

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/source"
	"github.com/svcproxy/svcproxy/state"
	"github.com/svcproxy/svcproxy/topology"
)

// kube-proxy's names of its nfacct metrics (pkg/proxy/metrics).
const (
	invalidMetric   = "kubeproxy_iptables_ct_state_invalid_dropped_packets_total"
	localhostMetric = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total"
)

// fakeCounters reads counters from a map; a name it lacks fails.
type fakeCounters struct {
	values map[string]uint64
	err    error
}

func (f fakeCounters) Counter(name string) (uint64, error) {
	v, ok := f.values[name]
	if !ok {
		return 0, errors.New("no such counter")
	}
	return v, nil
}

func (f fakeCounters) NFAcctErr() error { return f.err }

// TestNFAcctMetrics: kube-proxy's two nfacct metrics, under its names and
// without labels, read from the first backend that reads counters; a
// counter that cannot be read is left out of the scrape, and a backend
// without nfacct registers none.
func TestNFAcctMetrics(t *testing.T) {
	for _, tc := range []struct {
		name     string
		backends []any
		want     map[string]float64 // metric name → value
		wantErr  bool
	}{
		{name: "both counters", backends: []any{"not a counter reader", fakeCounters{values: map[string]uint64{
			iptables.CounterInvalidDropped: 3, iptables.CounterLocalhostNodePorts: 5}}},
			want: map[string]float64{invalidMetric: 3, localhostMetric: 5}},
		{name: "one unreadable", backends: []any{fakeCounters{values: map[string]uint64{iptables.CounterInvalidDropped: 0}}},
			want: map[string]float64{invalidMetric: 0}},
		{name: "no nfnetlink_acct", backends: []any{fakeCounters{err: errors.New("no nfnetlink_acct")}}, wantErr: true},
		{name: "no counter reader", backends: []any{"nftables"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			if err := m.registerCounters(tc.backends); (err != nil) != tc.wantErr {
				t.Fatalf("registerCounters: %v; want an error: %v", err, tc.wantErr)
			}
			families, err := m.registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, f := range families {
				if !strings.HasPrefix(f.GetName(), "kubeproxy_iptables_") {
					continue
				}
				for _, m := range f.GetMetric() {
					if len(m.GetLabel()) > 0 || m.GetCounter() == nil {
						t.Errorf("%s: labels %v, counter %v; want a counter without labels", f.GetName(), m.GetLabel(), m.GetCounter())
					}
					got[f.GetName()] = m.GetCounter().GetValue()
				}
			}
			if !maps.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
				t.Errorf("metrics %v; want %v", got, tc.want)
			}
		})
	}
}

type fakeStats iptables.Stats

func (f fakeStats) Stats() iptables.Stats { return iptables.Stats(f) }

// TestIPTablesStatsMetrics: kube-proxy's iptables-mode metrics of rules
// and restores, with its labels (table, ip_family), per family; the rule
// counts wait for a first sync.
func TestIPTablesStatsMetrics(t *testing.T) {
	m := newMetrics()
	m.registerStats(map[string]any{
		"IPv4":     fakeStats{Rules: map[string]int{"filter": 4, "nat": 40}, LastSync: map[string]int{"filter": 4, "nat": 12}, RestoreFailures: 2, PartialRestoreFailures: 1},
		"IPv6":     fakeStats{},
		"nftables": "not a stats reader",
	})
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "kubeproxy_sync_proxy_rules_iptables_") {
			continue
		}
		for _, s := range f.GetMetric() {
			key := f.GetName()
			for _, l := range s.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = s.GetGauge().GetValue() + s.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"kubeproxy_sync_proxy_rules_iptables_total,ip_family=IPv4,table=filter":             4,
		"kubeproxy_sync_proxy_rules_iptables_total,ip_family=IPv4,table=nat":                40,
		"kubeproxy_sync_proxy_rules_iptables_last,ip_family=IPv4,table=filter":              4,
		"kubeproxy_sync_proxy_rules_iptables_last,ip_family=IPv4,table=nat":                 12,
		"kubeproxy_sync_proxy_rules_iptables_restore_failures_total,ip_family=IPv4":         2,
		"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total,ip_family=IPv4": 1,
		"kubeproxy_sync_proxy_rules_iptables_restore_failures_total,ip_family=IPv6":         0,
		"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total,ip_family=IPv6": 0,
	}
	if !maps.Equal(got, want) {
		t.Errorf("metrics %v\nwant %v", got, want)
	}
}

// TestNoLocalEndpointsMetric: kube-proxy's count, by policy and family, of
// the Service ports whose traffic a Local policy drops for want of a local
// endpoint; a port without any endpoint is rejected, not counted.
func TestNoLocalEndpointsMetric(t *testing.T) {
	local := v1.ServiceInternalTrafficPolicyLocal
	svc := func(name, ip string, itpLocal, etpLocal bool) *v1.Service {
		s := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []v1.ServicePort{{Name: "p", Port: 80, NodePort: 30000 + int32(len(name)), Protocol: v1.ProtocolTCP}}},
		}
		if itpLocal {
			s.Spec.InternalTrafficPolicy = &local
		}
		if etpLocal {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}
		return s
	}
	remote := func(service string) *discovery.EndpointSlice {
		ready, node, port := true, "n2", int32(8080)
		return &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: service + "-1", Labels: map[string]string{discovery.LabelServiceName: service}},
			AddressType: discovery.AddressTypeIPv4,
			Endpoints:   []discovery.Endpoint{{Addresses: []string{"198.18.64.2"}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node}},
			Ports:       []discovery.EndpointPort{{Name: ptrTo("p"), Port: &port}},
		}
	}
	rs := fixture.Ruleset(t, ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "n1"}},
		svc("a", "198.19.0.1", true, false), remote("a"), // internal: no local endpoint
		svc("bb", "198.19.0.2", false, true), remote("bb"), // external
		svc("ccc", "198.19.0.3", true, true), remote("ccc"), // both
		svc("dddd", "198.19.0.4", true, true), // no endpoint at all: rejected
	)
	m := newMetrics()
	m.recordNoLocalEndpoints(rs)
	for policy, want := range map[string]float64{"internal": 2, "external": 2} {
		if got := testGauge(t, m, "kubeproxy_sync_proxy_rules_no_local_endpoints_total", map[string]string{"traffic_policy": policy, "ip_family": "IPv4"}); got != want {
			t.Errorf("%s: %v, want %v", policy, got, want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// testGauge is the value of the gauge name with labels in m's registry.
func testGauge(t *testing.T, m *metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return s.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s %v", name, labels)
	return 0
}

// TestNFTablesSyncFailuresMetric: the nftables proxy counts, by family,
// kube-proxy's failed nftables syncs: a family that did not sync while the
// state was built; a failure to build the state is no backend's.
func TestNFTablesSyncFailuresMetric(t *testing.T) {
	m := newMetrics()
	families := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	m.registerNFTablesFailures(families)
	built := map[v1.IPFamily]*ruleset.Ruleset{}
	for _, ev := range []engine.SyncEvent{
		{Rulesets: built, Results: map[v1.IPFamily]svcproxy.SyncResult{v1.IPv4Protocol: {}}}, // IPv6 failed
		{Rulesets: built, Results: map[v1.IPFamily]svcproxy.SyncResult{}},                    // both failed
		{}, // the Provider failed
	} {
		m.recordFailedFamilies(families, ev)
	}
	families2, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families2 {
		if f.GetName() == "kubeproxy_sync_proxy_rules_nftables_sync_failures_total" {
			for _, s := range f.GetMetric() {
				got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	if want := map[string]float64{"IPv4": 1, "IPv6": 2}; !maps.Equal(got, want) {
		t.Errorf("failures by family %v, want %v", got, want)
	}
	// The iptables proxy has no such metric.
	newMetrics().recordFailedFamilies(families, engine.SyncEvent{Rulesets: built})
}

// changes are the values of kube-proxy's two changes counters in m.
func changes(t *testing.T, m *metrics) (services, endpoints float64) {
	t.Helper()
	return counterValue(t, m, "kubeproxy_sync_proxy_rules_service_changes_total"),
		counterValue(t, m, "kubeproxy_sync_proxy_rules_endpoint_changes_total")
}

// TestChangesMetrics: kube-proxy's changes counters count as its change
// trackers do, one per proxier of a family: every Service event in each
// family served (a Service of another family and an update that changes
// nothing too), an EndpointSlice event only in the family of its
// addresses, and only when the slice names its Service; other objects do
// not count.
func TestChangesMetrics(t *testing.T) {
	ipv4 := []v1.IPFamily{v1.IPv4Protocol}
	dual := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	v6 := slice("web", "web-6", "2001:db8:18::1")
	v6.AddressType = discovery.AddressTypeIPv6
	fqdn := slice("web", "web-fqdn", "example.com")
	fqdn.AddressType = discovery.AddressTypeFQDN
	unnamed := slice("web", "web-x", "198.18.1.2")
	unnamed.Labels = nil
	ipv6Service := service("web6", "2001:db8:19::1")
	for _, tc := range []struct {
		name                     string
		families                 []v1.IPFamily
		events                   []any
		wantServices, wantSlices float64
	}{
		{"IPv4 Service", ipv4, []any{service("web", "198.19.0.1")}, 1, 0},
		{"the same Service again", ipv4, []any{service("web", "198.19.0.1"), service("web", "198.19.0.1")}, 2, 0},
		{"IPv6 Service, IPv4 proxy", ipv4, []any{ipv6Service}, 1, 0},
		{"Service, dual-stack proxy", dual, []any{service("web", "198.19.0.1")}, 2, 0},
		{"IPv4 slice", ipv4, []any{slice("web", "web-1", "198.18.1.1")}, 0, 1},
		{"IPv6 slice, IPv4 proxy", ipv4, []any{v6}, 0, 0},
		{"IPv6 slice, dual-stack proxy", dual, []any{v6, slice("web", "web-1", "198.18.1.1")}, 0, 2},
		{"FQDN slice", dual, []any{fqdn}, 0, 0},
		{"slice without its Service's name", ipv4, []any{unnamed}, 0, 0},
		{"Node and ServiceCIDR", dual, []any{&v1.Node{}, &networkingv1.ServiceCIDR{}}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			for _, ev := range tc.events {
				m.recordEvent(ev, tc.families)
			}
			if services, slices := changes(t, m); services != tc.wantServices || slices != tc.wantSlices {
				t.Errorf("service changes %v, endpoint changes %v; want %v, %v", services, slices, tc.wantServices, tc.wantSlices)
			}
		})
	}
}

// TestChangesMetricsFromWatch: the informers' events reach the changes
// counters: the first list, an update that changes nothing, deletes; an
// IPv6 slice does not count in an IPv4 proxy.
func TestChangesMetricsFromWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(service("web", "198.19.0.1"), slice("web", "web-1", "198.18.1.1"))
	m := newMetrics()
	families := []v1.IPFamily{v1.IPv4Protocol}
	var events atomic.Int32
	opts := source.Options{OnEvent: func(obj any) {
		m.recordEvent(obj, families)
		events.Add(1)
	}}
	if _, err := source.Watch(ctx, client, ipv4State(), opts); err != nil {
		t.Fatal(err)
	}
	if services, slices := changes(t, m); services != 1 || slices != 1 {
		t.Errorf("first list: service changes %v, endpoint changes %v; want 1, 1", services, slices)
	}
	svcs, slices := client.CoreV1().Services("ns"), client.DiscoveryV1().EndpointSlices("ns")
	v6 := slice("web", "web-6", "2001:db8:18::1")
	v6.AddressType = discovery.AddressTypeIPv6
	for _, err := range []error{
		errOf(svcs.Update(ctx, service("web", "198.19.0.1"), metav1.UpdateOptions{})), // unchanged
		errOf(slices.Create(ctx, v6, metav1.CreateOptions{})),                         // not counted
		errOf(slices.Update(ctx, slice("web", "web-1", "198.18.1.2"), metav1.UpdateOptions{})),
		slices.Delete(ctx, "web-1", metav1.DeleteOptions{}),
		svcs.Delete(ctx, "web", metav1.DeleteOptions{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "7 events", func() bool { return events.Load() == 7 })
	if services, slices := changes(t, m); services != 3 || slices != 3 {
		t.Errorf("service changes %v, endpoint changes %v; want 3, 3", services, slices)
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestChangesMetricsFromManifests: a manifest read counts what the API
// server's relist would: every Service and EndpointSlice of the new
// manifests, changed or not, and each one they no longer hold.
func TestChangesMetricsFromManifests(t *testing.T) {
	m := newMetrics()
	dual := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	first := &manifests.Input{Objects: &state.Objects{
		Services:       []*v1.Service{service("a", "198.19.0.1"), service("b", "198.19.0.2")},
		EndpointSlices: []*discovery.EndpointSlice{slice("a", "a-1", "198.18.1.1"), slice("b", "b-1", "198.18.1.2")},
		Nodes:          []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}},
	}}
	m.recordManifests(nil, first, dual)
	if services, slices := changes(t, m); services != 4 || slices != 2 {
		t.Errorf("first read: service changes %v, endpoint changes %v; want 4 (2 Services × 2 families), 2", services, slices)
	}
	second := &manifests.Input{Objects: &state.Objects{
		Services:       []*v1.Service{service("a", "198.19.0.1")},
		EndpointSlices: []*discovery.EndpointSlice{slice("a", "a-1", "198.18.1.1")},
	}}
	m.recordManifests(first, second, dual)
	if services, slices := changes(t, m); services != 8 || slices != 4 {
		t.Errorf("second read: service changes %v, endpoint changes %v; want 8, 4", services, slices)
	}
	m.recordManifests(second, &manifests.Input{}, dual) // an input without objects
	if services, slices := changes(t, m); services != 10 || slices != 5 {
		t.Errorf("empty read: service changes %v, endpoint changes %v; want 10, 5", services, slices)
	}
}

// TestHealthAnswersMetrics: kube-proxy's counts of the answers of /healthz
// and /livez, by status code, as /metrics shows them: none before the
// first request, a 503 before the first sync, a 200 after it; a request
// that /healthz and /livez do not answer (a 404) does not count.
func TestHealthAnswersMetrics(t *testing.T) {
	metricsAddr, healthzAddr := freeAddr(t), freeAddr(t)
	p, eng := testProxy(t, &fakeBackend{family: v1.IPv4Protocol})
	p.opts.MetricsAddress, p.opts.HealthzAddress = metricsAddr, healthzAddr
	servers, err := p.startServers(eng)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	scrape := func() string {
		t.Helper()
		code, body := get(t, "http://"+metricsAddr+"/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		return body
	}
	if body := scrape(); strings.Contains(body, "kubeproxy_proxy_healthz_total") || strings.Contains(body, "kubeproxy_proxy_livez_total") {
		t.Errorf("answer counts before any request:\n%s", body)
	}
	for _, path := range []string{"/healthz", "/livez"} {
		if code, _ := get(t, "http://"+healthzAddr+path); code != 503 {
			t.Errorf("%s before the first sync: %d, want 503", path, code)
		}
	}
	if err := eng.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/healthz", "/livez", "/healthz/", "/livez/x"} {
		get(t, "http://"+healthzAddr+path)
	}
	body := scrape()
	for _, line := range []string{
		"# TYPE kubeproxy_proxy_healthz_total counter",
		`kubeproxy_proxy_healthz_total{code="200"} 2`,
		`kubeproxy_proxy_healthz_total{code="503"} 1`,
		"# TYPE kubeproxy_proxy_livez_total counter",
		`kubeproxy_proxy_livez_total{code="200"} 1`,
		`kubeproxy_proxy_livez_total{code="503"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(body, `code="404"`) {
		t.Errorf("/metrics counts a 404")
	}
}
