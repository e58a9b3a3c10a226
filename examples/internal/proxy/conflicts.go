package proxy

import (
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// frontendConflicts warns about the frontends that Service ports of
// several Services share: node ports, which an API server refuses but
// files may hold, and external and load-balancer IPs with one port and
// protocol, which it allows. Each port but the owner
// (ruleset.Ruleset.Owner: the rule is svcproxy's, since kube-proxy serves
// whichever its map order puts first or last) is not served there, and
// its warning names both. It returns the warnings not given for the
// previous rulesets, and records these.
//
// The warnings at a destination depend only on the Service ports there,
// so after the first check of a family it looks again only at the
// destinations of the Service ports that changed (ruleset.Diff): a
// change costs O(k log n) for k changed ports, not a pass over every
// Service.
type frontendConflicts struct {
	last map[v1.IPFamily]*ruleset.Ruleset
	// at holds, per family, the warnings at each destination with any.
	at     map[v1.IPFamily]map[ruleset.Frontend][]svcproxy.Warning
	warned map[svcproxy.Warning]bool
}

// check returns the new conflicts of rulesets; it looks again only when a
// family's Ruleset changed.
func (c *frontendConflicts) check(rulesets map[v1.IPFamily]*ruleset.Ruleset) []svcproxy.Warning {
	changed := len(rulesets) != len(c.last)
	at := map[v1.IPFamily]map[ruleset.Frontend][]svcproxy.Warning{}
	for f, rs := range rulesets {
		prev, known := c.last[f], c.at[f]
		switch {
		case prev == rs && known != nil:
			at[f] = known
			continue
		case prev == nil || known == nil:
			at[f] = conflictsAt(rs, rs.SharedDestinations(), nil)
		default:
			if dests, ok := touchedDestinations(prev, rs); ok {
				at[f] = conflictsAt(rs, dests, known)
			} else {
				at[f] = conflictsAt(rs, rs.SharedDestinations(), nil)
			}
		}
		changed = true
	}
	if !changed {
		return nil
	}
	warnings := map[svcproxy.Warning]bool{}
	for _, byDest := range at {
		for _, ws := range byDest {
			for _, w := range ws {
				warnings[w] = true
			}
		}
	}
	var out []svcproxy.Warning
	for w := range warnings {
		if !c.warned[w] {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b svcproxy.Warning) int { return strings.Compare(a.String(), b.String()) })
	c.last, c.at, c.warned = maps.Clone(rulesets), at, warnings
	return out
}

// conflictsAt returns known (copied; nil: empty) with the warnings at each
// of dests recomputed from rs.
func conflictsAt(rs *ruleset.Ruleset, dests []ruleset.Frontend, known map[ruleset.Frontend][]svcproxy.Warning) map[ruleset.Frontend][]svcproxy.Warning {
	byDest := maps.Clone(known)
	if byDest == nil {
		byDest = map[ruleset.Frontend][]svcproxy.Warning{}
	}
	for _, d := range dests {
		if ws := warningsAt(rs, d); len(ws) > 0 {
			byDest[d] = ws
		} else {
			delete(byDest, d)
		}
	}
	return byDest
}

// warningsAt returns the warnings for the Service ports at destination d
// that its owner takes from them.
func warningsAt(rs *ruleset.Ruleset, d ruleset.Frontend) []svcproxy.Warning {
	if d.Protocol == "" {
		return nil // a cluster IP as a whole, which every port of its Service has
	}
	owner, _, ok := rs.Owner(d)
	if !ok {
		return nil
	}
	var ws []svcproxy.Warning
	for _, name := range rs.ServicesAt(d) {
		if name != owner.Name { // else the owner at this address through another kind of frontend
			ws = append(ws, ruleset.ConflictWarning(name, d, owner.Name))
		}
	}
	return ws
}

// touchedDestinations returns the destinations of the frontends that the
// Service ports changed between prev and rs had in either; false when the
// Config changed, which may move every frontend.
func touchedDestinations(prev, rs *ruleset.Ruleset) ([]ruleset.Frontend, bool) {
	ch := ruleset.Diff(prev, rs)
	if ch.ConfigChanged {
		return nil, false
	}
	seen := map[ruleset.Frontend]bool{}
	var dests []ruleset.Frontend
	add := func(r *ruleset.Ruleset, names []servicemap.PortName) {
		for _, name := range names {
			s, ok := r.Service(name)
			if !ok {
				continue
			}
			for _, f := range s.Frontends() {
				f.Kind = 0
				if !seen[f] {
					seen[f] = true
					dests = append(dests, f)
				}
			}
		}
	}
	add(rs, ch.Added)
	add(rs, ch.Changed)
	add(prev, ch.Changed)
	add(prev, ch.Removed)
	return dests, true
}
