package ruleset

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sync/atomic"
	"weak"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// Route says where traffic for one kind of frontend goes.
type Route uint8

const (
	// RouteNone: the ServicePort has no frontend of this kind (for
	// external traffic: it is not externally accessible).
	RouteNone Route = iota
	// RouteCluster spreads the traffic over ClusterTargets.
	RouteCluster
	// RouteLocal spreads the traffic over LocalTargets.
	RouteLocal
	// RouteReject rejects the traffic: the Service has no usable endpoint
	// anywhere, so clients are told at once (ICMP port unreachable or TCP
	// reset) rather than left to time out.
	RouteReject
	// RouteDrop drops the traffic: a Local traffic policy applies and this
	// node has no usable endpoint, while other nodes do.
	RouteDrop
)

func (r Route) String() string {
	switch r {
	case RouteNone:
		return "none"
	case RouteCluster:
		return "cluster"
	case RouteLocal:
		return "local"
	case RouteReject:
		return "reject"
	case RouteDrop:
		return "drop"
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// Target is one endpoint in a list of targets that traffic is spread over.
// Walking the list in order, target i of N is picked with probability
// 1/(N−i) (Probability); the last takes whatever is left. Each target thus
// receives exactly 1/N of new flows (Share), for a data plane that picks a
// target directly (a hash or Maglev table) rather than walking the list.
// A Target holds no more than its endpoint: its place in the list says
// the rest.
type Target struct {
	Endpoint netip.AddrPort
	// Local reports whether the endpoint runs on this node.
	Local bool
}

// Probability is the exact probability with which target i of a list of n
// targets is picked when a walk of the list reaches it: 1/(n−i), so 1 for
// the last; 0 when i is not a target of the list (i < 0 or i ≥ n).
func Probability(i, n int) *big.Rat {
	if i < 0 || i >= n {
		return new(big.Rat)
	}
	return big.NewRat(1, int64(n-i))
}

// Share is the exact fraction of new flows that each target of a list of
// n targets receives: 1/n; 0 for an empty list (n ≤ 0).
func Share(n int) *big.Rat {
	if n <= 0 {
		return new(big.Rat)
	}
	return big.NewRat(1, int64(n))
}

// Service is the desired state of one ServicePort. Its ServicePort is the
// servicemap snapshot's own, which must not be modified; or, where Config
// restricts its ExternalIPs or it has no external frontend left for an
// ExternalPolicyLocal to apply to, a copy with those changed. A Service
// comes from a Ruleset: its ServicePort is never nil there. A nil Service,
// or one without a ServicePort, has no frontend and no target: its methods
// say so rather than panic.
type Service struct {
	*servicemap.ServicePort
	// Internal is where traffic to the cluster IP goes: RouteCluster,
	// RouteLocal (internalTrafficPolicy Local), RouteReject or RouteDrop.
	// A route that spreads over targets always has some.
	Internal Route
	// External is where traffic to the node port, external IPs and
	// load-balancer IPs goes, or RouteNone when there are none; for the
	// traffic that ExternalTraffic steers elsewhere first, see there. A
	// route that spreads over targets always has some.
	External Route
	// ClusterIPMasquerade says which flows to the cluster IP are
	// masqueraded (from Config.MasqueradeAll and Config.ClusterCIDRs).
	ClusterIPMasquerade Masquerade
	// ExternalTraffic is what happens to flows to the external frontends
	// besides External: masquerading, and the short-circuit of pod and
	// node traffic.
	ExternalTraffic ExternalTraffic
	// ClusterTargets spread cluster-wide traffic; empty when the port does
	// not use cluster endpoints or none is usable. They also take the
	// traffic of pods and of the node itself to the external addresses of a
	// port whose External route is Local (kube-proxy's short-circuit: as if
	// it had gone out to the load balancer and come back). Targets are in
	// kube-proxy's order: by the text "address:port", byte by byte.
	ClusterTargets []Target
	// LocalTargets spread node-local traffic; empty when the port does not
	// use local endpoints or this node has none usable.
	LocalTargets []Target
	// Endpoints are the endpoints some target points at, sorted by address
	// and port, each once. The slice may be the endpoints snapshot's own.
	Endpoints []endpoints.Endpoint
	// Serving are the addresses and ports of every serving endpoint of the
	// port, on any node, ready or terminating, sorted: the endpoints that
	// existing flows may keep talking to, whether or not new traffic from
	// this node goes there (what conntrack cleanup spares). The slice is
	// the endpoints snapshot's own (endpoints.Port.Serving).
	Serving []netip.AddrPort
	// FirewallAllowsNode reports, for a port whose load-balancer traffic
	// passes the source-range firewall, that the ranges let the node's
	// address through (Config.NodeIP, or else one of
	// Config.NodePortAddresses). A load balancer
	// that puts its IP on the node sends the node's own requests from that
	// IP, so the firewall must also let the load-balancer IPs through, as
	// kube-proxy does.
	FirewallAllowsNode bool
	// ListedEndpoints is the number of endpoints the EndpointSlices list
	// for the port (endpoints.Port.Endpoints): each address and port once,
	// whatever its conditions and node, usable or not, so at least
	// len(Endpoints). It is what kube-proxy counts of the port to measure
	// the cluster (Ruleset.ListedEndpoints); no rule of the port depends
	// on it.
	ListedEndpoints int
}

// valid reports whether s is a Service with a ServicePort.
func (s *Service) valid() bool { return s != nil && s.ServicePort != nil }

// UsesFirewall reports whether load-balancer traffic must pass the
// source-range firewall before reaching External.
func (s *Service) UsesFirewall() bool {
	if !s.valid() {
		return false
	}
	return len(s.LoadBalancerSourceRanges) > 0 && len(s.LoadBalancerIPs) > 0
}

// Equal reports whether two Services would render the same rules and spare
// the same conntrack entries, under one Config: ClusterIPMasquerade, which
// comes from the Config alone, is not compared. Services without a
// ServicePort (nil ones too) are equal to each other only.
func (s *Service) Equal(o *Service) bool {
	if !s.valid() || !o.valid() {
		return s.valid() == o.valid()
	}
	return (s.ServicePort == o.ServicePort || s.ServicePort.Equal(o.ServicePort)) &&
		s.Internal == o.Internal && s.External == o.External &&
		s.ExternalTraffic == o.ExternalTraffic &&
		slices.Equal(s.ClusterTargets, o.ClusterTargets) &&
		slices.Equal(s.LocalTargets, o.LocalTargets) &&
		slices.EqualFunc(s.Endpoints, o.Endpoints, func(a, b endpoints.Endpoint) bool { return a.AddrPort() == b.AddrPort() }) &&
		slices.Equal(s.Serving, o.Serving)
}

// Ruleset is the desired state of one IP family. It is immutable, and safe
// for concurrent use. A nil Ruleset, like the zero one, is empty: it has no
// Service and the zero Config, and every method says so.
//
// Its Services are held in a persistent ordered map keyed by PortName, with
// an index of the Service ports on each Frontend beside it: Builder.Update
// makes a new Ruleset from an old one in time proportional to the change
// (times log n), sharing everything else with it. The sorted list that
// Services returns is made once, on first use, for Rulesets made by Update;
// the Frontend index is made once, on first use, for Rulesets made by Build.
type Ruleset struct {
	config   Config
	services cowmap.Map[servicemap.PortName, *Service]
	// sorted caches Services, frontends the Frontend index.
	sorted    atomic.Pointer[[]*Service]
	frontends atomic.Pointer[frontendIndex]
	// parent is the Ruleset Update made this one from, if any, and step the
	// Changes from it: Diff follows them instead of comparing every
	// Service. parent is weak, so that a chain of Updates does not keep
	// every earlier Ruleset alive.
	parent weak.Pointer[Ruleset]
	step   Changes
	// listedEndpoints is the sum of the Services' ListedEndpoints.
	listedEndpoints int
	// source is what the Ruleset was built from: Update compares it with
	// the snapshots it is given. rebuilt, sorted, names the ports that
	// UpdatePorts took from other snapshots: Update rebuilds them too.
	source  snapshots
	rebuilt []servicemap.PortName
}

// snapshots are the tracker snapshots a Ruleset was built from.
type snapshots struct {
	services servicemap.Snapshot
	eps      endpoints.Snapshot
}

// Config is the Config the Ruleset was built with. Its slices are copies:
// changing them does not change the Ruleset.
func (r *Ruleset) Config() Config {
	if r == nil {
		return Config{}
	}
	cfg := r.config
	cfg.ClusterCIDRs = slices.Clone(cfg.ClusterCIDRs)
	cfg.AllowedExternalIPs = slices.Clone(cfg.AllowedExternalIPs)
	cfg.ServiceCIDRs = slices.Clone(cfg.ServiceCIDRs)
	cfg.NodePortAddresses = slices.Clone(cfg.NodePortAddresses)
	return cfg
}

// Services returns every Service, sorted by PortName. Neither the slice nor
// the Services may be modified. The first call on a Ruleset made by Update
// takes O(n) time; later calls return the same slice.
func (r *Ruleset) Services() []*Service {
	if r == nil {
		return nil
	}
	if p := r.sorted.Load(); p != nil {
		return *p
	}
	all := make([]*Service, 0, r.services.Len())
	r.services.All(func(_ servicemap.PortName, s *Service) bool {
		all = append(all, s)
		return true
	})
	// Concurrent first calls compute equal slices; all return the one
	// stored first.
	r.sorted.CompareAndSwap(nil, &all)
	return *r.sorted.Load()
}

// Len is the number of Services.
func (r *Ruleset) Len() int {
	if r == nil {
		return 0
	}
	return r.services.Len()
}

// ListedEndpoints is the number of endpoints of all the Ruleset's
// Services, the sum of their ListedEndpoints, in O(1) time: the measure of
// the cluster's size by which kube-proxy's iptables mode drops the
// comments of its per-endpoint rules. It equals kube-proxy's count, the
// endpoints of every Service port it proxies in the family, whatever their
// conditions, each address and port once.
func (r *Ruleset) ListedEndpoints() int {
	if r == nil {
		return 0
	}
	return r.listedEndpoints
}

// Service returns the Service called name, in O(log n) time.
func (r *Ruleset) Service(name servicemap.PortName) (*Service, bool) {
	if r == nil {
		return nil, false
	}
	return r.services.Get(name)
}

// Builder builds Rulesets for one Config. Make one with NewBuilder: a nil or
// zero Builder has no valid Config, and builds nothing (the nil Ruleset,
// which is empty).
type Builder struct {
	config Config
}

// NewBuilder checks cfg and returns a Builder for it; an invalid cfg is an
// error that wraps ErrConfig (Config.Validate). Prefixes are masked
// ("10.0.0.1/8" becomes "10.0.0.0/8"), so equal networks make equal Configs.
func NewBuilder(cfg Config) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ClusterCIDRs = masked(cfg.ClusterCIDRs)
	cfg.AllowedExternalIPs = masked(cfg.AllowedExternalIPs)
	cfg.ServiceCIDRs = masked(cfg.ServiceCIDRs)
	cfg.NodePortAddresses = slices.Clone(cfg.NodePortAddresses)
	return &Builder{config: cfg}, nil
}

// valid reports whether NewBuilder made b.
func (b *Builder) valid() bool { return b != nil && b.config.Validate() == nil }

func masked(prefixes []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(prefixes))
	for i, p := range prefixes {
		out[i] = p.Masked()
	}
	return out
}

// minBuildRange is the fewest ServicePorts Build gives one goroutine: a
// snapshot of fewer than twice as many is built in the calling goroutine.
const minBuildRange = 1024

// Build computes the Ruleset for every ServicePort of services of the
// Builder's family, with endpoints from eps. ServicePorts of another family
// are skipped with a warning, as are externalIPs that Config does not allow.
//
// Build splits a large snapshot into ranges of ServicePorts that it builds
// in up to GOMAXPROCS goroutines; the Ruleset and the warnings, in their
// order, are the same for every split. It writes nothing but the result.
func (b *Builder) Build(services servicemap.Snapshot, eps endpoints.Snapshot) (*Ruleset, []svcproxy.Warning) {
	if !b.valid() {
		return nil, nil
	}
	return b.build(services, eps, func(n int) [][2]int { return parallel.Ranges(n, minBuildRange) })
}

// build is Build with the ranges that split returns for the number of
// ServicePorts: contiguous, in order, covering them all.
func (b *Builder) build(services servicemap.Snapshot, eps endpoints.Snapshot, split func(n int) [][2]int) (*Ruleset, []svcproxy.Warning) {
	ports := make([]*servicemap.ServicePort, 0, services.Len())
	for sp := range services.All() {
		ports = append(ports, sp)
	}
	all := make([]*Service, len(ports))
	ranges := split(len(ports))
	warnings := make([][]svcproxy.Warning, len(ranges))
	parallel.Run(ranges, func(i, lo, hi int) {
		warnings[i] = b.buildRange(all[lo:hi], ports[lo:hi], eps)
	})
	all = slices.DeleteFunc(all, func(s *Service) bool { return s == nil })
	rs := &Ruleset{config: b.config, services: byName(all), source: snapshots{services, eps}}
	for _, s := range all {
		rs.listedEndpoints += s.ListedEndpoints
	}
	rs.sorted.Store(&all)
	return rs, slices.Concat(warnings...)
}

// byName is the map of svcs, which are sorted by name, by name.
func byName(svcs []*Service) cowmap.Map[servicemap.PortName, *Service] {
	return cowmap.FromSorted(func(yield func(servicemap.PortName, *Service) bool) {
		for _, s := range svcs {
			if !yield(s.Name, s) {
				return
			}
		}
	})
}

// buildRange sets dst[i] to the Service of ports[i], or to nil when that
// port is skipped, and returns the warnings about the ports in their order.
//
// The Services of the range share one array, and their targets and Serving
// a few (slabs). An array stays alive while one of its Services does: a
// Ruleset that Update made from this one, sharing some of its Services,
// keeps those it replaced alive too, at most this Build's memory, as the
// map's leaves (byName), which point at them, already do.
func (b *Builder) buildRange(dst []*Service, ports []*servicemap.ServicePort, eps endpoints.Snapshot) []svcproxy.Warning {
	svcs := make([]Service, len(ports))
	var alloc slabs
	var warnings []svcproxy.Warning
	for i, port := range eps.PortsOf(ports) {
		alloc.left = len(ports) - i
		w, ok := b.fill(&svcs[i], ports[i], port, &alloc)
		warnings = append(warnings, w...)
		if ok {
			dst[i] = &svcs[i]
		}
	}
	return warnings
}

// service computes the state of one ServicePort, whose endpoints are port,
// or nil when it is skipped.
func (b *Builder) service(sp *servicemap.ServicePort, port endpoints.Port) (*Service, []svcproxy.Warning) {
	s := new(Service)
	warnings, ok := b.fill(s, sp, port, nil)
	if !ok {
		return nil, warnings
	}
	return s, warnings
}

// fill sets s, a zero Service, to the state of one ServicePort, whose
// endpoints are port, with slices from alloc; ok is false when the port is
// skipped.
func (b *Builder) fill(s *Service, sp *servicemap.ServicePort, port endpoints.Port, alloc *slabs) (warnings []svcproxy.Warning, ok bool) {
	if sp.Family != b.config.Family {
		report := svcproxy.Reporter{Kind: "Service", Namespace: sp.Name.Namespace, Name: sp.Name.Name}
		report.Warnf("port %q is %s, the ruleset is %s: skipped", sp.Name.Port, sp.Family, b.config.Family)
		return report.Warnings, false
	}
	s.ServicePort = sp
	if b.config.RestrictExternalIPs && len(sp.ExternalIPs) > 0 {
		var ips []netip.Addr
		ips, warnings = b.restrictExternalIPs(sp)
		if len(ips) < len(sp.ExternalIPs) {
			own := *sp
			own.ExternalIPs = ips
			s.ServicePort = &own
		}
	}
	// externalTrafficPolicy Local only means something for a port with
	// external frontends of this family. The servicemap decides it from the
	// Service as a whole (an externalIP of the other family, or a
	// LoadBalancer without node ports or ingress IPs of this family, makes
	// it true), and dropping external IPs above can leave the port with
	// none.
	if s.ExternalPolicyLocal && !s.ExternallyAccessible() {
		if s.ServicePort == sp {
			own := *sp
			s.ServicePort = &own
		}
		s.ExternalPolicyLocal = false
	}
	// The snapshot's own slice, capped, so that nothing appends into it.
	s.Serving = slices.Clip(port.Serving)
	s.ListedEndpoints = len(port.Endpoints)
	hasAny := b.spreadPort(s, port, alloc)
	s.FirewallAllowsNode = s.UsesFirewall() && slices.ContainsFunc(s.LoadBalancerSourceRanges, b.config.holdsNode)
	b.decide(s, hasAny)
	return warnings, true
}

// restrictExternalIPs returns the external IPs of sp that Config allows,
// and warnings about the others.
func (b *Builder) restrictExternalIPs(sp *servicemap.ServicePort) ([]netip.Addr, []svcproxy.Warning) {
	report := svcproxy.Reporter{Kind: "Service", Namespace: sp.Name.Namespace, Name: sp.Name.Name}
	var allowed []netip.Addr
	for _, ip := range sp.ExternalIPs {
		if slices.ContainsFunc(b.config.AllowedExternalIPs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			allowed = append(allowed, ip)
		} else {
			report.Warnf("externalIP %s is not allowed: not served", ip)
		}
	}
	return allowed, report.Warnings
}

// spreadPort is spread for the endpoints of s's port as a Snapshot holds
// them (port), or spreadAway when port says that it may be.
func (b *Builder) spreadPort(s *Service, port endpoints.Port, alloc *slabs) bool {
	eps := port.Endpoints
	switch {
	case b.config.ComputeHints:
		return b.spread(s, topology.Hints(s.TrafficDistribution, eps), alloc)
	case len(eps) > 0 && len(port.Serving) == len(eps) && port.AllReadyUnhinted() && !port.MaybeOnNode(b.config.Node.Name):
		return b.spreadAway(s, eps, port.Serving, alloc)
	}
	return b.spread(s, eps, alloc)
}

// spreadAway is spread for eps, the endpoints of s's port, when they are
// some, all ready, none with topology hints and none on this node, and
// addrs are their addresses and ports, in order. Then every one is in the
// Cluster list (when the port uses it) and none in Local, whatever else
// they say, so spreadAway sets the targets from addrs, without reading
// eps: a port's addresses take under a third of the memory of its
// endpoints, and most ports of a large cluster have none on a given node.
func (b *Builder) spreadAway(s *Service, eps []endpoints.Endpoint, addrs []netip.AddrPort, alloc *slabs) bool {
	if !s.UsesClusterEndpoints() {
		s.Endpoints = []endpoints.Endpoint{}
		return true
	}
	n := len(addrs)
	ts := alloc.targetsOf(n)
	for i, at := range addrs {
		setTarget(&ts[i], at, false)
	}
	sortTargets(ts)
	s.ClusterTargets = ts
	s.Endpoints = eps[:n:n]
	return true
}

// spread sets the targets and Endpoints of s from eps, the endpoints of
// its port, with slices from alloc, and reports whether the Service has a
// usable endpoint anywhere.
//
// Targets are in kube-proxy's order (sortTargets). Endpoints are sorted: when eps are sorted
// and one per address and port, as an endpoints.Snapshot gives them, they
// are already, and Endpoints is eps itself when every endpoint is
// reachable (capped, so that nothing appends into eps).
//
// It reads eps three times: Select's pass, the pass that marks and counts
// each endpoint's lists (mark), and the pass that writes them (place).
func (b *Builder) spread(s *Service, eps []endpoints.Endpoint, alloc *slabs) bool {
	sel := topology.Select(s.ServicePort, eps, b.config.Node)
	marks := alloc.marksOf(len(eps))
	n := mark(marks, eps, &sel)
	if n.cluster+n.local > 0 {
		ts := alloc.targetsOf(n.cluster + n.local)
		s.ClusterTargets, s.LocalTargets = nilIfEmpty(ts[:n.cluster:n.cluster]), nilIfEmpty(ts[n.cluster:])
	}
	place(eps, marks, s.ClusterTargets, s.LocalTargets)
	sortTargets(s.ClusterTargets)
	sortTargets(s.LocalTargets)
	s.Endpoints = reachable(eps, marks, n)
	return sel.HasAnyEndpoints()
}

// counts are what mark counts in the endpoints of one port.
type counts struct {
	// cluster, local and reachable are the endpoints marked InCluster,
	// InLocal, and either.
	cluster, local, reachable int
	// ordered says the endpoints are sorted by address and port, each
	// address and port once.
	ordered bool
}

// inLists are the Membership bits of the endpoints that some target
// points at.
const inLists = topology.InCluster | topology.InLocal

// mark sets marks[i] to the Membership of eps[i] in sel, and counts them.
func mark(marks []topology.Membership, eps []endpoints.Endpoint, sel *topology.Selection) counts {
	n := counts{ordered: true}
	for i := range eps {
		ep := &eps[i]
		m := sel.Membership(ep)
		marks[i] = m
		n.cluster += b2i(m&topology.InCluster != 0)
		n.local += b2i(m&topology.InLocal != 0)
		n.reachable += b2i(m&inLists != 0)
		n.ordered = n.ordered && (i == 0 || eps[i-1].Compare(ep) < 0)
	}
	return n
}

// b2i is 1 for true and 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nilIfEmpty is ts, or nil when ts is empty.
func nilIfEmpty(ts []Target) []Target {
	if len(ts) == 0 {
		return nil
	}
	return ts
}

// place writes, in one pass over eps in order, a Target for each endpoint
// marked InCluster into cluster and for each marked InLocal into local,
// which are exactly as long as those lists.
func place(eps []endpoints.Endpoint, marks []topology.Membership, cluster, local []Target) {
	var c, l int
	for i := range eps {
		ep := &eps[i]
		if m := marks[i]; m&inLists != 0 {
			at, onNode := ep.AddrPort(), m&topology.OnNode != 0
			if m&topology.InCluster != 0 {
				setTarget(&cluster[c], at, onNode)
				c++
			}
			if m&topology.InLocal != 0 {
				setTarget(&local[l], at, onNode)
				l++
			}
		}
	}
}

// setTarget sets every field of *t. It writes them one by one: a Target
// literal assigned whole is built in a temporary and copied, which costs
// more than the fields' stores.
func setTarget(t *Target, at netip.AddrPort, local bool) {
	t.Endpoint = at
	t.Local = local
}

// reachable returns the endpoints of eps marked InCluster or InLocal,
// sorted: eps itself, capped, when that is all of them and they are
// ordered.
func reachable(eps []endpoints.Endpoint, marks []topology.Membership, n counts) []endpoints.Endpoint {
	switch {
	case n.reachable == 0:
		return []endpoints.Endpoint{}
	case n.reachable == len(eps) && n.ordered:
		return eps[:len(eps):len(eps)]
	}
	out := make([]endpoints.Endpoint, 0, n.reachable)
	for i := range eps {
		if marks[i]&inLists != 0 {
			out = append(out, eps[i])
		}
	}
	if !n.ordered {
		slices.SortFunc(out, func(x, y endpoints.Endpoint) int { return x.Compare(&y) })
	}
	return out
}

// decide sets the routes and the masquerading decisions of s, whose targets
// are set.
func (b *Builder) decide(s *Service, hasAny bool) {
	s.Internal = route(hasAny, s.InternalPolicyLocal, s)
	switch {
	case b.config.MasqueradeAll:
		s.ClusterIPMasquerade = MasqueradeAll
	case len(b.config.ClusterCIDRs) > 0:
		s.ClusterIPMasquerade = MasqueradeOffCluster
	}
	if !s.ExternallyAccessible() {
		return
	}
	s.External = route(hasAny, s.ExternalPolicyLocal, s)
	if s.External == RouteReject {
		return
	}
	s.ExternalTraffic = ExternalTraffic{
		Steered:      true,
		Masquerade:   !s.ExternalPolicyLocal,
		ShortCircuit: s.ExternalPolicyLocal && len(s.ClusterTargets) > 0,
	}
}

// route decides where one kind of traffic goes, under a Local policy or
// not. As in kube-proxy (both modes), a Service with no usable endpoint
// anywhere rejects, and one that has some, but none for this route's
// targets, drops ("has no local endpoints"): a route that spreads over
// targets always has some.
func route(hasAny, policyLocal bool, s *Service) Route {
	switch {
	case !hasAny:
		return RouteReject
	case !policyLocal && len(s.ClusterTargets) > 0:
		return RouteCluster
	case policyLocal && len(s.LocalTargets) > 0:
		return RouteLocal
	default:
		return RouteDrop
	}
}
