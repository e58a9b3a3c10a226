package proxy

import (
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// frontendConflicts warns about the frontends that Service ports of
// several Services share: node ports, which an API server refuses but
// files may hold, and external and load-balancer IPs with one port and
// protocol, which it allows. Each port but the owner
// (ruleset.Ruleset.Owner: the rule is svcproxy's, since kube-proxy serves
// whichever its map order puts first or last) is not served there, and
// its warning names both. It returns the warnings not given for the
// previous rulesets, and records these.
type frontendConflicts struct {
	last   map[v1.IPFamily]*ruleset.Ruleset
	warned map[svcproxy.Warning]bool
}

// check returns the new conflicts of rulesets; it looks again only when a
// family's Ruleset changed.
func (c *frontendConflicts) check(rulesets map[v1.IPFamily]*ruleset.Ruleset) []svcproxy.Warning {
	changed := false
	for f, rs := range rulesets {
		changed = changed || c.last[f] != rs
	}
	if !changed {
		return nil
	}
	warnings := map[svcproxy.Warning]bool{}
	for _, rs := range rulesets {
		for _, d := range rs.SharedDestinations() {
			if d.Protocol == "" {
				continue // a cluster IP as a whole, which every port of its Service has
			}
			owner, _, ok := rs.Owner(d)
			if !ok {
				continue
			}
			for _, name := range rs.ServicesAt(d) {
				if name == owner.Name {
					continue // the owner at this address through another kind of frontend
				}
				warnings[ruleset.ConflictWarning(name, d, owner.Name)] = true
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
	c.last, c.warned = maps.Clone(rulesets), warnings
	return out
}
