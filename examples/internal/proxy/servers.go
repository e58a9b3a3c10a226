package proxy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
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

// healthServers runs one HTTP server per healthCheckNodePort, answering 200
// with the local endpoint count when the node has local endpoints for the
// Service, 503 otherwise (kube-proxy's service health server).
type healthServers struct {
	log     *slog.Logger
	mu      sync.Mutex
	servers map[uint16]*healthServer
	// last is the Ruleset of each family seen by the previous update, and
	// withPort the Services in it that have a health check node port: an
	// update looks only at what changed since.
	last     map[v1.IPFamily]*ruleset.Ruleset
	withPort map[v1.IPFamily]map[servicemap.PortName]*ruleset.Service
}

type healthServer struct {
	server  *http.Server
	service servicemap.PortName
	local   int
}

func newHealthServers(log *slog.Logger) *healthServers {
	return &healthServers{log: log, servers: map[uint16]*healthServer{}}
}

// update starts, updates and stops servers to match the rulesets.
func (h *healthServers) update(rulesets map[v1.IPFamily]*ruleset.Ruleset) {
	want := map[uint16]*healthServer{}
	for f, rs := range rulesets {
		for _, s := range h.track(f, rs) {
			// A dual-stack pod has an endpoint in each family: count the
			// family with more.
			if cur, ok := want[s.HealthCheckNodePort]; !ok || len(s.LocalTargets) > cur.local {
				want[s.HealthCheckNodePort] = &healthServer{service: s.Name, local: len(s.LocalTargets)}
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for port, hs := range h.servers {
		if _, ok := want[port]; !ok {
			hs.server.Close()
			delete(h.servers, port)
		}
	}
	for port, w := range want {
		if hs, ok := h.servers[port]; ok {
			hs.service, hs.local = w.service, w.local
			continue
		}
		ln, err := listen(fmt.Sprintf(":%d", port))
		if err != nil {
			h.log.Error("health check node port", "service", w.service.String(), "err", err)
			continue
		}
		w.server = &http.Server{Handler: h.handler(port), ReadHeaderTimeout: 5 * time.Second}
		h.servers[port] = w
		go w.server.Serve(ln)
	}
}

// track returns the Services of rs that have a health check node port,
// looking only at the Services that changed since the previous Ruleset of
// family f (ruleset.Diff is cheap between Rulesets made by Builder.Update).
func (h *healthServers) track(f v1.IPFamily, rs *ruleset.Ruleset) map[servicemap.PortName]*ruleset.Service {
	if h.withPort == nil {
		h.last, h.withPort = map[v1.IPFamily]*ruleset.Ruleset{}, map[v1.IPFamily]map[servicemap.PortName]*ruleset.Service{}
	}
	ch := ruleset.Diff(h.last[f], rs)
	set := h.withPort[f]
	names := slices.Concat(ch.Added, ch.Changed, ch.Removed)
	if set == nil || ch.ConfigChanged {
		set = map[servicemap.PortName]*ruleset.Service{}
		names = names[:0]
		for _, s := range rs.Services() {
			names = append(names, s.Name)
		}
	}
	for _, name := range names {
		if s, ok := rs.Service(name); ok && s.HealthCheckNodePort != 0 {
			set[name] = s
		} else {
			delete(set, name)
		}
	}
	h.last[f], h.withPort[f] = rs, set
	return set
}

func (h *healthServers) handler(port uint16) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.mu.Lock()
		hs, ok := h.servers[port]
		var service servicemap.PortName
		local := 0
		if ok {
			service, local = hs.service, hs.local
		}
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if local == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(map[string]any{
			"service":             map[string]string{"namespace": service.Namespace, "name": service.Name},
			"localEndpoints":      local,
			"serviceProxyHealthy": true,
		})
	})
}

func (h *healthServers) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for port, hs := range h.servers {
		hs.server.Close()
		delete(h.servers, port)
	}
}
