package ruleset

import (
	"slices"
	"weak"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Update computes the Ruleset of services and eps from prev, the Ruleset of
// earlier snapshots, by rebuilding only the Service ports named in changed:
// the result equals Build(services, eps), and the Changes equal Diff(prev,
// result). changed must name every Service port whose ServicePort or
// endpoints differ between the snapshots prev was built from and these, in
// any order, duplicates allowed: the Added, Changed and Removed of every
// servicemap.Changes and the Changed of every endpoints.Changes taken since.
// Other names are harmless (they are rebuilt and found equal).
//
// The result shares all unchanged Services with prev, which stays valid;
// Update takes O(k log n) time for k names and n Services. When prev is nil
// or was built with another Config, Update is Build.
//
// The warnings are those of the rebuilt Service ports only (all of them
// when Update is Build).
func (b *Builder) Update(prev *Ruleset, services servicemap.Snapshot, eps endpoints.Snapshot, changed []servicemap.PortName) (*Ruleset, Changes, []svcproxy.Warning) {
	if prev == nil || !configEqual(&prev.config, &b.config) {
		rs, warnings := b.Build(services, eps)
		return rs, Diff(prev, rs), warnings
	}
	names := slices.Clone(changed)
	slices.SortFunc(names, servicemap.PortName.Compare)
	names = slices.Compact(names)

	rs := &Ruleset{config: prev.config, services: prev.services}
	frontends := prev.index()
	var ch Changes
	var warnings []svcproxy.Warning
	modified := false
	for _, name := range names {
		before, had := prev.services.get(portKey(name))
		var after *Service
		if sp, ok := services.Get(name); ok {
			var w []svcproxy.Warning
			after, w = b.service(&sp, eps.Get(name))
			warnings = append(warnings, w...)
		}
		switch {
		case after == nil && !had:
			continue
		case after == nil:
			rs.services = rs.services.without(portKey(name))
			ch.Removed = append(ch.Removed, name)
		case !had:
			rs.services = rs.services.with(after)
			ch.Added = append(ch.Added, name)
		case before.Equal(after):
			// Same rules: not a change. Keep the old Service, so that
			// the two Rulesets share it, unless a field that no rule
			// depends on differs (an endpoint's zone, say).
			if !identical(before, after) {
				rs.services = rs.services.with(after)
				modified = true
			}
			continue
		default:
			rs.services = rs.services.with(after)
			ch.Changed = append(ch.Changed, name)
		}
		frontends = moveFrontends(frontends, name, before, after)
		modified = true
	}
	if !modified {
		return prev, ch, warnings
	}
	rs.frontends.Store(&frontends)
	rs.parent, rs.step = weak.Make(prev), ch
	return rs, ch.clone(), warnings
}

// identical reports whether two Services that are Equal are also equal in
// the fields Equal leaves out: the endpoints beyond their addresses (keep
// in step with Service).
func identical(a, b *Service) bool {
	return slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y endpoints.Endpoint) bool { return x.Equal(&y) })
}
