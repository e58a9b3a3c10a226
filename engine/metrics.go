package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
)

// metrics are kube-proxy's sync metrics, under kube-proxy's names and with
// its ip_family label ("IPv4", "IPv6"), and svcproxy's own about repairs.
// docs/reference-proxies.md lists them.
type metrics struct {
	syncDuration        *prometheus.HistogramVec
	syncFullDuration    *prometheus.HistogramVec
	syncPartialDuration *prometheus.HistogramVec
	lastSync            *prometheus.GaugeVec
	lastQueued          *prometheus.GaugeVec
	// conntrackDuration and conntrackDeleted are kube-proxy's conntrack
	// reconciler metrics, for the cleanups the engine runs.
	conntrackDuration   *prometheus.HistogramVec
	conntrackDeleted    *prometheus.CounterVec
	programmingDuration *prometheus.HistogramVec
	syncFailures        prometheus.Counter
	// periodicFullSyncs counts the syncs that Config.FullSyncPeriod forced
	// to be full; driftRepairs, by family and svcproxy.DriftKind, the full
	// syncs of a family whose state the periodic check found changed.
	periodicFullSyncs prometheus.Counter
	driftRepairs      *prometheus.CounterVec
}

// familyLabel is kube-proxy's label of the metrics of one IP family.
const familyLabel = "ip_family"

// syncHistogram is one of kube-proxy's sync latency histograms.
func syncHistogram(name, help string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "kubeproxy", Name: name, Help: help,
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{familyLabel})
}

// programmingBuckets are kube-proxy's bounds of the network-programming
// latency histogram: 0.25 and 0.5 s, every second from 1 to 59 s, every 5 s
// from 60 to 115 s and every 30 s from 120 to 300 s. An objective such as
// "p99 ≤ 2 s" or "≤ 30 s" is then read at a bound.
func programmingBuckets() []float64 {
	b := []float64{0.25, 0.5}
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}

func counter(subsystem, name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Subsystem: subsystem, Name: name, Help: help})
}

func newMetrics() *metrics {
	return &metrics{
		syncDuration: syncHistogram("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds"),
		// A sync is full when any family's backend rewrote everything,
		// partial otherwise (kube-proxy's split).
		syncFullDuration:    syncHistogram("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs"),
		syncPartialDuration: syncHistogram("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs"),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced",
		}, []string{familyLabel}),
		lastQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_last_queued_timestamp_seconds",
			Help: "The last time a sync of proxy rules was queued",
		}, []string{familyLabel}),
		conntrackDuration: syncHistogram("conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds"),
		conntrackDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "conntrack_reconciler_deleted_entries_total",
			Help: "Cumulative conntrack flows deleted by conntrack reconciler",
		}, []string{familyLabel}),
		programmingDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "network_programming_duration_seconds",
			Help:    "In Cluster Network Programming Latency in seconds",
			Buckets: programmingBuckets(),
		}, []string{familyLabel}),
		syncFailures:      counter("kubeproxy", "sync_proxy_rules_failures_total", "Syncs that failed to apply the rules"),
		periodicFullSyncs: counter("svcproxy", "sync_periodic_full_total", "Syncs made full once a full sync period, to rewrite everything"),
		driftRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "sync_drift_repairs_total",
			Help: "Full syncs of a family whose rules the periodic check found changed behind the proxy's back",
		}, []string{"family", "kind"}),
	}
}

// exportFamily exports the counters and histograms of family f at zero
// from the start; the last-sync timestamp waits for a sync.
func (m *metrics) exportFamily(f v1.IPFamily) {
	for _, k := range svcproxy.DriftKinds() {
		m.driftRepairs.WithLabelValues(string(f), string(k))
	}
	for _, h := range []*prometheus.HistogramVec{m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.programmingDuration} {
		h.WithLabelValues(string(f))
	}
}

// register registers every metric with r, or none.
func (m *metrics) register(r prometheus.Registerer) error {
	all := []prometheus.Collector{m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.lastSync, m.lastQueued,
		m.conntrackDuration, m.conntrackDeleted,
		m.programmingDuration, m.syncFailures, m.periodicFullSyncs, m.driftRepairs}
	for i, c := range all {
		if err := r.Register(c); err != nil {
			for _, done := range all[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("engine: registering metrics: %w", err)
		}
	}
	return nil
}
