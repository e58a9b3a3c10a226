package proxy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// nodePortConflicts warns about the node ports that several Service ports
// of the rulesets share, which an API server refuses but files may hold:
// each port but the owner (ruleset.Ruleset.Owner) is not served there. It
// returns the warnings not given for the previous rulesets, and records
// these.
type nodePortConflicts struct {
	last   map[v1.IPFamily]*ruleset.Ruleset
	warned map[svcproxy.Warning]bool
}

// check returns the new conflicts of rulesets; it looks again only when a
// family's Ruleset changed.
func (c *nodePortConflicts) check(rulesets map[v1.IPFamily]*ruleset.Ruleset) []svcproxy.Warning {
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
			if d.Addr.IsValid() {
				continue // an external or load-balancer IP: Owner's rule, no API server check
			}
			owner, _, ok := rs.Owner(d)
			if !ok {
				continue
			}
			for _, name := range rs.ServicesAt(d) {
				if name == owner.Name {
					continue
				}
				warnings[svcproxy.Warning{Kind: "Service", Namespace: name.Namespace, Name: name.Name,
					Reason: fmt.Sprintf("nodePort %d/%s is also Service port %s's, which takes it: not served for port %q", d.Port, d.Protocol, owner.Name, name.Port)}] = true
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
