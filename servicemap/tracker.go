package servicemap

import (
	"iter"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/internal/sorted"
)

// Snapshot is an immutable view of every ServicePort of one IP family. Taking
// a Snapshot after a change costs time proportional to the change.
type Snapshot struct {
	services cowmap.Map[serviceName, []ServicePort]
	ports    int
}

// Get returns the ServicePort called name.
func (s Snapshot) Get(name PortName) (ServicePort, bool) {
	ports, _ := s.services.Get(serviceName{Namespace: name.Namespace, Name: name.Name})
	for _, sp := range ports {
		if sp.Name == name {
			return sp, true
		}
	}
	return ServicePort{}, false
}

// Service returns the ServicePorts of one Service, sorted by PortName. The
// slice must not be modified.
func (s Snapshot) Service(namespace, name string) []ServicePort {
	ports, _ := s.services.Get(serviceName{Namespace: namespace, Name: name})
	return ports
}

// Len is the number of ServicePorts.
func (s Snapshot) Len() int { return s.ports }

// Ports returns every ServicePort, sorted by PortName.
func (s Snapshot) Ports() []ServicePort {
	all := make([]ServicePort, 0, s.ports)
	s.services.All(func(_ serviceName, ports []ServicePort) bool {
		all = append(all, ports...)
		return true
	})
	return all
}

// All yields every ServicePort, sorted by PortName, as Ports returns them
// but without copying them: the ServicePorts are the Snapshot's own and
// must not be modified. The Snapshot keeps its Services in order, each
// with its ports in order, so All sorts nothing.
func (s Snapshot) All() iter.Seq[*ServicePort] {
	return func(yield func(*ServicePort) bool) {
		s.services.All(func(_ serviceName, ports []ServicePort) bool {
			for i := range ports {
				if !yield(&ports[i]) {
					return false
				}
			}
			return true
		})
	}
}

// ChangesSince lists the ServicePorts that differ between since and s. It
// takes time proportional to the change when s was made from since by a
// Tracker (both share everything else), and O(n) between unrelated
// Snapshots; the result is right either way.
func (s Snapshot) ChangesSince(since Snapshot) Changes {
	var ch Changes
	since.services.Diff(s.services, func(_ serviceName, before, after []ServicePort) {
		diffPorts(before, after, &ch)
	})
	ch.sort()
	return ch
}

func (c *Changes) sort() {
	for _, list := range []*[]PortName{&c.Added, &c.Changed, &c.Removed} {
		slices.SortFunc(*list, PortName.Compare)
	}
}

// Changes lists the ServicePorts that differ between two Snapshots, each list
// sorted by PortName.
type Changes struct {
	Added, Changed, Removed []PortName
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.Added) == 0 && len(c.Changed) == 0 && len(c.Removed) == 0
}

// Tracker follows Service adds, updates and deletes for one IP family. Events
// may come in any order; the Tracker keeps the latest state of each Service.
// A Tracker is not safe for concurrent use.
type Tracker struct {
	family  v1.IPFamily
	filter  Filter
	journal *cowmap.Journal[serviceName, []ServicePort]
	ports   int
}

// NewTracker returns an empty Tracker for family whose Services pass filter.
func NewTracker(family v1.IPFamily, filter Filter) *Tracker {
	equal := func(a, b []ServicePort) bool {
		return slices.EqualFunc(a, b, func(x, y ServicePort) bool { return x.Equal(&y) })
	}
	return &Tracker{family: family, filter: filter, journal: cowmap.NewJournal[serviceName](equal)}
}

// Update records the current state of svc (an add or an update). It returns
// why the Service is not proxied, if it is not, and what was malformed in it.
func (t *Tracker) Update(svc *v1.Service) (skipped string, warnings []svcproxy.Warning) {
	if svc == nil {
		return "nil Service", nil
	}
	if !t.made() {
		return "Tracker not made by NewTracker: nothing recorded", nil
	}
	ports, skipped, warnings := FromService(svc, t.family, t.filter)
	key := serviceName{Namespace: svc.Namespace, Name: svc.Name}
	t.set(key, ports)
	return skipped, warnings
}

// made reports whether NewTracker made t: a nil or zero Tracker records
// nothing, and its Snapshots are empty.
func (t *Tracker) made() bool { return t != nil && t.journal != nil }

// Delete records that the Service namespace/name is gone.
func (t *Tracker) Delete(namespace, name string) {
	if !t.made() {
		return
	}
	t.set(serviceName{Namespace: namespace, Name: name}, nil)
}

func (t *Tracker) set(key serviceName, ports []ServicePort) {
	old, _ := t.journal.Current().Get(key)
	t.ports += len(ports) - len(old)
	if len(ports) == 0 {
		t.journal.Delete(key)
	} else {
		t.journal.Set(key, ports)
	}
}

// Pending is the number of Services whose ServicePorts differ from the last
// Snapshot's (kube-proxy's service_changes_pending): an update that changes
// nothing, or a change undone before the Snapshot, does not count.
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
	services := t.journal.Commit(func(_ serviceName, before, after []ServicePort) {
		diffPorts(before, after, &ch)
	})
	ch.sort()
	return Snapshot{services: services, ports: t.ports}, ch
}

// diffPorts compares the ports of one Service before and after, both sorted
// by PortName, and appends the differences to ch.
func diffPorts(before, after []ServicePort, ch *Changes) {
	sorted.Walk(before, after, func(a, b ServicePort) int { return a.Name.Compare(b.Name) },
		func(removed ServicePort) { ch.Removed = append(ch.Removed, removed.Name) },
		func(added ServicePort) { ch.Added = append(ch.Added, added.Name) },
		func(b, a ServicePort) {
			if !b.Equal(&a) {
				ch.Changed = append(ch.Changed, a.Name)
			}
		})
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
