package proxy

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/svcproxy/svcproxy/engine"
)

// startServers starts the metrics and healthz servers that are not turned
// off; /healthz and /livez answer eng's health, and count their answers.
func (p *proxy) startServers(eng *engine.Engine) ([]*http.Server, error) {
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
	if p.opts.Profiling {
		// kube-proxy's routes (k8s.io/apiserver's routes.Profiling).
		metrics.Handle("/debug/pprof", http.RedirectHandler("/debug/pprof/", http.StatusFound))
		metrics.HandleFunc("/debug/pprof/", pprof.Index)
		metrics.HandleFunc("/debug/pprof/profile", pprof.Profile)
		metrics.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		metrics.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	healthz := http.NewServeMux()
	healthz.Handle("/healthz", countAnswers(p.metrics.healthzAnswers, eng.HealthzHandler()))
	healthz.Handle("/livez", countAnswers(p.metrics.livezAnswers, eng.HealthzHandler()))
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
