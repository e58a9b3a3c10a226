package ruleset

import (
	"slices"

	"github.com/svcproxy/svcproxy/internal/sorted"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Changes lists the ServicePorts whose state differs between two Rulesets,
// each list sorted by PortName.
type Changes struct {
	Added, Changed, Removed []servicemap.PortName
	// ConfigChanged reports that the Rulesets were built with different
	// Configs: every rule may differ, and a backend should do a full sync.
	ConfigChanged bool
}

// Empty reports whether the two Rulesets are equal.
func (c Changes) Empty() bool {
	return !c.ConfigChanged && len(c.Added) == 0 && len(c.Changed) == 0 && len(c.Removed) == 0
}

// Diff compares old and new. A nil old counts as an empty Ruleset with the
// same Config as new, and a nil new as an empty one with old's Config.
//
// When one of the two was made from the other by Builder.Update (directly,
// or through a chain of at most maxChain Updates whose intermediate Rulesets
// are still in memory), Diff looks only at the Service ports those Updates
// changed: O(k log n) time for k changes. Otherwise it compares every
// Service: O(n).
func Diff(old, new *Ruleset) Changes {
	if old == new {
		return Changes{}
	}
	if new == nil {
		new = &Ruleset{config: old.config}
	}
	var ch Changes
	var before []*Service
	if old != nil {
		ch.ConfigChanged = !configEqual(&old.config, &new.config)
		if !ch.ConfigChanged {
			if new.parent.Value() == old {
				return new.step.clone()
			}
			if names, ok := changedBetween(old, new); ok {
				return diffNames(old, new, names)
			}
		}
		before = old.Services()
	}
	sorted.Walk(before, new.Services(), func(a, b *Service) int { return a.Name.Compare(b.Name) },
		func(removed *Service) { ch.Removed = append(ch.Removed, removed.Name) },
		func(added *Service) { ch.Added = append(ch.Added, added.Name) },
		func(b, a *Service) {
			if b != a && !b.Equal(a) {
				ch.Changed = append(ch.Changed, a.Name)
			}
		})
	return ch
}

// maxChain is how many Updates Diff follows back from one Ruleset to find
// the other.
const maxChain = 64

// changedBetween returns, when one of a and b was made from the other by a
// chain of Updates, the names those Updates changed, sorted and each once:
// a superset of the names whose Services differ between a and b. It fails
// when there is no such chain, or when the names are so many that comparing
// every Service is as fast.
func changedBetween(a, b *Ruleset) ([]servicemap.PortName, bool) {
	limit := max(a.Len(), b.Len())/4 + 16
	for _, pair := range [2][2]*Ruleset{{a, b}, {b, a}} {
		ancestor, r := pair[0], pair[1]
		var names []servicemap.PortName
		for range maxChain {
			p := r.parent.Value()
			if p == nil {
				break
			}
			names = append(names, r.step.Added...)
			names = append(names, r.step.Changed...)
			names = append(names, r.step.Removed...)
			if len(names) > limit {
				break
			}
			if p == ancestor {
				slices.SortFunc(names, servicemap.PortName.Compare)
				return slices.Compact(names), true
			}
			r = p
		}
	}
	return nil, false
}

// diffNames compares old and new on names alone, which are sorted.
func diffNames(old, new *Ruleset, names []servicemap.PortName) Changes {
	var ch Changes
	for _, name := range names {
		before, had := old.Service(name)
		after, has := new.Service(name)
		switch {
		case had && !has:
			ch.Removed = append(ch.Removed, name)
		case !had && has:
			ch.Added = append(ch.Added, name)
		case had && has && before != after && !before.Equal(after):
			ch.Changed = append(ch.Changed, name)
		}
	}
	return ch
}

func (c Changes) clone() Changes {
	c.Added, c.Changed, c.Removed = slices.Clone(c.Added), slices.Clone(c.Changed), slices.Clone(c.Removed)
	return c
}

func configEqual(a, b *Config) bool {
	return a.Family == b.Family && a.Node == b.Node &&
		slices.Equal(a.ClusterCIDRs, b.ClusterCIDRs) &&
		a.MasqueradeAll == b.MasqueradeAll && a.Mark() == b.Mark() &&
		slices.Equal(a.NodePortAddresses, b.NodePortAddresses) &&
		a.LocalhostNodePorts == b.LocalhostNodePorts &&
		a.RestrictExternalIPs == b.RestrictExternalIPs &&
		slices.Equal(a.AllowedExternalIPs, b.AllowedExternalIPs) &&
		slices.Equal(a.ServiceCIDRs, b.ServiceCIDRs) &&
		a.ComputeHints == b.ComputeHints
}
