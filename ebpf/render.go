package ebpf

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// v6Group is the bit that sets the group IDs of IPv6 Services apart from
// those of IPv4 ones: both families share the maps.
const v6Group = 1 << 31

// Contents is the desired contents of the maps for one IP family's
// Ruleset, with the group IDs and backend slots it chose: Render keeps
// those of the previous Contents, so that a change of one Service
// changes few elements. It is immutable.
type Contents struct {
	family v1.IPFamily
	ports  map[servicemap.PortName]*portEntries
	// next is the next group ID never given out; free are the IDs of
	// ports gone, sorted, given out first.
	next uint32
	free []uint32
	maps *Maps
}

// portEntries are the groups of one Service port: its cluster targets
// (group base) and its node-local targets (group base+1), each endpoint
// in the slot Render gave it.
type portEntries struct {
	base           uint32
	cluster, local []netip.AddrPort
}

// Family is the IP family of the Ruleset the Contents were rendered from
// ("" for empty Contents).
func (c *Contents) Family() v1.IPFamily {
	if c == nil {
		return ""
	}
	return c.family
}

// Maps returns the map contents, which must not be modified: nil
// Contents give empty Maps.
func (c *Contents) Maps() *Maps {
	if c == nil || c.maps == nil {
		return NewMaps()
	}
	return c.maps
}

// Render computes the map contents of rs, keeping the group IDs and the
// backend slots of prev (the Contents of the previous Ruleset of the same
// family; nil, or Contents of another family, start afresh). A nil rs
// gives empty Contents. Render is pure and deterministic: the same rs and
// prev give equal Contents.
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
		return &Contents{maps: NewMaps()}
	}
	cfg := rs.Config()
	if prev != nil && prev.family != cfg.Family {
		prev = nil
	}
	c := &Contents{family: cfg.Family, ports: make(map[servicemap.PortName]*portEntries, rs.Len()), maps: NewMaps()}
	c.allocate(rs, prev)
	for _, s := range rs.Services() {
		c.renderPort(rs, s, prev)
	}
	for _, a := range cfg.NodePortAddresses {
		c.maps.NodeAddrs[AddrOf(a)] = 1
	}
	for _, p := range cfg.ServiceCIDRs {
		c.maps.ServiceCIDRs[cidrKeyOf(p)] = 1
	}
	return c
}

// allocate gives each Service port of rs its group base: its own in prev,
// else the lowest freed one, else the next.
func (c *Contents) allocate(rs *ruleset.Ruleset, prev *Contents) {
	c.next = 0
	if c.family == v1.IPv6Protocol {
		c.next = v6Group
	}
	var old map[servicemap.PortName]*portEntries
	if prev != nil {
		c.next, old = prev.next, prev.ports
		c.free = slices.Clone(prev.free)
		for name, p := range old {
			if _, ok := rs.Service(name); !ok {
				c.free = append(c.free, p.base)
			}
		}
		slices.Sort(c.free)
	}
	for _, s := range rs.Services() {
		if p, ok := old[s.Name]; ok {
			c.ports[s.Name] = &portEntries{base: p.base}
			continue
		}
		var base uint32
		if len(c.free) > 0 {
			base, c.free = c.free[0], c.free[1:]
		} else {
			base, c.next = c.next, c.next+2
		}
		c.ports[s.Name] = &portEntries{base: base}
	}
	if len(c.free) == 0 {
		c.free = nil
	}
}

// renderPort writes the entries of s.
func (c *Contents) renderPort(rs *ruleset.Ruleset, s *ruleset.Service, prev *Contents) {
	p := c.ports[s.Name]
	var was *portEntries
	if prev != nil {
		was = prev.ports[s.Name]
	}
	if was == nil {
		was = &portEntries{}
	}
	p.cluster = slots(was.cluster, s.ClusterTargets)
	p.local = slots(was.local, s.LocalTargets)
	for i, at := range p.cluster {
		c.maps.Backends[BackendKey{p.base, uint32(i)}] = BackendValue{Addr: AddrOf(at.Addr()), Port: at.Port()}
	}
	for i, at := range p.local {
		c.maps.Backends[BackendKey{p.base + 1, uint32(i)}] = BackendValue{Addr: AddrOf(at.Addr()), Port: at.Port()}
	}
	if s.ClusterIP.IsValid() {
		c.maps.ClusterAddrs[AddrOf(s.ClusterIP)] = 1
	}
	proto := protoOf(s.Name.Protocol)
	if proto == 0 {
		return
	}
	for _, f := range s.Frontends() {
		if f.Kind == ruleset.KindClusterAddress || f.Kind != ruleset.KindNodePort && !f.Addr.IsValid() || !rs.Owns(s, f) {
			continue
		}
		v, ok := c.value(rs, s, f.Kind, p)
		if !ok {
			continue
		}
		key := ServiceKey{Addr: AddrOf(f.Addr), Port: f.Port, Proto: proto}
		if f.Kind == ruleset.KindNodePort {
			key = NodePortKey(c.family, f.Port, proto)
		}
		c.maps.Services[key] = v
	}
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
func (c *Contents) value(rs *ruleset.Ruleset, s *ruleset.Service, kind ruleset.FrontendKind, p *portEntries) (ServiceValue, bool) {
	if kind == ruleset.KindLoadBalancerIP && s.ExternalTraffic.Steered && s.UsesFirewall() && !s.FirewallAllowsNode {
		return ServiceValue{Flags: FlagFirewall}, true
	}
	d := rs.Decide(s, kind, ruleset.Source{FromNode: true})
	switch d.Verdict {
	case ruleset.VerdictReject:
		return ServiceValue{Flags: FlagReject}, true
	case ruleset.VerdictDrop:
		return ServiceValue{Flags: FlagDrop}, true
	case ruleset.VerdictForward:
	default:
		return ServiceValue{}, false
	}
	local := s.Internal == ruleset.RouteLocal
	if kind != ruleset.KindClusterIP {
		local = !d.ShortCircuit && s.External == ruleset.RouteLocal
	}
	v := ServiceValue{ID: p.base, Count: uint32(len(p.cluster)), Affinity: uint32(max(s.Affinity.Seconds(), 0))}
	if local {
		v.ID, v.Count = p.base+1, uint32(len(p.local))
	}
	return v, true
}

// slots places targets in slots: each endpoint that was in prev keeps its
// slot, new ones fill the slots left free from the lowest, and the
// highest slots then move down into the holes that remain, so that the
// slots are 0 … len(targets)−1.
func slots(prev []netip.AddrPort, targets []ruleset.Target) []netip.AddrPort {
	if len(targets) == 0 {
		return nil
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
