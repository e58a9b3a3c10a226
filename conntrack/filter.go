package conntrack

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Flow is what the stale-entry decision needs to know about one conntrack
// entry: its protocol, the destination of its original direction (what the
// client sent to: a Service frontend) and the source of its reply direction
// (who answers: the endpoint the entry was DNATed to, or the original
// destination itself when the entry is not DNATed).
type Flow struct {
	Protocol v1.Protocol
	OrigDst  netip.AddrPort
	ReplySrc netip.AddrPort
}

// String is "udp 198.19.0.10:53 → 198.18.64.2:53".
func (f Flow) String() string {
	return fmt.Sprintf("%s %s → %s", strings.ToLower(string(f.Protocol)), f.OrigDst, f.ReplySrc)
}

// Filter selects the stale conntrack entries of one frontend of one Service
// port: the entries of Protocol whose original destination is the frontend
// and whose reply source is not one of Allowed.
//
// A Filter is a plain value, comparable with go-cmp, that the Cleaner applies
// to every entry of the table.
type Filter struct {
	// Service is the Service port the frontend belongs to (or belonged to,
	// for a frontend that is gone; see Options.Previous).
	Service servicemap.PortName
	// Protocol is UDP, or SCTP with Options.SCTP. Never TCP.
	Protocol v1.Protocol
	// Frontend is the cluster IP, external IP or load-balancer IP with the
	// Service port. It is the zero AddrPort when NodePort is set.
	Frontend netip.AddrPort
	// NodePort, when not 0, makes the filter match every original
	// destination address at this port, as a node port is served on any
	// (or any configured) node address.
	NodePort uint16
	// Allowed are the reply sources (endpoint address and port) that keep an
	// entry: the Service port's endpoints in the Ruleset. Sorted, without
	// duplicates. Empty means every entry to the frontend is stale.
	Allowed []netip.AddrPort
}

// Matches reports whether this filter, on its own, deletes the entry f. When
// several filters apply to one entry (a node port and a cluster IP at the same
// port number), a Matcher decides which one counts.
func (fl Filter) Matches(f Flow) bool {
	if f.Protocol != fl.Protocol {
		return false
	}
	if fl.NodePort != 0 {
		if f.OrigDst.Port() != fl.NodePort {
			return false
		}
	} else if normalize(f.OrigDst) != fl.Frontend {
		return false
	}
	_, keep := slices.BinarySearchFunc(fl.Allowed, normalize(f.ReplySrc), compareAddrPort)
	return !keep
}

// String is "udp 198.19.0.10:53 keep [198.18.64.2:53] (ns/svc:dns)", with
// "*:30053" as the frontend of a node-port filter.
func (fl Filter) String() string {
	front := fl.Frontend.String()
	if fl.NodePort != 0 {
		front = fmt.Sprintf("*:%d", fl.NodePort)
	}
	keep := make([]string, len(fl.Allowed))
	for i, a := range fl.Allowed {
		keep[i] = a.String()
	}
	return fmt.Sprintf("%s %s keep [%s] (%s)", strings.ToLower(string(fl.Protocol)), front, strings.Join(keep, " "), fl.Service)
}

// Options tune StaleFilters. The zero value is kube-proxy's behaviour: UDP
// only, and only the frontends of the given Ruleset.
type Options struct {
	// SCTP computes filters for SCTP Service ports too. kube-proxy cleans up
	// UDP only. Note that NetlinkCleaner cannot apply SCTP filters (see
	// there).
	SCTP bool
	// Previous is the Ruleset before the change, if known. Every UDP (and
	// SCTP, with SCTP) frontend it has that the new Ruleset no longer has —
	// a removed Service, a removed external or load-balancer IP, a changed
	// node port — gets a filter with no Allowed reply source, so that
	// entries to it go too: otherwise a client keeps reaching the old
	// endpoints through its entry for as long as it keeps sending, and a
	// cluster IP handed to a new Service would still lead there.
	Previous *ruleset.Ruleset
}

func (o *Options) cleaned(p v1.Protocol) bool {
	return p == v1.ProtocolUDP || (o.SCTP && p == v1.ProtocolSCTP)
}

// StaleFilters returns the filters that select every stale entry after rs
// took effect: the UDP entries (and SCTP, with opts.SCTP) whose original
// destination is a frontend of a Service port in rs — its cluster IP,
// external IPs or load-balancer IPs at the Service port, or any address at its
// node port — and whose reply source is not one of that port's serving
// endpoints (ruleset.Service.Serving: on any node, ready or terminating, as
// kube-proxy decides). A port without serving endpoints gets a filter with no Allowed
// source: all its entries are stale. TCP is never cleaned: TCP endpoints
// reset or time out connections themselves, and an established connection
// must survive a change elsewhere in its Service.
//
// Entries that are not DNATed at all have the frontend as reply source, so
// they are stale too: they come from packets sent before the proxy's rules
// existed, which would otherwise never be translated.
//
// The result is sorted by protocol, then address frontends before node
// ports, then frontend, then Service port, and is the same for equal inputs.
// StaleFilters is pure.
func StaleFilters(rs *ruleset.Ruleset, opts Options) []Filter {
	var filters []Filter
	present := map[frontendKey]struct{}{}
	if rs != nil {
		for _, svc := range rs.Services() {
			if !opts.cleaned(svc.Name.Protocol) {
				continue
			}
			allowed := make([]netip.AddrPort, 0, len(svc.Serving))
			for _, ep := range svc.Serving {
				allowed = append(allowed, normalize(ep))
			}
			slices.SortFunc(allowed, compareAddrPort)
			allowed = slices.Compact(allowed)
			for _, k := range frontends(svc) {
				present[k] = struct{}{}
				filters = append(filters, k.filter(svc.Name, allowed))
			}
		}
	}
	if opts.Previous != nil {
		for _, svc := range opts.Previous.Services() {
			if !opts.cleaned(svc.Name.Protocol) {
				continue
			}
			for _, k := range frontends(svc) {
				if _, ok := present[k]; ok {
					continue
				}
				present[k] = struct{}{} // once, even if two old ports shared it
				filters = append(filters, k.filter(svc.Name, nil))
			}
		}
	}
	slices.SortFunc(filters, compareFilters)
	return filters
}

// NeedsCleanup reports whether stale entries may exist after a change with
// these Changes: some UDP (or SCTP, with opts.SCTP) Service port was added
// (entries made before its rules existed are not DNATed), changed (its
// endpoints or frontends) or removed, or the Config changed.
//
// endpoints.Changes.ConntrackCleanup is narrower and is not a substitute: it
// lists only the ports whose EndpointSlices lost a serving endpoint, so it
// misses a UDP Service deleted before its EndpointSlice (the Service's
// frontends are gone while its slice still has every endpoint). Compare the
// previous and the new Ruleset, here and in Options.Previous, to catch that.
func NeedsCleanup(ch ruleset.Changes, opts Options) bool {
	if ch.ConfigChanged {
		return true
	}
	for _, list := range [][]servicemap.PortName{ch.Added, ch.Changed, ch.Removed} {
		for _, n := range list {
			if opts.cleaned(n.Protocol) {
				return true
			}
		}
	}
	return false
}

// frontendKey is one frontend of one protocol: an address and port, or a
// node port (addr invalid).
type frontendKey struct {
	protocol v1.Protocol
	addr     netip.AddrPort
	nodePort uint16
}

func (k frontendKey) filter(name servicemap.PortName, allowed []netip.AddrPort) Filter {
	if allowed == nil {
		allowed = []netip.AddrPort{}
	}
	return Filter{Service: name, Protocol: k.protocol, Frontend: k.addr, NodePort: k.nodePort, Allowed: allowed}
}

// frontends lists the frontends of one Service port.
func frontends(svc *ruleset.Service) []frontendKey {
	var keys []frontendKey
	for _, f := range svc.Frontends() {
		switch {
		case f.Protocol == "":
			// The cluster IP alone, for rules on any port: no entry's
			// destination.
		case !f.Addr.IsValid():
			keys = append(keys, frontendKey{protocol: f.Protocol, nodePort: f.Port})
		default:
			keys = append(keys, frontendKey{protocol: f.Protocol, addr: normalize(netip.AddrPortFrom(f.Addr, f.Port))})
		}
	}
	return keys
}

func compareFilters(a, b Filter) int {
	return cmp.Or(
		cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.NodePort, b.NodePort), // address frontends (0) first
		compareAddrPort(a.Frontend, b.Frontend),
		a.Service.Compare(b.Service),
	)
}

func compareAddrPort(a, b netip.AddrPort) int { return a.Compare(b) }

// normalize unmaps IPv4-mapped IPv6 addresses and drops zones, so that
// addresses from the kernel compare equal to those in a Ruleset.
func normalize(ap netip.AddrPort) netip.AddrPort {
	if !ap.IsValid() {
		return ap
	}
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
}

// Matcher applies a set of Filters to many entries in constant time per
// entry. An entry's decision belongs to the filters of its exact frontend
// (protocol, address and port) when there are any, and otherwise to the
// node-port filters of its destination port: a cluster IP whose Service port
// number happens to equal another Service's node port is judged by its own
// Service. Filters for the same frontend (two Services sharing an external IP
// and port) keep the union of their Allowed sources.
type Matcher struct {
	byFrontend map[frontendKey]map[netip.AddrPort]struct{}
	byNodePort map[frontendKey]map[netip.AddrPort]struct{}
}

// NewMatcher indexes filters.
func NewMatcher(filters []Filter) *Matcher {
	m := &Matcher{
		byFrontend: map[frontendKey]map[netip.AddrPort]struct{}{},
		byNodePort: map[frontendKey]map[netip.AddrPort]struct{}{},
	}
	for i := range filters {
		f := &filters[i]
		if f.NodePort == 0 && !f.Frontend.IsValid() {
			continue
		}
		idx, k := m.byFrontend, frontendKey{protocol: f.Protocol, addr: normalize(f.Frontend)}
		if f.NodePort != 0 {
			idx, k = m.byNodePort, frontendKey{protocol: f.Protocol, nodePort: f.NodePort}
		}
		set := idx[k]
		if set == nil {
			set = map[netip.AddrPort]struct{}{}
			idx[k] = set
		}
		for _, a := range f.Allowed {
			set[normalize(a)] = struct{}{}
		}
	}
	return m
}

// Len is the number of distinct frontends the Matcher knows.
func (m *Matcher) Len() int {
	if m == nil {
		return 0
	}
	return len(m.byFrontend) + len(m.byNodePort)
}

// Matches reports whether the entry f is stale.
func (m *Matcher) Matches(f Flow) bool {
	if m == nil {
		return false
	}
	allowed, ok := m.byFrontend[frontendKey{protocol: f.Protocol, addr: normalize(f.OrigDst)}]
	if !ok {
		allowed, ok = m.byNodePort[frontendKey{protocol: f.Protocol, nodePort: f.OrigDst.Port()}]
		if !ok || !f.OrigDst.IsValid() {
			return false
		}
	}
	_, keep := allowed[normalize(f.ReplySrc)]
	return !keep
}
