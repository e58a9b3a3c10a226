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
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		// A sync is full when any family's executor rewrote everything,
		// partial otherwise (kube-proxy's split).
		syncFullDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_full_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds for full resyncs",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		syncPartialDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "sync_partial_proxy_rules_duration_seconds",
			Help:    "SyncProxyRules latency in seconds for partial resyncs",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced",
		}),
		serviceChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_service_changes_pending",
			Help: "Pending proxy rules Service changes",
		}),
		endpointChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_endpoint_changes_pending",
			Help: "Pending proxy rules Endpoint changes",
		}),
		programmingDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubeproxy", Name: "network_programming_duration_seconds",
			Help:    "In Cluster Network Programming Latency in seconds",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_failures_total",
			Help: "Syncs that failed to apply the rules",
		}),
	}
	m.registry.MustRegister(m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.lastSync, m.serviceChangesPending,
		m.endpointChangesPending, m.programmingDuration, m.syncFailures)
	return m
}
