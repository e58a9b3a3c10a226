package ebpf

import (
	"bytes"
	"cmp"
	"maps"
	"slices"
)

// Entry is one element to write into a map.
type Entry[K, V any] struct {
	Key   K
	Value V
}

// Ops are the element changes that turn the maps from one Maps into
// another. An executor applies them in the order of the fields, so that
// the programs never meet a service whose backends are not there yet:
// backends and sets written, then services written, then services
// deleted, then backends and sets deleted. Each list is sorted by key.
type Ops struct {
	PutBackends     []Entry[BackendKey, BackendValue]
	PutNodeAddrs    []Addr
	PutClusterAddrs []Addr
	PutServiceCIDRs []CIDRKey
	PutServices     []Entry[ServiceKey, ServiceValue]
	DelServices     []ServiceKey
	DelBackends     []BackendKey
	DelNodeAddrs    []Addr
	DelClusterAddrs []Addr
	DelServiceCIDRs []CIDRKey
}

// Len is the number of element changes.
func (o Ops) Len() int {
	return len(o.PutBackends) + len(o.PutNodeAddrs) + len(o.PutClusterAddrs) + len(o.PutServiceCIDRs) + len(o.PutServices) +
		len(o.DelServices) + len(o.DelBackends) + len(o.DelNodeAddrs) + len(o.DelClusterAddrs) + len(o.DelServiceCIDRs)
}

// Diff returns the element changes from old to new; nil counts as empty
// Maps. It is pure: the same two Maps give equal Ops.
func Diff(old, new *Maps) Ops {
	if old == nil {
		old = NewMaps()
	}
	if new == nil {
		new = NewMaps()
	}
	var o Ops
	o.PutBackends, o.DelBackends = diffMap(old.Backends, new.Backends, compareBackendKey)
	o.PutServices, o.DelServices = diffMap(old.Services, new.Services, compareServiceKey)
	o.PutNodeAddrs, o.DelNodeAddrs = diffSet(old.NodeAddrs, new.NodeAddrs, compareAddr)
	o.PutClusterAddrs, o.DelClusterAddrs = diffSet(old.ClusterAddrs, new.ClusterAddrs, compareAddr)
	o.PutServiceCIDRs, o.DelServiceCIDRs = diffSet(old.ServiceCIDRs, new.ServiceCIDRs, compareCIDRKey)
	return o
}

// diffMap returns the entries of new that old lacks or holds with another
// value, and the keys of old that new lacks, each sorted by compare.
func diffMap[K, V comparable](old, new map[K]V, compare func(a, b K) int) ([]Entry[K, V], []K) {
	var put []Entry[K, V]
	var del []K
	for k, v := range new {
		if w, ok := old[k]; !ok || w != v {
			put = append(put, Entry[K, V]{k, v})
		}
	}
	for k := range old {
		if _, ok := new[k]; !ok {
			del = append(del, k)
		}
	}
	slices.SortFunc(put, func(a, b Entry[K, V]) int { return compare(a.Key, b.Key) })
	slices.SortFunc(del, compare)
	return put, del
}

// diffSet is diffMap for maps used as sets.
func diffSet[K comparable](old, new map[K]uint8, compare func(a, b K) int) ([]K, []K) {
	put, del := diffMap(old, new, compare)
	keys := make([]K, len(put))
	for i, e := range put {
		keys[i] = e.Key
	}
	return nilIfEmpty(keys), del
}

func nilIfEmpty[K any](ks []K) []K {
	if len(ks) == 0 {
		return nil
	}
	return ks
}

func compareAddr(a, b Addr) int { return bytes.Compare(a[:], b[:]) }

func compareServiceKey(a, b ServiceKey) int {
	return cmp.Or(compareAddr(a.Addr, b.Addr), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
}

func compareBackendKey(a, b BackendKey) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Slot, b.Slot))
}

func compareCIDRKey(a, b CIDRKey) int {
	return cmp.Or(compareAddr(a.Addr, b.Addr), cmp.Compare(a.Prefixlen, b.Prefixlen))
}

// Equal reports whether m and o hold the same elements; nil holds none.
func (m *Maps) Equal(o *Maps) bool {
	if m == nil {
		m = NewMaps()
	}
	if o == nil {
		o = NewMaps()
	}
	return maps.Equal(m.Services, o.Services) && maps.Equal(m.Backends, o.Backends) &&
		maps.Equal(m.NodeAddrs, o.NodeAddrs) && maps.Equal(m.ClusterAddrs, o.ClusterAddrs) &&
		maps.Equal(m.ServiceCIDRs, o.ServiceCIDRs)
}
