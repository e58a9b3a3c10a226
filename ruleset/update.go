package ruleset

import (
	"slices"
	"weak"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Update computes the Ruleset of services and eps from prev, the Ruleset of
// earlier snapshots, rebuilding only the Service ports whose ServicePort or
// endpoints differ between the snapshots prev was built from and these (a
// Ruleset keeps them): the result equals Build(services, eps), and the
// Changes equal Diff(prev, result), whatever happened in between (syncs that
// failed, snapshots never built).
//
// The result shares all unchanged Services with prev, which stays valid.
// When the snapshots were made from prev's by the trackers, Update takes
// O(k log n) time for k changed Service ports of n; between unrelated
// snapshots it takes O(n log n). When prev is nil or was built with another
// Config, Update is Build.
//
// The warnings are those of the rebuilt Service ports only (all of them
// when Update is Build).
func (b *Builder) Update(prev *Ruleset, services servicemap.Snapshot, eps endpoints.Snapshot) (*Ruleset, Changes, []svcproxy.Warning) {
	if !b.valid() {
		return nil, Diff(prev, nil), nil
	}
	if prev == nil || !configEqual(&prev.config, &b.config) {
		rs, warnings := b.Build(services, eps)
		return rs, Diff(prev, rs), warnings
	}
	sch := services.ChangesSince(prev.source.services)
	names := slices.Concat(sch.Added, sch.Changed, sch.Removed, eps.ChangesSince(prev.source.eps).Changed, prev.rebuilt)
	return b.rebuild(prev, services, eps, names, snapshots{services, eps}, nil)
}

// UpdatePorts computes the Ruleset that has the Service ports named in names
// as Build(services, eps) would make them, and every other port as prev has
// it: the state of a kernel table to which only the changes of those ports
// were written, as when a backend applies a large change in several
// transactions. The Changes are Diff(prev, result). A later Update from the
// result is exact, as from any Ruleset.
//
// When prev is nil, or was built with another Config, the other ports are
// none: the result holds the named ports alone.
func (b *Builder) UpdatePorts(prev *Ruleset, services servicemap.Snapshot, eps endpoints.Snapshot, names []servicemap.PortName) (*Ruleset, Changes, []svcproxy.Warning) {
	if !b.valid() {
		return nil, Diff(prev, nil), nil
	}
	if prev == nil || !configEqual(&prev.config, &b.config) {
		prev = &Ruleset{config: b.config}
	}
	return b.rebuild(prev, services, eps, names, prev.source, slices.Concat(prev.rebuilt, names))
}

// rebuild makes the Ruleset that has the ports of names from services and
// eps and every other port from prev; the result remembers source and
// rebuilt (see Ruleset).
func (b *Builder) rebuild(prev *Ruleset, services servicemap.Snapshot, eps endpoints.Snapshot, names []servicemap.PortName, source snapshots, rebuilt []servicemap.PortName) (*Ruleset, Changes, []svcproxy.Warning) {
	names = slices.Clone(names)
	slices.SortFunc(names, servicemap.PortName.Compare)
	names = slices.Compact(names)
	slices.SortFunc(rebuilt, servicemap.PortName.Compare)

	rs := &Ruleset{config: prev.config, services: prev.services, listedEndpoints: prev.listedEndpoints,
		source: source, rebuilt: slices.Compact(rebuilt)}
	frontends := prev.index()
	var ch Changes
	var warnings []svcproxy.Warning
	modified := false
	for _, name := range names {
		before, had := prev.services.Get(name)
		var after *Service
		if sp, ok := services.Get(name); ok {
			var w []svcproxy.Warning
			after, w = b.service(&sp, eps.Port(name))
			warnings = append(warnings, w...)
		}
		if after == nil && !had {
			continue
		}
		rs.listedEndpoints += after.listed() - before.listed()
		switch {
		case after == nil:
			rs.services = rs.services.Without(name)
			ch.Removed = append(ch.Removed, name)
		case !had:
			rs.services = rs.services.With(name, after)
			ch.Added = append(ch.Added, name)
		case before.Equal(after):
			// Same rules: not a change. Keep the old Service, so that
			// the two Rulesets share it, unless a field that no rule
			// depends on differs (an endpoint's zone, say).
			if !identical(before, after) {
				rs.services = rs.services.With(name, after)
				modified = true
			}
			continue
		default:
			rs.services = rs.services.With(name, after)
			ch.Changed = append(ch.Changed, name)
		}
		frontends = moveFrontends(frontends, name, before, after)
		modified = true
	}
	if !modified {
		// Same rules: prev serves, and the next Update compares against
		// its (older) snapshots, which gives these names again.
		return prev, ch, warnings
	}
	rs.frontends.Store(&frontends)
	rs.parent, rs.step = weak.Make(prev), ch
	return rs, ch.clone(), warnings
}

// identical reports whether two Services that are Equal are also equal in
// the fields Equal leaves out: the endpoints beyond their addresses, and
// ListedEndpoints (keep in step with Service).
func identical(a, b *Service) bool {
	return a.ListedEndpoints == b.ListedEndpoints &&
		slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y endpoints.Endpoint) bool { return x.Equal(&y) })
}

// listed is s.ListedEndpoints, 0 for a nil s.
func (s *Service) listed() int {
	if s == nil {
		return 0
	}
	return s.ListedEndpoints
}
