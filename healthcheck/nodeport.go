// Package healthcheck serves kube-proxy's service health checks: for each
// Service with externalTrafficPolicy Local and a healthCheckNodePort, an
// HTTP server on that port that tells load balancers whether this node has
// local endpoints for it. It follows the Rulesets it is given and logs
// nothing: what it could not do is returned.
package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// The NodePort range of a default API server (its
// --service-node-port-range). kube-proxy has no flag for it: the API server
// allocates healthCheckNodePorts from it and refuses others. Without an API
// server (Services read from files) a caller should refuse a
// healthCheckNodePort outside it (NewNodePortServers' checkRange): a
// Service must not make the node listen on port 22.
const (
	NodePortMin = 30000
	NodePortMax = 32767
)

// NodePortServers runs one HTTP server per healthCheckNodePort of the
// Rulesets it is given (kube-proxy's service health servers), answering 200
// with the local endpoint count when the node has local endpoints for the
// Service, 503 otherwise, with kube-proxy's JSON body. Each server listens
// on the given node addresses only, never on every address. Update is
// called from one goroutine (after each sync); the handlers run
// concurrently with it.
type NodePortServers struct {
	// checkRange refuses, with a warning, a port outside NodePortMin and
	// NodePortMax.
	checkRange bool
	// mu guards servers, which the handlers read.
	mu      sync.Mutex
	servers map[uint16]*healthServer
	// addrs are the addresses the servers listen on; refused the ports
	// refused by the previous update, each reported once.
	addrs   []netip.Addr
	refused map[svcproxy.Warning]bool
	// last is the Ruleset of each family seen by the previous update, and
	// withPort the Services in it that have a health check node port: an
	// update looks only at what changed since.
	last     map[v1.IPFamily]*ruleset.Ruleset
	withPort map[v1.IPFamily]map[servicemap.PortName]*ruleset.Service
}

type healthServer struct {
	server *http.Server
	// listeners are closed by stop itself: the server closes only those
	// its Serve goroutines have begun to serve.
	listeners []net.Listener
	service   servicemap.PortName
	local     int
}

// stop closes the server's sockets, so that no connection to them is
// accepted once it returns, and then the server.
func (hs *healthServer) stop() {
	for _, ln := range hs.listeners {
		ln.Close()
	}
	hs.server.Close()
}

// NewNodePortServers returns NodePortServers with none running. With
// checkRange, a healthCheckNodePort outside NodePortMin-NodePortMax is not
// served.
func NewNodePortServers(checkRange bool) *NodePortServers {
	return &NodePortServers{checkRange: checkRange, servers: map[uint16]*healthServer{}}
}

// Report is what one Update could not do.
type Report struct {
	// Warnings name the Services whose port was refused (see
	// NewNodePortServers), each once: in the first Update that refused it.
	Warnings []svcproxy.Warning
	// Errors are the servers that could not listen, on one address or on
	// any; each is retried when the addresses change.
	Errors []error
}

// Update starts, updates and stops servers to match the rulesets, each
// listening on addrs. When addrs change, every server is restarted. Once it
// returns, a server it stopped accepts no connection.
func (h *NodePortServers) Update(rulesets map[v1.IPFamily]*ruleset.Ruleset, addrs []netip.Addr) Report {
	if h == nil {
		return Report{}
	}
	var report Report
	want := h.wanted(rulesets, &report)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(addrs, h.addrs) {
		h.closeLocked()
		h.addrs = slices.Clone(addrs)
	}
	for port, hs := range h.servers {
		if _, ok := want[port]; !ok {
			hs.stop()
			delete(h.servers, port)
		}
	}
	for _, port := range slices.Sorted(maps.Keys(want)) {
		w := want[port]
		if hs, ok := h.servers[port]; ok {
			hs.service, hs.local = w.service, w.local
			continue
		}
		report.Errors = append(report.Errors, h.start(port, w)...)
	}
	return report
}

// wanted returns, per health check node port of the rulesets, the Service
// and its local endpoint count. Ports outside the NodePort range are left
// out when checkRange is set, with a warning in report the first time.
func (h *NodePortServers) wanted(rulesets map[v1.IPFamily]*ruleset.Ruleset, report *Report) map[uint16]*healthServer {
	want := map[uint16]*healthServer{}
	refused := map[svcproxy.Warning]bool{}
	for f, rs := range rulesets {
		for _, s := range h.track(f, rs) {
			port := s.HealthCheckNodePort
			if h.checkRange && (port < NodePortMin || port > NodePortMax) {
				refused[svcproxy.Warning{Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
					Reason: fmt.Sprintf("healthCheckNodePort %d is outside the NodePort range %d-%d: not served", port, NodePortMin, NodePortMax),
				}] = true
				continue
			}
			// A dual-stack pod has an endpoint in each family: count the
			// family with more.
			if cur, ok := want[port]; !ok || len(s.LocalTargets) > cur.local {
				want[port] = &healthServer{service: s.Name, local: len(s.LocalTargets)}
			}
		}
	}
	for w := range refused {
		if !h.refused[w] {
			report.Warnings = append(report.Warnings, w)
		}
	}
	slices.SortFunc(report.Warnings, func(a, b svcproxy.Warning) int { return strings.Compare(a.String(), b.String()) })
	h.refused = refused
	return want
}

// ErrNoAddress is reported for a server that has no address to listen on.
var ErrNoAddress = errors.New("no node address to listen on")

// start starts the server of one port on every address of h.addrs and
// records it, also when it could listen on none: it is retried when the
// addresses change. It returns why it could not listen.
func (h *NodePortServers) start(port uint16, w *healthServer) []error {
	w.server = &http.Server{Handler: h.handler(port), ReadHeaderTimeout: 5 * time.Second}
	h.servers[port] = w
	if len(h.addrs) == 0 {
		return []error{fmt.Errorf("health check node port %d of %s not served: %w", port, w.service, ErrNoAddress)}
	}
	var errs []error
	for _, a := range h.addrs {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, port).String())
		if err != nil {
			errs = append(errs, fmt.Errorf("health check node port %d of %s: %w", port, w.service, err))
			continue
		}
		w.listeners = append(w.listeners, ln)
		go w.server.Serve(ln)
	}
	return errs
}

// track returns the Services of rs that have a health check node port,
// looking only at the Services that changed since the previous Ruleset of
// family f (ruleset.Diff is cheap between Rulesets made by Builder.Update).
func (h *NodePortServers) track(f v1.IPFamily, rs *ruleset.Ruleset) map[servicemap.PortName]*ruleset.Service {
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

func (h *NodePortServers) handler(port uint16) http.Handler {
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

// Close stops every server.
func (h *NodePortServers) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closeLocked()
}

// closeLocked stops every server; h.mu is held.
func (h *NodePortServers) closeLocked() {
	for port, hs := range h.servers {
		hs.stop()
		delete(h.servers, port)
	}
}
