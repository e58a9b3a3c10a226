package ebpf

import (
	"iter"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// v6Group is the bit that sets the group IDs of IPv6 Services apart from
// those of IPv4 ones: both families share the maps.
const v6Group = 1 << 31

// Contents is the desired contents of the maps for one IP family's
// Ruleset, with the group IDs and backend slots it chose: Render keeps
// those of the previous Contents, so that a change of one Service
// changes few elements. It is immutable, and safe for concurrent use.
//
// Its per-port entries are held in persistent maps that share every
// unchanged port with the Contents they were rendered from: Render from a
// previous Contents, and Changes between the two, take time proportional
// to the change (times log n).
type Contents struct {
	family v1.IPFamily
	rs     *ruleset.Ruleset
	ports  cowmap.Map[servicemap.PortName, *portEntries]
	// addrs counts the ports of each cluster IP, endpoints the groups of
	// UDP ports that hold each endpoint.
	addrs     cowmap.Map[netip.Addr, int]
	endpoints cowmap.Map[netip.AddrPort, int]
	nodeAddrs []netip.Addr
	cidrs     []netip.Prefix
	// touched are the ports re-rendered from the previous Contents,
	// when incremental (else every port was).
	incremental bool
	touched     []servicemap.PortName
	// next is the next group ID never given out; free are the IDs of
	// ports gone, sorted, given out first.
	next uint32
	free []uint32
	maps atomic.Pointer[Maps]
}

// portEntries are the elements of one Service port: its frontends'
// services elements, sorted by key, and its groups, the cluster targets
// (group base) and the node-local targets (group base+1), each endpoint in
// the slot Render gave it.
type portEntries struct {
	name           servicemap.PortName
	base           uint32
	cluster, local []netip.AddrPort
	services       []Entry[ServiceKey, ServiceValue]
	clusterIP      netip.Addr
}

// Family is the IP family of the Ruleset the Contents were rendered from
// ("" for empty Contents).
func (c *Contents) Family() v1.IPFamily {
	if c == nil {
		return ""
	}
	return c.family
}

// Maps returns every element, which must not be modified: nil Contents
// give empty Maps. The first call takes O(n) time; later calls return the
// same Maps.
func (c *Contents) Maps() *Maps {
	if c == nil {
		return NewMaps()
	}
	if m := c.maps.Load(); m != nil {
		return m
	}
	m := NewMaps()
	c.ports.All(func(_ servicemap.PortName, p *portEntries) bool {
		for _, e := range p.services {
			m.Services[e.Key] = e.Value
		}
		for k, v := range p.backends() {
			m.Backends[k] = v
		}
		return true
	})
	c.addrs.All(func(k netip.Addr, _ int) bool {
		m.ClusterAddrs[AddrOf(k)] = 1
		return true
	})
	sets := c.sets()
	m.NodeAddrs, m.ServiceCIDRs = sets.NodeAddrs, sets.ServiceCIDRs
	c.maps.CompareAndSwap(nil, m)
	return c.maps.Load()
}

// backends are the backends elements of p's groups.
func (p *portEntries) backends() func(yield func(BackendKey, BackendValue) bool) {
	return func(yield func(BackendKey, BackendValue) bool) {
		for g, slots := range [2][]netip.AddrPort{p.cluster, p.local} {
			for i, at := range slots {
				if !yield(BackendKey{p.base + uint32(g), uint32(i)}, BackendValue{Addr: AddrOf(at.Addr()), Port: at.Port()}) {
					return
				}
			}
		}
	}
}

// Render computes the map contents of rs, keeping the group IDs and the
// backend slots of prev (the Contents of the previous Ruleset of the same
// family; nil, or Contents of another family, start afresh). A nil rs
// gives empty Contents. Render is pure and deterministic: the same rs and
// prev give equal Contents. With a prev rendered from a Ruleset of the same
// Config, it re-renders only the Service ports that ruleset.Diff reports
// changed and those that share a destination with them.
//
// For each frontend (address, port and protocol; a node port on the
// family's wildcard address, see NodePortKey) that a Service port owns
// (ruleset.Ruleset.Owns) the services map holds what a flow from a
// process on the node meets (ruleset.Ruleset.Decide for a source on the
// node): a group of backends to spread over, with the Service's ClientIP
// affinity timeout, or a flag (FlagReject, FlagDrop, FlagFirewall). A
// flow to an external frontend of a port with externalTrafficPolicy
// Local goes to the cluster targets, as kube-proxy short-circuits flows
// from pods and from the node. Masquerading has no meaning at the socket
// and is not rendered.
func Render(rs *ruleset.Ruleset, prev *Contents) *Contents {
	if rs == nil {
		return &Contents{}
	}
	cfg := rs.Config()
	if prev != nil && prev.family != cfg.Family {
		prev = nil
	}
	c := &Contents{family: cfg.Family, rs: rs, nodeAddrs: cfg.NodePortAddresses, cidrs: cfg.ServiceCIDRs}
	if cfg.Family == v1.IPv6Protocol {
		c.next = v6Group
	}
	if prev != nil {
		c.ports, c.addrs, c.endpoints, c.next, c.free = prev.ports, prev.addrs, prev.endpoints, prev.next, slices.Clone(prev.free)
	}
	touched, all := changedPorts(prev, rs)
	if all {
		c.renderAll(rs)
	} else {
		c.incremental, c.touched = true, touched
		// Removals first, so that their IDs go to the additions.
		for _, name := range touched {
			if _, ok := rs.Service(name); !ok {
				c.remove(name)
			}
		}
		slices.Sort(c.free)
		for _, name := range touched {
			if s, ok := rs.Service(name); ok {
				c.renderPort(rs, s)
			}
		}
	}
	if len(c.free) == 0 {
		c.free = nil
	}
	return c
}

// externalUnchanged reports whether c, rendered from prev, re-rendered
// no port that has a node port, an external IP or a load-balancer IP,
// before or after: then the north-south contents of the two are the same
// (RenderNorthSouth reads only such ports, whose group IDs and slots are
// unchanged). prev must be the Contents c was rendered from.
func (c *Contents) externalUnchanged(prev *Contents) bool {
	if c == nil || prev == nil || !c.incremental || prev.rs == nil {
		return false
	}
	for _, name := range c.touched {
		if hasExternal(prev.rs, name) || hasExternal(c.rs, name) {
			return false
		}
	}
	return true
}

// hasExternal reports whether the port called name in rs has a node
// port, an external IP or a load-balancer IP.
func hasExternal(rs *ruleset.Ruleset, name servicemap.PortName) bool {
	s, ok := rs.Service(name)
	if !ok {
		return false
	}
	for _, f := range s.Frontends() {
		if f.Kind == ruleset.KindNodePort || f.Kind == ruleset.KindExternalIP || f.Kind == ruleset.KindLoadBalancerIP {
			return true
		}
	}
	return false
}

// renderAll renders every port of rs, keeping the IDs and slots of the
// ports c holds (those of the previous Contents), and builds the
// persistent maps in one pass: O(n) rather than a path copied per port.
// The group IDs are given out in the ports' order, then the ports'
// entries are computed on up to GOMAXPROCS goroutines (parallel.Run):
// the Contents are the same for every number.
func (c *Contents) renderAll(rs *ruleset.Ruleset) {
	old := c.ports
	c.ports.All(func(_ servicemap.PortName, p *portEntries) bool {
		if _, ok := rs.Service(p.name); !ok {
			c.free = append(c.free, p.base)
		}
		return true
	})
	slices.Sort(c.free)
	svcs := rs.Services()
	keys, vals := make([]servicemap.PortName, len(svcs)), make([]*portEntries, len(svcs))
	prev := make([]*portEntries, len(svcs))
	for i, s := range svcs {
		keys[i] = s.Name
		was, _ := old.Get(s.Name)
		prev[i] = c.keep(s, was)
	}
	rs.ServicesAt(ruleset.Frontend{}) // the Ruleset's index, built once rather than by each goroutine
	parallel.Run(parallel.Ranges(len(svcs), 4096), func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			vals[i] = c.entriesOf(rs, svcs[i], prev[i])
		}
	})
	addrs, eps := make(map[netip.Addr]int, len(svcs)), map[netip.AddrPort]int{}
	for i, s := range svcs {
		p := vals[i]
		if p.clusterIP.IsValid() {
			addrs[p.clusterIP]++
		}
		if s.Name.Protocol == v1.ProtocolUDP {
			for _, at := range p.cluster {
				eps[at]++
			}
			for _, at := range p.local {
				eps[at]++
			}
		}
	}
	c.ports = cowmap.FromSorted(pairs(keys, vals))
	c.addrs, c.endpoints = fromCounts(addrs), fromCounts(eps)
}

// fromCounts is the persistent map of counts.
func fromCounts[K interface {
	comparable
	cowmap.Key[K]
}](counts map[K]int) cowmap.Map[K, int] {
	keys := make([]K, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, K.Compare)
	vals := make([]int, len(keys))
	for i, k := range keys {
		vals[i] = counts[k]
	}
	return cowmap.FromSorted(pairs(keys, vals))
}

// pairs yields keys[i], vals[i] in order.
func pairs[K, V any](keys []K, vals []V) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for i, k := range keys {
			if !yield(k, vals[i]) {
				return
			}
		}
	}
}

// changedPorts returns the Service ports whose elements may differ between
// prev and rs, sorted, each once: those ruleset.Diff reports and those
// that share a destination with them, before or after; or all when prev
// is nil, has no Ruleset, or was rendered under another Config.
func changedPorts(prev *Contents, rs *ruleset.Ruleset) (names []servicemap.PortName, all bool) {
	if prev == nil || prev.rs == nil {
		return nil, true
	}
	ch := ruleset.Diff(prev.rs, rs)
	if ch.ConfigChanged {
		return nil, true
	}
	names = slices.Concat(ch.Added, ch.Changed, ch.Removed)
	for _, name := range slices.Concat(ch.Added, ch.Changed, ch.Removed) {
		for _, r := range []*ruleset.Ruleset{prev.rs, rs} {
			s, ok := r.Service(name)
			if !ok {
				continue
			}
			for _, f := range s.Frontends() {
				names = append(names, rs.ServicesAt(f)...)
				names = append(names, prev.rs.ServicesAt(f)...)
			}
		}
	}
	slices.SortFunc(names, servicemap.PortName.Compare)
	return slices.Compact(names), false
}

// remove takes the entries of the port called name out, freeing its
// group IDs.
func (c *Contents) remove(name servicemap.PortName) {
	key := name
	p, ok := c.ports.Get(key)
	if !ok {
		return
	}
	c.account(p, &portEntries{})
	c.ports = c.ports.Without(key)
	c.free = append(c.free, p.base)
}

// account moves the counts of a port's cluster IP and (for UDP) endpoints
// from those of was to those of now, touching only the counts that change.
func (c *Contents) account(was, now *portEntries) {
	if was.clusterIP != now.clusterIP {
		if was.clusterIP.IsValid() {
			c.addrs = count(c.addrs, was.clusterIP, -1)
		}
		if now.clusterIP.IsValid() {
			c.addrs = count(c.addrs, now.clusterIP, 1)
		}
	}
	delta := map[netip.AddrPort]int{}
	if was.name.Protocol == v1.ProtocolUDP {
		for _, at := range slices.Concat(was.cluster, was.local) {
			delta[at]--
		}
	}
	if now.name.Protocol == v1.ProtocolUDP {
		for _, at := range slices.Concat(now.cluster, now.local) {
			delta[at]++
		}
	}
	for _, at := range slices.SortedFunc(maps.Keys(delta), netip.AddrPort.Compare) {
		if d := delta[at]; d != 0 {
			c.endpoints = count(c.endpoints, at, d)
		}
	}
}

// count adds delta to m's count of key, removing it at 0.
func count[K cowmap.Key[K]](m cowmap.Map[K, int], key K, delta int) cowmap.Map[K, int] {
	n, _ := m.Get(key)
	if n += delta; n <= 0 {
		return m.Without(key)
	}
	return m.With(key, n)
}

// renderPort renders the entries of s, replacing those it had.
func (c *Contents) renderPort(rs *ruleset.Ruleset, s *ruleset.Service) {
	key := s.Name
	was, had := c.ports.Get(key)
	if !had {
		was = &portEntries{}
	}
	p := c.entries(rs, s, was)
	c.account(was, p)
	c.ports = c.ports.With(key, p)
}

// entries computes the entries of s: with the group IDs and slots of was,
// its previous entries, or new IDs when was is nil or new.
func (c *Contents) entries(rs *ruleset.Ruleset, s *ruleset.Service, was *portEntries) *portEntries {
	return c.entriesOf(rs, s, c.keep(s, was))
}

// keep is what s's entries keep of was, its previous entries: its group
// IDs and slots, or new IDs (taken from c) and no slots when was is nil
// or another port's.
func (c *Contents) keep(s *ruleset.Service, was *portEntries) *portEntries {
	if was != nil && was.name == s.Name {
		return was
	}
	p := &portEntries{name: s.Name}
	if len(c.free) > 0 {
		p.base, c.free = c.free[0], c.free[1:]
	} else {
		p.base, c.next = c.next, c.next+2
	}
	return p
}

// entriesOf computes the entries of s with the group IDs and slots of
// was (see keep); it reads c but does not change it.
func (c *Contents) entriesOf(rs *ruleset.Ruleset, s *ruleset.Service, was *portEntries) *portEntries {
	p := &portEntries{name: s.Name, base: was.base}
	p.cluster = slots(was.cluster, s.ClusterTargets)
	p.local = slots(was.local, s.LocalTargets)
	if s.ClusterIP.IsValid() {
		p.clusterIP = s.ClusterIP
	}
	if proto := protoOf(s.Name.Protocol); proto != 0 {
		for _, f := range s.Frontends() {
			if f.Kind == ruleset.KindClusterAddress || !keyed(f) || !rs.Owns(s, f) {
				continue
			}
			v, ok := value(s, f.Kind, p)
			if !ok {
				continue
			}
			k := ServiceKey{Addr: AddrOf(f.Addr), Port: f.Port, Proto: proto}
			if f.Kind == ruleset.KindNodePort {
				k = NodePortKey(c.family, f.Port, proto)
			}
			p.services = append(p.services, Entry[ServiceKey, ServiceValue]{k, v})
		}
		slices.SortFunc(p.services, func(a, b Entry[ServiceKey, ServiceValue]) int { return compareServiceKey(a.Key, b.Key) })
	}
	return p
}

// keyed reports whether the services maps can hold frontend f: a node
// port, or an address frontend at a valid address that is not unspecified.
// A key at the unspecified address is a node port's, so an unspecified
// load-balancer IP (which the API server accepts) is not served: kube-proxy's
// rule for it takes only packets that arrive addressed to 0.0.0.0 or ::,
// as a process's connect() to them reaches the loopback address instead.
func keyed(f ruleset.Frontend) bool {
	return f.Kind == ruleset.KindNodePort || f.Addr.IsValid() && !f.Addr.IsUnspecified()
}

// NodePortKey is the key of a node port of family: its Addr is the
// family's unspecified address (::ffff:0.0.0.0 for IPv4, :: for IPv6).
func NodePortKey(family v1.IPFamily, port uint16, proto uint8) ServiceKey {
	a := netip.IPv6Unspecified()
	if family == v1.IPv4Protocol {
		a = netip.IPv4Unspecified()
	}
	return ServiceKey{Addr: AddrOf(a), Port: port, Proto: proto}
}

// value is the services map value of s's frontends of kind; false when
// a flow there is not served.
func value(s *ruleset.Service, kind ruleset.FrontendKind, p *portEntries) (ServiceValue, bool) {
	if kind == ruleset.KindLoadBalancerIP && s.ExternalTraffic.Steered && s.UsesFirewall() && !s.FirewallAllowsNode {
		return ServiceValue{Flags: FlagFirewall}, true
	}
	return routeValue(fromNode(s, kind), s, p, uint32(max(s.Affinity.Seconds(), 0)))
}

// fromNode is the route of a flow from a process on the node (or a pod on
// it) to s's frontend of kind, read from the Builder's decisions as
// ruleset.Ruleset.Decide reads them (without Decide's list of choices,
// whose exact shares cost allocations a render does not need): the
// Internal route for the cluster IP; for an external frontend, the cluster
// targets where ExternalTraffic.ShortCircuit (flows from pods and from the
// node), else the External route.
func fromNode(s *ruleset.Service, kind ruleset.FrontendKind) ruleset.Route {
	switch {
	case kind == ruleset.KindClusterIP:
		return s.Internal
	case s.ExternalTraffic.ShortCircuit:
		return ruleset.RouteCluster
	}
	return s.External
}

// routeValue is the value of a frontend whose flows take route: a flag,
// or the group of the route's targets with the affinity timeout; false
// for RouteNone. A route that spreads over no targets drops, as Decide
// says.
func routeValue(route ruleset.Route, s *ruleset.Service, p *portEntries, affinity uint32) (ServiceValue, bool) {
	switch route {
	case ruleset.RouteReject:
		return ServiceValue{Flags: FlagReject}, true
	case ruleset.RouteDrop:
		return ServiceValue{Flags: FlagDrop}, true
	case ruleset.RouteCluster:
		if len(p.cluster) > 0 {
			return ServiceValue{ID: p.base, Count: uint32(len(p.cluster)), Affinity: affinity}, true
		}
		return ServiceValue{Flags: FlagDrop}, true
	case ruleset.RouteLocal:
		if len(p.local) > 0 {
			return ServiceValue{ID: p.base + 1, Count: uint32(len(p.local)), Affinity: affinity}, true
		}
		return ServiceValue{Flags: FlagDrop}, true
	}
	return ServiceValue{}, false
}

// slots places targets in slots: each endpoint that was in prev keeps its
// slot, new ones fill the slots left free from the lowest, and the
// highest slots then move down into the holes that remain, so that the
// slots are 0 … len(targets)−1.
func slots(prev []netip.AddrPort, targets []ruleset.Target) []netip.AddrPort {
	if len(targets) == 0 {
		return nil
	}
	if len(prev) == 0 {
		out := make([]netip.AddrPort, len(targets))
		for i, t := range targets {
			out[i] = t.Endpoint
		}
		return out
	}
	want := make(map[netip.AddrPort]bool, len(targets))
	for _, t := range targets {
		want[t.Endpoint] = true
	}
	out := make([]netip.AddrPort, max(len(prev), len(targets)))
	kept := make(map[netip.AddrPort]bool, len(prev))
	for i, at := range prev {
		if want[at] && !kept[at] {
			out[i] = at
			kept[at] = true
		}
	}
	hole := 0
	for _, t := range targets {
		if kept[t.Endpoint] {
			continue
		}
		kept[t.Endpoint] = true
		for out[hole].IsValid() {
			hole++
		}
		out[hole] = t.Endpoint
	}
	// Move the highest into the lowest holes.
	lo, hi := 0, len(out)-1
	for {
		for lo < len(out) && out[lo].IsValid() {
			lo++
		}
		for hi >= 0 && !out[hi].IsValid() {
			hi--
		}
		if lo >= hi {
			break
		}
		out[lo], out[hi] = out[hi], netip.AddrPort{}
	}
	return out[:len(kept)]
}
