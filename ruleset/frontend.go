package ruleset

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/internal/sorted"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Frontend is a destination on which a Service port receives traffic, and
// the kind of frontend it is: an address, protocol and port (a cluster IP,
// external IP or load-balancer IP with the Service port), a node port (Addr
// not valid), or a cluster IP as a whole (KindClusterAddress: Protocol ""
// and Port 0, the key of a set of active cluster IPs).
//
// Several Service ports may have a frontend at the same destination (the
// address, protocol and port, whatever the kind); Ruleset.Owner says which
// one takes its flows.
type Frontend struct {
	Kind     FrontendKind
	Addr     netip.Addr
	Protocol v1.Protocol
	Port     uint16
}

// String is "198.19.0.10:80/TCP" for an address with a port, "node port
// 30080/TCP" for a node port, and "198.19.0.10" for a cluster IP as a whole.
func (f Frontend) String() string {
	switch f.Kind {
	case KindNodePort:
		return "node port " + strconv.Itoa(int(f.Port)) + "/" + string(f.Protocol)
	case KindClusterAddress:
		return f.Addr.String()
	}
	return netip.AddrPortFrom(f.Addr, f.Port).String() + "/" + string(f.Protocol)
}

// Compare orders Frontends by address (node ports first), protocol, port,
// then kind.
func (f Frontend) Compare(g Frontend) int {
	if c := f.Addr.Compare(g.Addr); c != 0 {
		return c
	}
	if f.Protocol != g.Protocol {
		return cmp.Compare(f.Protocol, g.Protocol)
	}
	return cmp.Or(cmp.Compare(f.Port, g.Port), cmp.Compare(f.Kind, g.Kind))
}

// destination is f without its kind: what the kernel matches on.
func (f Frontend) destination() Frontend {
	f.Kind = 0
	return f
}

// Frontends returns the Frontends of s, sorted, each once: its cluster IP
// as a whole, its cluster IP, external IPs and load-balancer IPs each with
// its protocol and port, and its node port; none for a Service without a
// ServicePort.
func (s *Service) Frontends() []Frontend {
	if !s.valid() {
		return nil
	}
	return s.AppendFrontends(make([]Frontend, 0, 3+len(s.ExternalIPs)+len(s.LoadBalancerIPs)))
}

// AppendFrontends appends the Frontends of s, as Frontends returns them,
// to dst and returns the extended slice: a renderer that walks every
// Service reuses one buffer.
func (s *Service) AppendFrontends(dst []Frontend) []Frontend {
	if !s.valid() {
		return dst
	}
	start := len(dst)
	dst = s.appendFrontends(dst)
	fs := dst[start:]
	slices.SortFunc(fs, Frontend.Compare)
	return dst[:start+len(slices.Compact(fs))]
}

// destinations returns the destinations of the Frontends of s, sorted, each
// once.
func (s *Service) destinations() []Frontend {
	fs := s.appendFrontends(make([]Frontend, 0, 3+len(s.ExternalIPs)+len(s.LoadBalancerIPs)))
	for i := range fs {
		fs[i] = fs[i].destination()
	}
	slices.SortFunc(fs, Frontend.Compare)
	return slices.Compact(fs)
}

// appendFrontends appends the Frontends of s to dst, unsorted and maybe
// twice, in the order of their kinds.
func (s *Service) appendFrontends(dst []Frontend) []Frontend {
	proto := s.Name.Protocol
	dst = append(dst,
		Frontend{Kind: KindClusterAddress, Addr: s.ClusterIP},
		Frontend{Kind: KindClusterIP, Addr: s.ClusterIP, Protocol: proto, Port: s.Port})
	for _, ip := range s.ExternalIPs {
		dst = append(dst, Frontend{Kind: KindExternalIP, Addr: ip, Protocol: proto, Port: s.Port})
	}
	for _, ip := range s.LoadBalancerIPs {
		dst = append(dst, Frontend{Kind: KindLoadBalancerIP, Addr: ip, Protocol: proto, Port: s.Port})
	}
	if s.NodePort != 0 {
		dst = append(dst, Frontend{Kind: KindNodePort, Protocol: proto, Port: s.NodePort})
	}
	return dst
}

// Owner returns the Service port that takes the new flows to f's
// destination (its address, protocol and port; f.Kind is ignored) and the
// kind of its frontend they reach it through; ok is false when no Service
// port has a frontend there. Both backends render the frontend for the
// owner alone. When several Service ports have a frontend at the
// destination (the API server prevents it for cluster IPs and node ports,
// not for external and load-balancer IPs), the owner is:
//
//  1. one that takes the flows into its rules (a cluster IP whose Internal
//     route spreads over targets; an external frontend whose
//     ExternalTraffic is Steered) rather than one that only rejects or
//     drops them. This is what kube-proxy does in both its modes: a port
//     without (local) endpoints only has a reject or drop rule in the
//     filter hooks, which see the flow after the other port's DNAT.
//  2. among those, the first in name order, and within one port its
//     cluster IP before its external IPs before its load-balancer IPs.
//     kube-proxy has no rule for this case: both its modes write the
//     Service ports in the order of a Go map, its iptables mode serving
//     the first rule written, its nftables mode the map element written
//     last, so its choice varies between runs. This one is svcproxy's,
//     and the reference proxies name both ports in a warning.
//
// It takes O(k log n) time for k Service ports at the destination.
func (r *Ruleset) Owner(f Frontend) (owner *Service, kind FrontendKind, ok bool) {
	takes := false
	for _, name := range r.ServicesAt(f) {
		s, found := r.Service(name)
		if !found {
			continue
		}
		k, t := s.kindAt(f.destination())
		if owner == nil || t && !takes {
			owner, kind, takes = s, k, t
		}
		if takes {
			break
		}
	}
	return owner, kind, owner != nil
}

// Owns reports whether s, a Service of r, is the owner of f's destination
// through a frontend of f's kind: whether a backend renders f for s.
func (r *Ruleset) Owns(s *Service, f Frontend) bool {
	if !s.valid() {
		return false
	}
	if names := r.ServicesAt(f); len(names) == 1 && names[0] == s.Name {
		kind, _ := s.kindAt(f.destination())
		return kind == f.Kind
	}
	owner, kind, ok := r.Owner(f)
	return ok && owner.Name == s.Name && kind == f.Kind
}

// kindAt returns the kind of s's frontend at destination d that takes the
// flows to it, or else its first, and whether it takes them (see Owner).
func (s *Service) kindAt(d Frontend) (FrontendKind, bool) {
	var first FrontendKind
	var buf [8]Frontend
	for _, f := range s.appendFrontends(buf[:0]) {
		if f.destination() != d {
			continue
		}
		if s.takes(f.Kind) {
			return f.Kind, true
		}
		if first == 0 {
			first = f.Kind
		}
	}
	return first, false
}

// takes reports whether flows to s's frontends of kind enter its rules,
// rather than being only rejected or dropped.
func (s *Service) takes(kind FrontendKind) bool {
	switch kind {
	case KindClusterIP:
		return s.Internal == RouteCluster || s.Internal == RouteLocal
	case KindNodePort, KindExternalIP, KindLoadBalancerIP:
		return s.ExternalTraffic.Steered
	}
	return false
}

// ServicesAt returns the names of the Service ports with a Frontend at f's
// destination (its address, protocol and port; f.Kind is ignored), sorted.
// The slice must not be modified. It takes O(log n) time for n Frontends
// in the Ruleset, after a first call on a Ruleset made by Build, which
// takes O(n log n) to index them, sorting them in up to GOMAXPROCS
// goroutines (the index is the same for every number).
func (r *Ruleset) ServicesAt(f Frontend) []servicemap.PortName {
	if r == nil {
		return nil
	}
	idx := r.index()
	names, _ := idx.Get(f.destination())
	return names
}

// frontendIndex maps each destination (a Frontend without its kind) to the
// sorted names of the Service ports with a Frontend there, never none.
type frontendIndex = cowmap.Map[Frontend, []servicemap.PortName]

// index returns the Frontend index of r, made on first use.
func (r *Ruleset) index() frontendIndex {
	if p := r.frontends.Load(); p != nil {
		return *p
	}
	svcs := r.Services()
	idx := buildIndex(svcs, destRanges(svcs))
	// Concurrent first calls make equal indexes; all use the one stored
	// first.
	r.frontends.CompareAndSwap(nil, &idx)
	return *r.frontends.Load()
}

// destEntry is one frontend of a Service port in sortedDestinations.
type destEntry struct {
	key  frontendKey // of the destination, when keyed
	svc  int32       // the Service's index
	dest int32       // the destination's index in its run's dsts
	kind FrontendKind
}

// minDestRange is the fewest Services whose frontends sortedDestinations
// and sharedDestinations give one goroutine to collect and sort: those of
// fewer than twice as many are sorted in the calling goroutine.
// maxDestRuns is the most runs they make, so that merging them compares
// few heads.
const (
	minDestRange = 1024
	maxDestRuns  = 8
)

// destRanges are the ranges of svcs that sortedDestinations and
// sharedDestinations split them into.
func destRanges(svcs []*Service) [][2]int {
	n := len(svcs)
	return parallel.Ranges(n, max(minDestRange, (n+maxDestRuns-1)/maxDestRuns))
}

// destRun is the frontends of one range of Services, sorted as
// sortedDestinations sorts them: their destinations, and one entry per
// frontend, whose svc is an index in all Services and whose dest an index
// in dsts. keyed says that every destination has a frontendKey.
type destRun struct {
	dsts    []Frontend
	entries []destEntry
	keyed   bool
}

// sortedDestinations returns the frontends of svcs as sorted runs, one
// per range of ranges (contiguous, in order, covering svcs), each
// collected and sorted in a goroutine of its own: eachDestination walks
// them merged.
func sortedDestinations(svcs []*Service, ranges [][2]int) []destRun {
	runs := make([]destRun, len(ranges))
	parallel.Run(ranges, func(i, lo, hi int) {
		runs[i] = sortedRun(svcs, lo, hi)
	})
	return runs
}

// sortedRun collects the frontends of svcs[lo:hi] (appendFrontends: a
// frontend a port has twice is there twice) and sorts their entries by
// destination (as Frontend.Compare sorts them), then by Service. It sorts
// by frontendKey (without pointers, so that moving them costs the garbage
// collector nothing), or by Frontend.Compare if one has no key.
func sortedRun(svcs []*Service, lo, hi int) destRun {
	run := destRun{
		dsts:    make([]Frontend, 0, 3*(hi-lo)),
		entries: make([]destEntry, 0, 3*(hi-lo)),
		keyed:   true,
	}
	for i := lo; i < hi; i++ {
		first := len(run.dsts)
		run.dsts = svcs[i].appendFrontends(run.dsts)
		for d := first; d < len(run.dsts); d++ {
			kind := run.dsts[d].Kind
			run.dsts[d] = run.dsts[d].destination()
			k, ok := frontendKeyOf(run.dsts[d])
			run.keyed = run.keyed && ok
			run.entries = append(run.entries, destEntry{k, int32(i), int32(d), kind})
		}
	}
	if run.keyed {
		slices.SortFunc(run.entries, func(a, b destEntry) int {
			if c := a.key.compare(b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.svc, b.svc)
		})
	} else {
		slices.SortFunc(run.entries, func(a, b destEntry) int {
			return cmp.Or(run.dsts[a.dest].Compare(run.dsts[b.dest]), cmp.Compare(a.svc, b.svc))
		})
	}
	return run
}

// eachDestination calls yield with every entry of runs and its
// destination, in the order of one run of all the Services: by
// destination, then by Service. The destinations, and the entries but for
// the order of those of one Service at one destination, are the same for
// every split into runs.
func eachDestination(runs []destRun, yield func(d *Frontend, e destEntry)) {
	if len(runs) == 1 {
		for _, e := range runs[0].entries {
			yield(&runs[0].dsts[e.dest], e)
		}
		return
	}
	m := merger{runs: runs, heads: make([]int, len(runs)), keyed: true}
	for _, run := range runs {
		m.keyed = m.keyed && run.keyed
	}
	for {
		r := m.smallest()
		if r < 0 {
			return
		}
		e := runs[r].entries[m.heads[r]]
		m.heads[r]++
		yield(&runs[r].dsts[e.dest], e)
	}
}

// merger walks sorted runs in merged order: heads are the indexes of
// their next entries.
type merger struct {
	runs  []destRun
	heads []int
	keyed bool
}

// smallest returns the run whose next entry comes first, or -1 when every
// run is done. Runs hold different Services, so no two entries are equal.
func (m *merger) smallest() int {
	best := -1
	for r := range m.runs {
		if m.heads[r] < len(m.runs[r].entries) && (best < 0 || m.compare(r, best) < 0) {
			best = r
		}
	}
	return best
}

// compare compares the next entries of runs a and b.
func (m *merger) compare(a, b int) int {
	ea, eb := &m.runs[a].entries[m.heads[a]], &m.runs[b].entries[m.heads[b]]
	if m.keyed {
		if c := ea.key.compare(eb.key); c != 0 {
			return c
		}
	} else if c := m.runs[a].dsts[ea.dest].Compare(m.runs[b].dsts[eb.dest]); c != 0 {
		return c
	}
	return cmp.Compare(ea.svc, eb.svc)
}

// buildIndex makes the frontendIndex of svcs, which are sorted by name,
// sorting their frontends in ranges (see sortedDestinations).
func buildIndex(svcs []*Service, ranges [][2]int) frontendIndex {
	runs := sortedDestinations(svcs, ranges)
	n := 0
	for _, run := range runs {
		n += len(run.entries)
	}
	// names has room for every entry, so that appending to it never
	// moves it from under the groups' slices of it.
	names := make([]servicemap.PortName, 0, n)
	type group struct {
		dest  Frontend
		names []servicemap.PortName
	}
	groups := make([]group, 0, n)
	var cur *Frontend
	var last destEntry
	start := 0
	endGroup := func() {
		if cur != nil {
			// Capped, so that nothing appends into the next group's names.
			groups = append(groups, group{*cur, names[start:len(names):len(names)]})
		}
	}
	eachDestination(runs, func(d *Frontend, e destEntry) {
		switch {
		case cur != nil && *d == *cur && e.svc == last.svc:
			return // the Service's second frontend there
		case cur == nil || *d != *cur:
			endGroup()
			cur, start = d, len(names)
		}
		names = append(names, svcs[e.svc].Name)
		last = e
	})
	endGroup()
	return cowmap.FromSorted(func(yield func(Frontend, []servicemap.PortName) bool) {
		for _, g := range groups {
			if !yield(g.dest, g.names) {
				return
			}
		}
	})
}

// moveFrontends returns idx with name taken off the destinations of before
// and put on those of after (either may be nil).
func moveFrontends(idx frontendIndex, name servicemap.PortName, before, after *Service) frontendIndex {
	if before != nil && after != nil && sameFrontends(before, after) {
		return idx // the common case: only the endpoints changed
	}
	var fb, fa []Frontend
	if before != nil {
		fb = before.destinations()
	}
	if after != nil {
		fa = after.destinations()
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
	names, _ := idx.Get(f)
	i, found := slices.BinarySearchFunc(names, name, servicemap.PortName.Compare)
	if found {
		return idx
	}
	return idx.With(f, slices.Concat(names[:i], []servicemap.PortName{name}, names[i:]))
}

func withoutName(idx frontendIndex, f Frontend, name servicemap.PortName) frontendIndex {
	names, _ := idx.Get(f)
	i, found := slices.BinarySearchFunc(names, name, servicemap.PortName.Compare)
	switch {
	case !found:
		return idx
	case len(names) == 1:
		return idx.Without(f)
	}
	return idx.With(f, slices.Concat(names[:i], names[i+1:]))
}

// ConflictWarning is the warning for the Service port s, which has a
// frontend at destination d (a Frontend; its kind is ignored) that another
// Service port, owner, takes (Owner): s is not served there. The backends
// that warn and the reference proxies give it in these words, one per
// Service port and destination.
func ConflictWarning(s servicemap.PortName, d Frontend, owner servicemap.PortName) svcproxy.Warning {
	what := "node port " + strconv.Itoa(int(d.Port)) + "/" + string(d.Protocol)
	if d.Addr.IsValid() {
		what = netip.AddrPortFrom(d.Addr, d.Port).String() + "/" + string(d.Protocol)
	}
	return svcproxy.Warning{Kind: "Service", Namespace: s.Namespace, Name: s.Name,
		Reason: fmt.Sprintf("port %q/%s: %s is also Service port %s's, which takes it: not served there", s.Port, s.Protocol, what, owner)}
}
