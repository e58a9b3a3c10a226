package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the registry that /metrics serves, which the engine registers
// its sync metrics with, and the proxy's own metrics: kube-proxy's
// changes-pending gauges and svcproxy's manifest counters.
type metrics struct {
	registry               *prometheus.Registry
	serviceChangesPending  prometheus.Gauge
	endpointChangesPending prometheus.Gauge
	// manifestErrors counts the reads of --manifests that failed;
	// manifestReloads the ones applied.
	manifestErrors, manifestReloads prometheus.Counter
	// healthPorts counts the health check node ports by state: "serving"
	// (on every address) or "unbound" (on one address at least, retried
	// at each sync).
	healthPorts *prometheus.GaugeVec
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubeproxy", Name: name, Help: help})
}

func newMetrics() *metrics {
	m := &metrics{
		registry:               prometheus.NewRegistry(),
		serviceChangesPending:  gauge("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes"),
		endpointChangesPending: gauge("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes"),
		manifestErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "manifest_errors_total",
			Help: "Reads of the manifests that failed (the rules stayed as they were)",
		}),
		manifestReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "manifest_reloads_total",
			Help: "Changed manifests read and applied",
		}),
	}
	m.healthPorts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "svcproxy", Name: "health_check_node_ports",
		Help: "Health check node ports by state: serving (on every address) or unbound (on one address at least; retried at each sync)",
	}, []string{"state"})
	m.registry.MustRegister(m.healthPorts, m.manifestErrors, m.manifestReloads, m.serviceChangesPending, m.endpointChangesPending)
	return m
}
