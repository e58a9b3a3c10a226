// Package healthcheck serves kube-proxy's service health checks: for each
// Service with externalTrafficPolicy Local and a healthCheckNodePort, an
// HTTP server on that port that tells load balancers whether this node has
// local endpoints for it. It follows the Rulesets it is given and logs
// nothing: what it could not do is returned.
package healthcheck

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
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
// Service and the proxy is healthy, 503 otherwise, with kube-proxy's JSON
// body. Each server listens on the given node addresses, or on every
// address when there is none (kube-proxy's rule when no node address
// matches). Update is called from one goroutine (after each sync); the
// handlers run concurrently with it.
//
// Conflicts, which the API server prevents but files do not, are resolved
// so: a healthCheckNodePort that is also a nodePort of some Service is not
// served (the node port's rules would take its traffic); one shared by
// several Services is served for the first in namespace/name order. Each
// is warned about once.
type NodePortServers struct {
	// checkRange refuses, with a warning, a port outside NodePortMin and
	// NodePortMax.
	checkRange bool
	// proxyHealthy reports the proxy's health; nil means healthy.
	proxyHealthy func() bool
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
	// listeners are the sockets listening, one per address that could be
	// bound; stop closes them itself: the server closes only those its
	// Serve goroutines have begun to serve.
	listeners []net.Listener
	// unbound are the addresses that could not be bound yet; each Update
	// retries them.
	unbound []netip.Addr
	service servicemap.PortName
	local   int
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
// served. proxyHealthy, when not nil, is asked at every request: while it
// is false every server answers 503 with serviceProxyHealthy false, as
// kube-proxy's do, so that load balancers leave a node whose rules may be
// wrong.
func NewNodePortServers(checkRange bool, proxyHealthy func() bool) *NodePortServers {
	return &NodePortServers{checkRange: checkRange, proxyHealthy: proxyHealthy, servers: map[uint16]*healthServer{}}
}

// Report is what one Update could not do.
type Report struct {
	// Warnings name the Services whose port was refused (out of range or
	// in conflict, see NodePortServers), each once: in the first Update
	// that refused it.
	Warnings []svcproxy.Warning
	// Errors are the servers that could not listen, on one address or on
	// any, in every Update until they can: each Update retries them.
	Errors []error
	// Serving is the number of health check node ports listening on every
	// address, Unbound the number of those that could not be bound on
	// one at least.
	Serving, Unbound int
}

// Update starts, updates and stops servers to match the rulesets, each
// listening on addrs (every address when empty), and retries the
// addresses a server could not bind before. When addrs change, every
// server is restarted. Once it returns, a server it stopped accepts no
// connection.
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
		if w, ok := want[port]; !ok || !sameService(w.service, hs.service) {
			hs.stop()
			delete(h.servers, port)
		}
	}
	for _, port := range slices.Sorted(maps.Keys(want)) {
		w := want[port]
		hs, ok := h.servers[port]
		if ok {
			hs.local = w.local
		} else {
			hs = h.start(port, w)
		}
		report.Errors = append(report.Errors, h.listen(port, hs)...)
		if len(hs.unbound) > 0 {
			report.Unbound++
		} else {
			report.Serving++
		}
	}
	return report
}

// wanted returns, per health check node port of the rulesets that is to
// be served, the Service and its local endpoint count. Ports outside the
// NodePort range (when checkRange is set) and ports in conflict are left
// out, with a warning in report the first time.
func (h *NodePortServers) wanted(rulesets map[v1.IPFamily]*ruleset.Ruleset, report *Report) map[uint16]*healthServer {
	want := map[uint16]*healthServer{}
	refused := map[svcproxy.Warning]bool{}
	refuse := func(name servicemap.PortName, reason string) {
		refused[svcproxy.Warning{Kind: "Service", Namespace: name.Namespace, Name: name.Name, Reason: reason}] = true
	}
	var nodePorts map[uint16]servicemap.PortName
	for _, f := range slices.Sorted(maps.Keys(rulesets)) {
		for _, s := range h.track(f, rulesets[f]) {
			port := s.HealthCheckNodePort
			if h.checkRange && (port < NodePortMin || port > NodePortMax) {
				refuse(s.Name, fmt.Sprintf("healthCheckNodePort %d is outside the NodePort range %d-%d: not served", port, NodePortMin, NodePortMax))
				continue
			}
			if nodePorts == nil {
				nodePorts = nodePortsOf(rulesets)
			}
			if other, ok := nodePorts[port]; ok {
				refuse(s.Name, fmt.Sprintf("healthCheckNodePort %d is the nodePort of Service %s/%s: not served", port, other.Namespace, other.Name))
				continue
			}
			cur, ok := want[port]
			switch {
			case !ok || sameService(cur.service, s.Name) && len(s.LocalTargets) > cur.local:
				// A dual-stack pod has an endpoint in each family:
				// count the family with more.
				want[port] = &healthServer{service: s.Name, local: len(s.LocalTargets)}
			case !sameService(cur.service, s.Name) && serviceLess(s.Name, cur.service):
				refuse(cur.service, healthPortShared(port, s.Name))
				want[port] = &healthServer{service: s.Name, local: len(s.LocalTargets)}
			case !sameService(cur.service, s.Name):
				refuse(s.Name, healthPortShared(port, cur.service))
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

// healthPortShared is the warning of a Service whose healthCheckNodePort
// port is served for owner.
func healthPortShared(port uint16, owner servicemap.PortName) string {
	return fmt.Sprintf("healthCheckNodePort %d is also Service %s/%s's, which comes first: not served for this one", port, owner.Namespace, owner.Name)
}

func sameService(a, b servicemap.PortName) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name
}

func serviceLess(a, b servicemap.PortName) bool {
	return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
}

// nodePortsOf returns the TCP node ports of the rulesets' Services, each
// with the first Service that has it.
func nodePortsOf(rulesets map[v1.IPFamily]*ruleset.Ruleset) map[uint16]servicemap.PortName {
	ports := map[uint16]servicemap.PortName{}
	for _, rs := range rulesets {
		for _, s := range rs.Services() {
			if s.NodePort == 0 || s.Name.Protocol != v1.ProtocolTCP {
				continue
			}
			if cur, ok := ports[s.NodePort]; !ok || serviceLess(s.Name, cur) {
				ports[s.NodePort] = s.Name
			}
		}
	}
	return ports
}

// start records the server of one port, listening nowhere yet.
func (h *NodePortServers) start(port uint16, w *healthServer) *healthServer {
	w.server = &http.Server{Handler: h.handler(port), ReadHeaderTimeout: 5 * time.Second}
	w.unbound = slices.Clone(h.addrs)
	if len(w.unbound) == 0 {
		w.unbound = []netip.Addr{{}} // every address
	}
	h.servers[port] = w
	return w
}

// listen has hs listen on port on each address it could not bind yet, and
// returns why it still cannot on some.
func (h *NodePortServers) listen(port uint16, hs *healthServer) []error {
	var errs []error
	unbound := hs.unbound[:0]
	for _, a := range hs.unbound {
		addr := ":" + strconv.Itoa(int(port))
		if a.IsValid() {
			addr = netip.AddrPortFrom(a, port).String()
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("health check node port %d of %s: %w (retried at the next sync)", port, hs.service, err))
			unbound = append(unbound, a)
			continue
		}
		hs.listeners = append(hs.listeners, ln)
		go hs.server.Serve(ln)
	}
	hs.unbound = unbound
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
		healthy := h.proxyHealthy == nil || h.proxyHealthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(local))
		if local == 0 || !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(map[string]any{
			"service":             map[string]string{"namespace": service.Namespace, "name": service.Name},
			"localEndpoints":      local,
			"serviceProxyHealthy": healthy,
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
