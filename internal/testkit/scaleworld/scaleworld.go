// Package scaleworld feeds the clusters of package scalegen into trackers and
// builds their Rulesets: the state a proxy holds, for benchmarks and scale
// tests of the packages above ruleset. It panics on any skipped object or
// warning: the generator makes only valid objects.
package scaleworld

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// Node is the node the rules are built for.
var Node = topology.Node{Name: scalegen.NodeName, Zone: scalegen.NodeZone}

// Config is the ruleset.Config the generated IPv4 clusters are meant for:
// node-000, pod network ClusterCIDR.
func Config() ruleset.Config { return ConfigFor(scalegen.Spec{}) }

// ConfigFor is the ruleset.Config the cluster of s is meant for: its
// family, node-000, its pod network.
func ConfigFor(s scalegen.Spec) ruleset.Config {
	return ruleset.Config{
		Family:       s.Family(),
		Node:         Node,
		ClusterCIDRs: []netip.Prefix{s.ClusterCIDR()},
	}
}

// Trackers returns new trackers (the Spec's family, the default filter) fed with every
// Service and EndpointSlice, made one at a time. It panics if any object is
// skipped or warned about: the generator is meant to produce only valid
// objects.
func Trackers(s scalegen.Spec) (*servicemap.Tracker, *endpoints.Tracker) {
	svcs := servicemap.NewTracker(s.Family(), servicemap.Filter{})
	eps := endpoints.NewTracker(s.Family(), servicemap.Filter{})
	Feed(s, svcs, eps)
	return svcs, eps
}

// Feed adds every Service and EndpointSlice to the trackers, made one at a
// time. It panics if any object is skipped or warned about.
func Feed(s scalegen.Spec, svcs *servicemap.Tracker, eps *endpoints.Tracker) {
	if s.Services > s.Max() {
		panic(fmt.Sprintf("scaleworld: %d Services, at most %d", s.Services, s.Max()))
	}
	for i := range s.Services {
		if skipped, w := svcs.Update(s.Service(i)); skipped != "" || len(w) > 0 {
			panic(fmt.Sprintf("scaleworld: Service %d: %s %v", i, skipped, w))
		}
		if skipped, w := eps.Update(s.Slice(i)); skipped != "" || len(w) > 0 {
			panic(fmt.Sprintf("scaleworld: EndpointSlice %d: %s %v", i, skipped, w))
		}
	}
}

// Snapshots returns the snapshots of freshly fed trackers.
func Snapshots(s scalegen.Spec) (servicemap.Snapshot, endpoints.Snapshot) {
	svcs, eps := Trackers(s)
	ss, _ := svcs.Snapshot()
	es, _ := eps.Snapshot()
	return ss, es
}

// World is a generated cluster fed into trackers, with the Builder of Config
// and the Ruleset built from the trackers' snapshots: the state a proxy holds.
type World struct {
	Spec      scalegen.Spec
	Services  *servicemap.Tracker
	Endpoints *endpoints.Tracker
	Builder   *ruleset.Builder
	Ruleset   *ruleset.Ruleset
	// Added is the number of Services AddService added.
	Added int
	// Incremental makes ChangeEndpoints and AddService build the new
	// Ruleset with Builder.Update from the previous one and the trackers'
	// changes, as a proxy does between full syncs, rather than with Build.
	Incremental bool
}

// New feeds the cluster into new trackers and builds its Ruleset. It
// panics on any warning.
func New(s scalegen.Spec) *World {
	b, err := ruleset.NewBuilder(ConfigFor(s))
	if err != nil {
		panic(err)
	}
	svcs, eps := Trackers(s)
	w := &World{Spec: s, Services: svcs, Endpoints: eps, Builder: b}
	w.Ruleset = w.Build()
	return w
}

// Build takes the trackers' snapshots and builds a Ruleset from them (without
// setting w.Ruleset). It panics on any warning.
func (w *World) Build() *ruleset.Ruleset {
	ss, _ := w.Services.Snapshot()
	es, _ := w.Endpoints.Snapshot()
	rs, warnings := w.Builder.Build(ss, es)
	if len(warnings) > 0 {
		panic(fmt.Sprintf("scaleworld: Build warnings: %v", warnings))
	}
	return rs
}

// next builds the Ruleset after a change fed to the trackers: with Build, or
// with Builder.Update when w.Incremental.
func (w *World) next() *ruleset.Ruleset {
	if !w.Incremental {
		return w.Build()
	}
	ss, _ := w.Services.Snapshot()
	es, _ := w.Endpoints.Snapshot()
	rs, _, warnings := w.Builder.Update(w.Ruleset, ss, es)
	if len(warnings) > 0 {
		panic(fmt.Sprintf("scaleworld: Update warnings: %v", warnings))
	}
	return rs
}

// ChangeEndpoints replaces Service i's EndpointSlice by ChangedSlice(i,
// version), builds the new Ruleset, makes it w.Ruleset and returns it.
func (w *World) ChangeEndpoints(i, version int) *ruleset.Ruleset {
	w.Endpoints.Update(w.Spec.ChangedSlice(i, version))
	w.Ruleset = w.next()
	return w.Ruleset
}

// AddService adds the next Service, index Spec.Services + Added, with its
// EndpointSlice (a regular Service of its index: never a probe), builds the
// new Ruleset, makes it w.Ruleset and returns it. Spec is unchanged.
func (w *World) AddService() *ruleset.Ruleset {
	n := w.Spec.Services + w.Added
	w.Added++
	w.Services.Update(w.Spec.Service(n))
	w.Endpoints.Update(w.Spec.Slice(n))
	w.Ruleset = w.next()
	return w.Ruleset
}

// RemoveAdded deletes the Service that AddService added last, with its
// EndpointSlice, builds the new Ruleset, makes it w.Ruleset and returns it.
// It panics when AddService added none.
func (w *World) RemoveAdded() *ruleset.Ruleset {
	if w.Added == 0 {
		panic("scaleworld: RemoveAdded without AddService")
	}
	w.Added--
	n := w.Spec.Services + w.Added
	svc, slice := w.Spec.Service(n), w.Spec.Slice(n)
	w.Services.Delete(svc.Namespace, svc.Name)
	w.Endpoints.Delete(slice.Namespace, slice.Name)
	w.Ruleset = w.next()
	return w.Ruleset
}
