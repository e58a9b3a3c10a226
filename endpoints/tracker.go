package endpoints

import (
	"cmp"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/internal/sorted"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Snapshot is an immutable view of the endpoints of every Service port of
// one IP family. Taking a Snapshot after a change costs time proportional to
// the change.
type Snapshot struct {
	services cowmap.Map[serviceName, portList]
}

// Get returns the endpoints of one Service port, sorted by address and port.
// The slice must not be modified.
func (s Snapshot) Get(name servicemap.PortName) []Endpoint { return s.Port(name).Endpoints }

// Port returns what s holds for one Service port: the zero Port when it
// has no endpoints.
func (s Snapshot) Port(name servicemap.PortName) Port {
	ports, _ := s.services.Get(serviceName{Namespace: name.Namespace, Name: name.Name})
	return ports.get(name)
}

// PortsOf yields each of ports, which must be sorted by PortName (as
// servicemap.Snapshot.All yields them), with its index in ports and the
// Port that Port gives for its name, in one walk of s from the first
// one's Service on: where Port finds each Service on its own, PortsOf
// reads s in order alongside ports, as a full sync that reads the
// endpoints of every port does.
func (s Snapshot) PortsOf(ports []*servicemap.ServicePort) iter.Seq2[int, Port] {
	return func(yield func(int, Port) bool) {
		if len(ports) == 0 {
			return
		}
		i, stopped := 0, false
		serviceOf := func(p *servicemap.ServicePort) serviceName {
			return serviceName{Namespace: p.Name.Namespace, Name: p.Name.Name}
		}
		s.services.AllFrom(serviceOf(ports[0]), func(svc serviceName, list portList) bool {
			for ; i < len(ports); i++ {
				c := serviceOf(ports[i]).Compare(svc)
				if c > 0 {
					break
				}
				port := Port{}
				if c == 0 {
					port = list.get(ports[i].Name)
				}
				if !yield(i, port) {
					stopped = true
					return false
				}
			}
			return i < len(ports)
		})
		for ; !stopped && i < len(ports); i++ {
			stopped = !yield(i, Port{})
		}
	}
}

// portList is what a Snapshot holds for one Service: the endpoints of each
// of its ports that has some, sorted by port name and protocol. (A slice
// rather than a map: most Services have one port, and a lookup then
// compares only the port's name and protocol.)
type portList []portEndpoints

type portEndpoints struct {
	// port and protocol are the port's PortName within its Service, which
	// the Service's key in the Snapshot completes.
	port     string
	protocol v1.Protocol
	eps      []Endpoint
	// serving and summary are Port's, made once here rather than by every
	// reader.
	serving []netip.AddrPort
	summary summary
}

// nameIn is the PortName of p in the Service svc.
func (p *portEndpoints) nameIn(svc serviceName) servicemap.PortName {
	return servicemap.PortName{Namespace: svc.Namespace, Name: svc.Name, Port: p.port, Protocol: p.protocol}
}

// listOf returns the ports of merged, the merged endpoints of one Service,
// each sorted by address and port with each address and port once, sorted,
// leaving out those without endpoints. The ports' serving addresses share
// one array.
func listOf(merged iter.Seq2[servicemap.PortName, []Endpoint]) portList {
	var list portList
	n := 0
	for name, eps := range merged {
		if len(eps) > 0 {
			list = append(list, portEndpoints{port: name.Port, protocol: name.Protocol, eps: eps})
			n += countServing(eps)
		}
	}
	slices.SortFunc(list, comparePorts)
	serving := make([]netip.AddrPort, 0, n)
	for i := range list {
		start := len(serving)
		serving = appendServing(serving, list[i].eps)
		if len(serving) > start {
			list[i].serving = serving[start:len(serving):len(serving)]
		}
		list[i].summary = summarize(list[i].eps)
	}
	return list
}

func comparePorts(a, b portEndpoints) int {
	return cmp.Or(strings.Compare(a.port, b.port), strings.Compare(string(a.protocol), string(b.protocol)))
}

// get returns the Port of the port name of the list's Service.
func (l portList) get(name servicemap.PortName) Port {
	for i := range l {
		if l[i].port == name.Port && l[i].protocol == name.Protocol {
			return Port{Endpoints: l[i].eps, Serving: l[i].serving, summary: l[i].summary}
		}
	}
	return Port{}
}

// walk calls changed for every port of before or after, two port lists of
// one Service, with its endpoints in each (nil where it has none), in
// PortName order.
func walk(before, after portList, changed func(p *portEndpoints, before, after []Endpoint)) {
	sorted.Walk(before, after, comparePorts,
		func(b portEndpoints) { changed(&b, b.eps, nil) },
		func(a portEndpoints) { changed(&a, nil, a.eps) },
		func(b, a portEndpoints) { changed(&b, b.eps, a.eps) })
}

// Changes says which Service ports' endpoints differ between two Snapshots.
type Changes struct {
	// Changed lists the ports whose endpoints were added, removed or
	// changed, sorted.
	Changed []servicemap.PortName
	// ConntrackCleanup lists the UDP and SCTP ports, among Changed, that lost
	// a serving endpoint: conntrack entries may still send their clients to
	// it. It knows nothing of Services, so it does not cover a Service
	// deleted before its EndpointSlice: see conntrack.NeedsCleanup.
	ConntrackCleanup []servicemap.PortName
}

// ChangesSince says which Service ports' endpoints differ between since and
// s. It takes time proportional to the change when s was made from since by
// a Tracker (both share everything else), and O(n) between unrelated
// Snapshots; the result is right either way.
func (s Snapshot) ChangesSince(since Snapshot) Changes {
	var ch Changes
	since.services.Diff(s.services, func(svc serviceName, before, after portList) {
		ch.add(svc, before, after)
	})
	ch.sort()
	return ch
}

// add records the ports of the Service svc whose endpoints differ between
// before and after.
func (c *Changes) add(svc serviceName, before, after portList) {
	walk(before, after, func(p *portEndpoints, b, a []Endpoint) {
		if equalEndpoints(b, a) {
			return
		}
		name := p.nameIn(svc)
		c.Changed = append(c.Changed, name)
		if name.Protocol != v1.ProtocolTCP && lostServing(b, a) {
			c.ConntrackCleanup = append(c.ConntrackCleanup, name)
		}
	})
}

func equalEndpoints(a, b []Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y Endpoint) bool { return x.Equal(&y) })
}

func (c *Changes) sort() {
	slices.SortFunc(c.Changed, servicemap.PortName.Compare)
	slices.SortFunc(c.ConntrackCleanup, servicemap.PortName.Compare)
}

// Tracker follows EndpointSlice adds, updates and deletes for one IP family.
// Events may come in any order. A Tracker is not safe for concurrent use.
type Tracker struct {
	family v1.IPFamily
	filter servicemap.Filter
	// slices holds every used slice, by slice namespace and name.
	slices map[types.NamespacedName]*tracked
	// byService holds the slices of each Service, in no order.
	byService map[serviceName][]*tracked
	journal   *cowmap.Journal[serviceName, portList]
}

// tracked is a parsed slice as a Tracker keeps it: a Slice with its ports
// in a list rather than a map (a slice has a port or two, and a Go map of
// one entry takes some 700 bytes). In a Tracker, each port's endpoints are
// sorted by address and port, the copies of one address and port in the
// slice's order (parse's sorted), which is all of their order that
// Merge's result depends on.
type tracked struct {
	// service is the name of the owning Service, in the slice's namespace.
	service, name string
	ports         []slicePort
}

// all yields each port of s with its endpoints.
func (s *tracked) all(yield func(servicemap.PortName, []Endpoint) bool) {
	for _, p := range s.ports {
		if !yield(p.name, p.eps) {
			return
		}
	}
}

// slicePort is one port of a parsed slice and its endpoints.
type slicePort struct {
	name servicemap.PortName
	eps  []Endpoint
}

// NewTracker returns an empty Tracker for family whose slices pass filter.
func NewTracker(family v1.IPFamily, filter servicemap.Filter) *Tracker {
	return &Tracker{
		family:    family,
		filter:    filter,
		slices:    map[types.NamespacedName]*tracked{},
		byService: map[serviceName][]*tracked{},
		journal:   cowmap.NewJournal[serviceName](sameEndpoints),
	}
}

// Update records the current state of an EndpointSlice (an add or an
// update). It returns why the slice is not used, if it is not, and what was
// malformed in it.
func (t *Tracker) Update(es *discovery.EndpointSlice) (skipped string, warnings []svcproxy.Warning) {
	if es == nil {
		return "nil EndpointSlice", nil
	}
	if !t.made() {
		return "Tracker not made by NewTracker: nothing recorded", nil
	}
	slice, skipped, warnings := parse(es, t.family, t.filter, true)
	key := types.NamespacedName{Namespace: es.Namespace, Name: es.Name}
	t.remove(key)
	if slice != nil {
		service := serviceName{Namespace: es.Namespace, Name: slice.service}
		t.slices[key] = slice
		t.byService[service] = append(t.byService[service], slice)
		t.remerge(service)
	}
	return skipped, warnings
}

// made reports whether NewTracker made t: a nil or zero Tracker records
// nothing, and its Snapshots are empty.
func (t *Tracker) made() bool { return t != nil && t.journal != nil }

// Delete records that the EndpointSlice namespace/name is gone.
func (t *Tracker) Delete(namespace, name string) {
	if !t.made() {
		return
	}
	t.remove(types.NamespacedName{Namespace: namespace, Name: name})
}

func (t *Tracker) remove(key types.NamespacedName) {
	old, ok := t.slices[key]
	if !ok {
		return
	}
	delete(t.slices, key)
	service := serviceName{Namespace: key.Namespace, Name: old.service}
	rest := slices.DeleteFunc(t.byService[service], func(s *tracked) bool { return s == old })
	if len(rest) == 0 {
		delete(t.byService, service)
	} else {
		t.byService[service] = rest
	}
	t.remerge(service)
}

func (t *Tracker) remerge(service serviceName) {
	bySlice := t.byService[service]
	if len(bySlice) == 0 {
		t.journal.Delete(service)
		return
	}
	if len(bySlice) == 1 && ownMerge(bySlice[0]) {
		t.journal.Set(service, listOf(bySlice[0].all))
		return
	}
	copies := map[servicemap.PortName][]sourced{}
	for _, s := range bySlice {
		for _, p := range s.ports {
			copies[p.name] = appendSourced(copies[p.name], p.eps, s.name)
		}
	}
	t.journal.Set(service, listOf(maps.All(dedupAll(copies))))
}

// ownMerge reports whether the lists of s, a Service's only slice, are
// what Merge makes of it: sorted (as the Tracker sorts them), no address
// and port is there twice. Then a Snapshot holds those lists themselves
// rather than a copy; neither the Tracker nor a Snapshot changes them.
func ownMerge(s *tracked) bool {
	for _, p := range s.ports {
		for i := 1; i < len(p.eps); i++ {
			if p.eps[i-1].AddrPort() == p.eps[i].AddrPort() {
				return false
			}
		}
	}
	return true
}

// sameEndpoints reports whether two Services' port lists are equal, a port
// with no endpoints being the same as a missing port.
func sameEndpoints(a, b portList) bool {
	same := true
	walk(a, b, func(_ *portEndpoints, x, y []Endpoint) {
		same = same && equalEndpoints(x, y)
	})
	return same
}

// Pending is the number of Services whose endpoints differ from the last
// Snapshot's (kube-proxy's endpoint_changes_pending): an update that
// changes nothing, or a change undone before the Snapshot, does not count.
func (t *Tracker) Pending() int {
	if !t.made() {
		return 0
	}
	return t.journal.Pending()
}

// Snapshot returns the current state and what changed since the previous
// call to Snapshot.
func (t *Tracker) Snapshot() (Snapshot, Changes) {
	if !t.made() {
		return Snapshot{}, Changes{}
	}
	var ch Changes
	services := t.journal.Commit(func(svc serviceName, before, after portList) {
		ch.add(svc, before, after)
	})
	ch.sort()
	return Snapshot{services: services}, ch
}

// lostServing reports whether an endpoint that was serving before is not
// serving (or not there) after. Both lists are sorted.
func lostServing(before, after []Endpoint) bool {
	for i := range before {
		if !before[i].Serving {
			continue
		}
		j, found := slices.BinarySearchFunc(after, before[i], func(e, target Endpoint) int { return e.Compare(&target) })
		if !found || !after[j].Serving {
			return true
		}
	}
	return false
}

// serviceName is a Service's namespace and name, the key of a Snapshot's
// map, ordered by namespace, then name, as PortNames are.
type serviceName struct{ Namespace, Name string }

func (a serviceName) Compare(b serviceName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
