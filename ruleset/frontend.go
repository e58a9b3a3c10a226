package ruleset

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/sorted"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Frontend is a destination on which a Service port receives traffic: an
// address, protocol and port (cluster IP, external IP or load-balancer IP
// with the Service port), a node port (Addr not valid), or a cluster IP as a
// whole (Protocol "" and Port 0: the key of a set of active cluster IPs).
// Two Service ports with a Frontend in common compete for the same kernel
// map entries; a backend decides which one wins.
type Frontend struct {
	Addr     netip.Addr
	Protocol v1.Protocol
	Port     uint16
}

// String is "198.19.0.10:80/TCP" for an address with a port, "node port
// 30080/TCP" for a node port, and "198.19.0.10" for a cluster IP as a whole.
func (f Frontend) String() string {
	switch {
	case !f.Addr.IsValid():
		return "node port " + strconv.Itoa(int(f.Port)) + "/" + string(f.Protocol)
	case f.Protocol == "" && f.Port == 0:
		return f.Addr.String()
	}
	return netip.AddrPortFrom(f.Addr, f.Port).String() + "/" + string(f.Protocol)
}

// Compare orders Frontends by address (node ports first), protocol, then
// port.
func (f Frontend) Compare(g Frontend) int {
	if c := f.Addr.Compare(g.Addr); c != 0 {
		return c
	}
	if f.Protocol != g.Protocol {
		return cmp.Compare(f.Protocol, g.Protocol)
	}
	return cmp.Compare(f.Port, g.Port)
}

// Frontends returns the Frontends of s, sorted, each once: its cluster IP
// alone, its cluster IP, external IPs and load-balancer IPs each with its
// protocol and port, and its node port.
func (s *Service) Frontends() []Frontend {
	fs := s.appendFrontends(make([]Frontend, 0, 3+len(s.ExternalIPs)+len(s.LoadBalancerIPs)))
	slices.SortFunc(fs, Frontend.Compare)
	return slices.Compact(fs)
}

// appendFrontends appends the Frontends of s to dst, unsorted and maybe
// twice.
func (s *Service) appendFrontends(dst []Frontend) []Frontend {
	proto := s.Name.Protocol
	dst = append(dst, Frontend{Addr: s.ClusterIP}, Frontend{Addr: s.ClusterIP, Protocol: proto, Port: s.Port})
	for _, ip := range s.ExternalIPs {
		dst = append(dst, Frontend{Addr: ip, Protocol: proto, Port: s.Port})
	}
	for _, ip := range s.LoadBalancerIPs {
		dst = append(dst, Frontend{Addr: ip, Protocol: proto, Port: s.Port})
	}
	if s.NodePort != 0 {
		dst = append(dst, Frontend{Protocol: proto, Port: s.NodePort})
	}
	return dst
}

// ServicesAt returns the names of the Service ports whose Frontends include
// f, sorted. The slice must not be modified. It takes O(log n) time for n
// Frontends in the Ruleset, after a first call on a Ruleset made by Build,
// which takes O(n log n) to index them.
func (r *Ruleset) ServicesAt(f Frontend) []servicemap.PortName {
	idx := r.index()
	e, _ := idx.get(f)
	return e.names
}

// frontendIndex maps each Frontend to the sorted names of the Service ports
// that have it.
type frontendIndex = tree[Frontend, frontendNames]

// frontendNames is an entry of a frontendIndex: never without names.
type frontendNames struct {
	f     Frontend
	names []servicemap.PortName
}

func (e frontendNames) key() Frontend { return e.f }

// index returns the Frontend index of r, made on first use.
func (r *Ruleset) index() frontendIndex {
	if p := r.frontends.Load(); p != nil {
		return *p
	}
	idx := buildIndex(r.Services())
	// Concurrent first calls make equal indexes; all use the one stored
	// first.
	r.frontends.CompareAndSwap(nil, &idx)
	return *r.frontends.Load()
}

// buildIndex makes the frontendIndex of svcs, which are sorted by name.
func buildIndex(svcs []*Service) frontendIndex {
	type entry struct {
		f Frontend
		i int // the Service's index in svcs
	}
	entries := make([]entry, 0, 3*len(svcs))
	var fs []Frontend
	for i, s := range svcs {
		fs = s.appendFrontends(fs[:0])
		for _, f := range fs {
			entries = append(entries, entry{f, i})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Or(a.f.Compare(b.f), cmp.Compare(a.i, b.i)) })
	entries = slices.Compact(entries)

	groups := make([]frontendNames, 0, len(entries))
	names := make([]servicemap.PortName, len(entries))
	for i, e := range entries {
		names[i] = svcs[e.i].Name
	}
	for start := 0; start < len(entries); {
		end := start + 1
		for end < len(entries) && entries[end].f == entries[start].f {
			end++
		}
		// Capped, so that nothing appends into the next group's names.
		groups = append(groups, frontendNames{entries[start].f, names[start:end:end]})
		start = end
	}
	return treeFromSorted(groups)
}

// moveFrontends returns idx with name taken off the Frontends of before and
// put on those of after (either may be nil).
func moveFrontends(idx frontendIndex, name servicemap.PortName, before, after *Service) frontendIndex {
	if before != nil && after != nil && sameFrontends(before, after) {
		return idx // the common case: only the endpoints changed
	}
	var fb, fa []Frontend
	if before != nil {
		fb = before.Frontends()
	}
	if after != nil {
		fa = after.Frontends()
	}
	sorted.Walk(fb, fa, Frontend.Compare,
		func(gone Frontend) { idx = withoutName(idx, gone, name) },
		func(added Frontend) { idx = withName(idx, added, name) },
		func(Frontend, Frontend) {})
	return idx
}

// sameFrontends reports whether two Services of one name have the same
// Frontends, looking at the fields they come from.
func sameFrontends(a, b *Service) bool {
	return a.ClusterIP == b.ClusterIP && a.Port == b.Port && a.NodePort == b.NodePort &&
		slices.Equal(a.ExternalIPs, b.ExternalIPs) && slices.Equal(a.LoadBalancerIPs, b.LoadBalancerIPs)
}

func withName(idx frontendIndex, f Frontend, name servicemap.PortName) frontendIndex {
	e, _ := idx.get(f)
	i, found := slices.BinarySearchFunc(e.names, name, servicemap.PortName.Compare)
	if found {
		return idx
	}
	return idx.with(frontendNames{f, slices.Concat(e.names[:i], []servicemap.PortName{name}, e.names[i:])})
}

func withoutName(idx frontendIndex, f Frontend, name servicemap.PortName) frontendIndex {
	e, _ := idx.get(f)
	i, found := slices.BinarySearchFunc(e.names, name, servicemap.PortName.Compare)
	switch {
	case !found:
		return idx
	case len(e.names) == 1:
		return idx.without(f)
	}
	return idx.with(frontendNames{f, slices.Concat(e.names[:i], e.names[i+1:])})
}
