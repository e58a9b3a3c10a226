package proxy

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/iptables"
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
