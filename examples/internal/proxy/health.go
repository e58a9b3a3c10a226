package proxy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// The NodePort range of a default API server (its
// --service-node-port-range). kube-proxy has no flag for it: the API server
// allocates healthCheckNodePorts from it and refuses others. Manifests have
// no API server, so the proxy refuses a healthCheckNodePort outside it: a
// Service must not make the node listen on port 22.
const (
	nodePortMin = 30000
	nodePortMax = 32767
)

// healthServers runs one HTTP server per healthCheckNodePort, answering 200
// with the local endpoint count when the node has local endpoints for the
// Service, 503 otherwise (kube-proxy's service health server). Each server
// listens on the node's addresses only, never on every address. update is
// called from one goroutine (the sync loop); the handlers run concurrently
// with it.
type healthServers struct {
	log *slog.Logger
	// checkRange refuses, with a warning, a port outside nodePortMin and
	// nodePortMax.
	checkRange bool
	// mu guards servers, which the handlers read.
	mu      sync.Mutex
	servers map[uint16]*healthServer
	// addrs are the addresses the servers listen on; refused the warnings
	// about the ports refused by the previous update, each logged once.
	addrs   []netip.Addr
	refused map[string]bool
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

func newHealthServers(log *slog.Logger, checkRange bool) *healthServers {
	return &healthServers{log: log, checkRange: checkRange, servers: map[uint16]*healthServer{}}
}

// update starts, updates and stops servers to match the rulesets, each
// listening on addrs. When addrs change, every server is restarted.
func (h *healthServers) update(rulesets map[v1.IPFamily]*ruleset.Ruleset, addrs []netip.Addr) {
	want := h.wanted(rulesets)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(addrs, h.addrs) {
		h.closeLocked()
		h.addrs = slices.Clone(addrs)
	}
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
		h.start(port, w)
	}
}

// wanted returns, per health check node port of the rulesets, the Service
// and its local endpoint count. Ports outside the NodePort range are left
// out when checkRange is set, with a warning the first time.
func (h *healthServers) wanted(rulesets map[v1.IPFamily]*ruleset.Ruleset) map[uint16]*healthServer {
	want := map[uint16]*healthServer{}
	refused := map[string]bool{}
	for f, rs := range rulesets {
		for _, s := range h.track(f, rs) {
			port := s.HealthCheckNodePort
			if h.checkRange && (port < nodePortMin || port > nodePortMax) {
				refused[svcproxy.Warning{Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
					Reason: fmt.Sprintf("healthCheckNodePort %d is outside the NodePort range %d-%d: not served", port, nodePortMin, nodePortMax),
				}.String()] = true
				continue
			}
			// A dual-stack pod has an endpoint in each family: count the
			// family with more.
			if cur, ok := want[port]; !ok || len(s.LocalTargets) > cur.local {
				want[port] = &healthServer{service: s.Name, local: len(s.LocalTargets)}
			}
		}
	}
	for _, w := range slices.Sorted(maps.Keys(refused)) {
		if !h.refused[w] {
			h.log.Warn(w)
		}
	}
	h.refused = refused
	return want
}

// start starts the server of one port on every address of h.addrs and
// records it, also when it could listen on none: it is retried when the
// addresses change.
func (h *healthServers) start(port uint16, w *healthServer) {
	w.server = &http.Server{Handler: h.handler(port), ReadHeaderTimeout: 5 * time.Second}
	h.servers[port] = w
	if len(h.addrs) == 0 {
		h.log.Error("health check node port not served: no node address to listen on (--node-ip, or the Node's addresses)",
			"service", w.service.String(), "port", port)
		return
	}
	for _, a := range h.addrs {
		ln, err := listen(netip.AddrPortFrom(a, port).String())
		if err != nil {
			h.log.Error("health check node port", "service", w.service.String(), "err", err)
			continue
		}
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
	h.closeLocked()
}

// closeLocked stops every server; h.mu is held.
func (h *healthServers) closeLocked() {
	for port, hs := range h.servers {
		hs.server.Close()
		delete(h.servers, port)
	}
}
