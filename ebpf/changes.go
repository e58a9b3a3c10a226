package ebpf

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Changes returns the element changes from old's elements to new's: the
// same Ops as Diff(old.Maps(), new.Maps()). When new was rendered from old
// (or from Contents rendered from old), it compares only the ports whose
// entries the two do not share: time proportional to the change. A nil
// old counts as empty.
func Changes(old, new *Contents) Ops {
	if old == nil || new == nil || old.family != new.family {
		return Diff(old.Maps(), new.Maps())
	}
	// The dels hold the old value of each key a port gave up.
	svcPut, svcDel := map[ServiceKey]ServiceValue{}, map[ServiceKey]ServiceValue{}
	bePut, beDel := map[BackendKey]BackendValue{}, map[BackendKey]BackendValue{}
	old.ports.Diff(new.ports, func(_ servicemap.PortName, before, after *portEntries) {
		if before == after {
			return // a neighbour in a leaf the two do not share
		}
		if before == nil {
			before = &portEntries{}
		}
		if after == nil {
			after = &portEntries{}
		}
		was := map[ServiceKey]ServiceValue{}
		for _, e := range before.services {
			was[e.Key] = e.Value
		}
		for _, e := range after.services {
			if v, ok := was[e.Key]; !ok || v != e.Value {
				svcPut[e.Key] = e.Value
			}
			delete(was, e.Key)
		}
		for k, v := range was {
			svcDel[k] = v
		}
		had := maps.Collect(before.backends())
		for k, v := range after.backends() {
			if w, ok := had[k]; !ok || w != v {
				bePut[k] = v
			}
			delete(had, k)
		}
		for k, v := range had {
			beDel[k] = v
		}
	})
	var o Ops
	// A key one port gave up and another took is written (when its value
	// changed), not deleted.
	for k, v := range bePut {
		w, moved := beDel[k]
		delete(beDel, k)
		if !moved || w != v {
			o.PutBackends = append(o.PutBackends, Entry[BackendKey, BackendValue]{k, v})
		}
	}
	for k, v := range svcPut {
		w, moved := svcDel[k]
		delete(svcDel, k)
		if !moved || w != v {
			o.PutServices = append(o.PutServices, Entry[ServiceKey, ServiceValue]{k, v})
		}
	}
	o.DelBackends = slices.Collect(maps.Keys(beDel))
	o.DelServices = slices.Collect(maps.Keys(svcDel))
	slices.SortFunc(o.PutBackends, func(a, b Entry[BackendKey, BackendValue]) int { return compareBackendKey(a.Key, b.Key) })
	slices.SortFunc(o.PutServices, func(a, b Entry[ServiceKey, ServiceValue]) int { return compareServiceKey(a.Key, b.Key) })
	slices.SortFunc(o.DelBackends, compareBackendKey)
	slices.SortFunc(o.DelServices, compareServiceKey)
	old.addrs.Diff(new.addrs, func(k netip.Addr, before, after int) {
		a := AddrOf(k)
		switch {
		case before == 0 && after > 0:
			o.PutClusterAddrs = append(o.PutClusterAddrs, a)
		case before > 0 && after == 0:
			o.DelClusterAddrs = append(o.DelClusterAddrs, a)
		}
	})
	slices.SortFunc(o.PutClusterAddrs, compareAddr)
	slices.SortFunc(o.DelClusterAddrs, compareAddr)
	small := Diff(old.sets(), new.sets())
	o.PutNodeAddrs, o.DelNodeAddrs = small.PutNodeAddrs, small.DelNodeAddrs
	o.PutServiceCIDRs, o.DelServiceCIDRs = small.PutServiceCIDRs, small.DelServiceCIDRs
	return o
}

// GoneEndpoints returns the endpoints that old has in some group of a UDP
// Service port and new in none, sorted: those whose translated connected
// UDP sockets must go. Like Changes,
// it takes time proportional to the change when new was rendered from
// old.
func GoneEndpoints(old, new *Contents) []netip.AddrPort {
	var gone []netip.AddrPort
	if old == nil {
		return nil
	}
	var after cowmap.Map[netip.AddrPort, int]
	if new != nil {
		after = new.endpoints
	}
	old.endpoints.Diff(after, func(k netip.AddrPort, before, after int) {
		if before > 0 && after == 0 {
			gone = append(gone, k)
		}
	})
	slices.SortFunc(gone, netip.AddrPort.Compare)
	return gone
}

// sets are c's node addresses and Service CIDRs as Maps.
func (c *Contents) sets() *Maps {
	m := &Maps{NodeAddrs: map[Addr]uint8{}, ServiceCIDRs: map[CIDRKey]uint8{}}
	for _, a := range c.nodeAddrs {
		m.NodeAddrs[AddrOf(a)] = 1
	}
	for _, p := range c.cidrs {
		m.ServiceCIDRs[cidrKeyOf(p)] = 1
	}
	return m
}

// AllOps returns the Ops that write every element of c into empty maps, as
// Diff(nil, c.Maps()) does, but read from c's entries directly and with
// the lists in no particular order: a first sync of a large cluster spends
// neither the time to list the elements in Maps nor that to sort them.
func (c *Contents) AllOps() Ops {
	o, _, _ := c.allOps(false)
	return o
}

// allOps is AllOps; packed, it leaves the backends out of the Ops and
// returns them as the backends map's elements (chunks of slots, as
// packBackends would make them from empty maps) with their number of
// slots: a first sync needs no list of a million slots to pack.
func (c *Contents) allOps(packed bool) (Ops, chunkWrites, int) {
	var o Ops
	var w chunkWrites
	if c == nil {
		return o, w, 0
	}
	// Sized first: growing the slices element by element cost a fifth of
	// a first sync's CPU at 100,000 Services (1.2 million elements).
	var services, backends, chunks int
	c.ports.All(func(_ servicemap.PortName, p *portEntries) bool {
		services += len(p.services)
		backends += len(p.cluster) + len(p.local)
		chunks += (len(p.cluster)+chunkSlots-1)/chunkSlots + (len(p.local)+chunkSlots-1)/chunkSlots
		return true
	})
	o.PutServices = slices.Grow(o.PutServices, services)
	if packed {
		w.PutKeys, w.PutValues = make([]chunkKey, 0, chunks), make([]backendChunk, 0, chunks)
	} else {
		o.PutBackends = slices.Grow(o.PutBackends, backends)
	}
	c.ports.All(func(_ servicemap.PortName, p *portEntries) bool {
		o.PutServices = append(o.PutServices, p.services...)
		if !packed {
			for k, v := range p.backends() {
				o.PutBackends = append(o.PutBackends, Entry[BackendKey, BackendValue]{k, v})
			}
			return true
		}
		for g, slots := range [2][]netip.AddrPort{p.cluster, p.local} {
			for i, at := range slots {
				if i%chunkSlots == 0 {
					w.PutKeys = append(w.PutKeys, chunkKey{p.base + uint32(g), uint32(i / chunkSlots)})
					w.PutValues = append(w.PutValues, backendChunk{})
				}
				w.PutValues[len(w.PutValues)-1][i%chunkSlots] = BackendValue{Addr: AddrOf(at.Addr()), Port: at.Port()}
			}
		}
		return true
	})
	c.addrs.All(func(k netip.Addr, _ int) bool {
		o.PutClusterAddrs = append(o.PutClusterAddrs, AddrOf(k))
		return true
	})
	sets := c.sets()
	o.PutNodeAddrs = slices.Collect(maps.Keys(sets.NodeAddrs))
	o.PutServiceCIDRs = slices.Collect(maps.Keys(sets.ServiceCIDRs))
	return o, w, backends
}
