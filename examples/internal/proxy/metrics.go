package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are kube-proxy's sync metrics, under kube-proxy's names.
type metrics struct {
	registry               *prometheus.Registry
	syncDuration           prometheus.Histogram
	syncFullDuration       prometheus.Histogram
	syncPartialDuration    prometheus.Histogram
	lastSync               prometheus.Gauge
	serviceChangesPending  prometheus.Gauge
	endpointChangesPending prometheus.Gauge
	programmingDuration    prometheus.Histogram
	syncFailures           prometheus.Counter
	// periodicFullSyncs counts the syncs that the full sync period forced
	// to be full; driftRepairs the full syncs of a family whose rules the
	// periodic check found changed.
	periodicFullSyncs, driftRepairs prometheus.Counter
	// manifestErrors counts the reads of --manifests that failed;
	// manifestReloads the ones applied.
	manifestErrors, manifestReloads prometheus.Counter
}

// syncHistogram is one of kube-proxy's sync latency histograms.
func syncHistogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "kubeproxy", Name: name, Help: help,
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubeproxy", Name: name, Help: help})
}

func newMetrics() *metrics {
	m := &metrics{
		registry:     prometheus.NewRegistry(),
		syncDuration: syncHistogram("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds"),
		// A sync is full when any family's executor rewrote everything,
		// partial otherwise (kube-proxy's split).
		syncFullDuration:       syncHistogram("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs"),
		syncPartialDuration:    syncHistogram("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs"),
		lastSync:               gauge("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced"),
		serviceChangesPending:  gauge("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes"),
		endpointChangesPending: gauge("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes"),
		programmingDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "network_programming_duration_seconds",
			Help:    "In Cluster Network Programming Latency in seconds",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_failures_total",
			Help: "Syncs that failed to apply the rules",
		}),
		periodicFullSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "sync_periodic_full_total",
			Help: "Syncs made full once an hour, to rewrite everything",
		}),
		driftRepairs: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "sync_drift_repairs_total",
			Help: "Full syncs of a family whose rules the periodic check found changed behind the proxy's back",
		}),
		manifestErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "manifest_errors_total",
			Help: "Reads of the manifests that failed (the rules stayed as they were)",
		}),
		manifestReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "manifest_reloads_total",
			Help: "Changed manifests read and applied",
		}),
	}
	m.registry.MustRegister(m.manifestErrors, m.manifestReloads, m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.lastSync, m.serviceChangesPending,
		m.endpointChangesPending, m.programmingDuration, m.syncFailures, m.periodicFullSyncs, m.driftRepairs)
	return m
}
