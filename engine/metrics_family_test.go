package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestMetricsByFamily: kube-proxy's sync metrics carry its ip_family
// label, and each family's are its own, as kube-proxy's proxier of each
// family keeps them: a family that synced is recorded when the other
// failed; a change time is observed in the family of its EndpointSlice,
// once that family has synced.
func TestMetricsByFamily(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	v4, v6 := &fakeBackend{}, &fakeBackend{failNext: 1}
	empty := func(f v1.IPFamily) *ruleset.Ruleset {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: f})
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := b.Build(servicemap.Snapshot{}, endpoints.Snapshot{})
		return rs
	}
	rulesets := map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: empty(v1.IPv4Protocol), v1.IPv6Protocol: empty(v1.IPv6Protocol)}
	triggers := map[v1.IPFamily][]time.Time{v1.IPv4Protocol: {start}, v1.IPv6Protocol: {start, start}}
	source := ProviderFunc(func(context.Context) (Desired, error) {
		d := Desired{Rulesets: rulesets, TriggersByFamily: triggers}
		triggers = map[v1.IPFamily][]time.Time{}
		return d, nil
	})
	reg := prometheus.NewPedanticRegistry()
	e, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: v4, v1.IPv6Protocol: v6}, Provider: source, Registerer: reg, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clock.advance(time.Second)
	if err := e.Sync(ctx); err == nil {
		t.Fatal("the IPv6 backend's failure was not reported")
	}
	want := map[string]float64{
		`kubeproxy_network_programming_duration_seconds{ip_family="IPv4"}`:      1,
		`kubeproxy_network_programming_duration_seconds{ip_family="IPv6"}`:      0,
		`kubeproxy_sync_full_proxy_rules_duration_seconds{ip_family="IPv4"}`:    1,
		`kubeproxy_sync_full_proxy_rules_duration_seconds{ip_family="IPv6"}`:    0,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds{ip_family="IPv4"}`: 0,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds{ip_family="IPv6"}`: 0,
		`kubeproxy_sync_proxy_rules_duration_seconds{ip_family="IPv4"}`:         1,
		`kubeproxy_sync_proxy_rules_duration_seconds{ip_family="IPv6"}`:         0,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}`:   1,
	}
	if d := cmp.Diff(want, familySamples(t, reg)); d != "" {
		t.Errorf("after IPv4 synced and IPv6 failed (-want +got):\n%s", d)
	}
	clock.advance(time.Second)
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	want[`kubeproxy_network_programming_duration_seconds{ip_family="IPv6"}`] = 2 // kept across the failure
	want[`kubeproxy_sync_full_proxy_rules_duration_seconds{ip_family="IPv6"}`] = 1
	want[`kubeproxy_sync_partial_proxy_rules_duration_seconds{ip_family="IPv4"}`] = 1
	want[`kubeproxy_sync_proxy_rules_duration_seconds{ip_family="IPv4"}`] = 2
	want[`kubeproxy_sync_proxy_rules_duration_seconds{ip_family="IPv6"}`] = 1
	want[`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"}`] = 1
	if d := cmp.Diff(want, familySamples(t, reg)); d != "" {
		t.Errorf("after both synced (-want +got):\n%s", d)
	}
	// A request queues a sync of every family.
	e.Request()
	want[`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}`] = 1
	want[`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"}`] = 1
	if d := cmp.Diff(want, familySamples(t, reg)); d != "" {
		t.Errorf("after a request (-want +got):\n%s", d)
	}
}

// familySamples are the kube-proxy metrics of reg that carry ip_family,
// by name and label: a histogram's sample count, a gauge set or not.
func familySamples(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "ip_family" {
				continue
			}
			key := mf.GetName() + `{ip_family="` + m.GetLabel()[0].GetValue() + `"}`
			switch {
			case m.GetHistogram() != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				got[key] = min(m.GetGauge().GetValue(), 1)
			}
		}
	}
	return got
}

// TestConntrackMetrics: kube-proxy's conntrack reconciler metrics, by
// family: each cleanup the engine runs is timed, and the entries it
// deleted are counted.
func TestConntrackMetrics(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	toDNS := udpFlow("198.19.0.10:53", "198.18.64.2:5353")
	table := &conntrackTable{flows: map[conntrack.Flow]bool{toDNS: true}}
	reg := prometheus.NewPedanticRegistry()
	e, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: &fakeBackend{}}, Provider: w, Conntrack: table, Registerer: reg, Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	w.services.Delete("ns1", "dns")
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := familySamples(t, reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "kubeproxy_conntrack_reconciler_deleted_entries_total" {
			m := mf.GetMetric()[0]
			got[mf.GetName()+`{`+m.GetLabel()[0].GetName()+`="`+m.GetLabel()[0].GetValue()+`"}`] = m.GetCounter().GetValue()
		}
	}
	if n := got[`kubeproxy_conntrack_reconciler_sync_duration_seconds{ip_family="IPv4"}`]; n < 1 {
		t.Errorf("%v cleanups timed; want at least the one that deleted", n)
	}
	if n := got[`kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"}`]; n != 1 {
		t.Errorf("%v entries counted as deleted; want 1", n)
	}
}
