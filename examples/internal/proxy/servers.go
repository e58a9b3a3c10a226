package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// startServers starts the metrics and healthz servers that are not turned
// off.
func (p *proxy) startServers() ([]*http.Server, error) {
	var servers []*http.Server
	start := func(addr string, h http.Handler) error {
		if addr == "" {
			return nil
		}
		ln, err := listen(addr)
		if err != nil {
			return err
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go s.Serve(ln)
		return nil
	}
	metrics := http.NewServeMux()
	metrics.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, p.mode.Name)
	})
	metrics.Handle("/metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	healthz := http.NewServeMux()
	healthz.HandleFunc("/healthz", p.healthz)
	healthz.HandleFunc("/livez", p.healthz)
	if err := start(p.opts.MetricsAddress, metrics); err != nil {
		return nil, err
	}
	if err := start(p.opts.HealthzAddress, healthz); err != nil {
		for _, s := range servers {
			s.Close()
		}
		return nil, err
	}
	return servers, nil
}

// healthz answers 200 while the last successful sync is younger than twice
// the sync period and the last sync did not fail, 503 otherwise: after a
// failed sync (a change or a repair that could not be applied) the kernel's
// rules may be missing until a sync succeeds.
func (p *proxy) healthz(w http.ResponseWriter, _ *http.Request) {
	last := time.Unix(0, p.lastSuccess.Load())
	now := time.Now()
	failing := p.failing.Load()
	healthy := now.Sub(last) < 2*p.opts.SyncPeriod && !failing
	w.Header().Set("Content-Type", "application/json")
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(map[string]any{
		"lastUpdated": last.UTC().Format(time.RFC3339Nano),
		"currentTime": now.UTC().Format(time.RFC3339Nano),
		"healthy":     healthy,
		"syncFailing": failing,
	})
}
