package ruleset

import (
	"slices"

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
// same Config as new.
func Diff(old, new *Ruleset) Changes {
	var ch Changes
	var before []*Service
	if old != nil {
		before = old.services
		ch.ConfigChanged = !configEqual(&old.config, &new.config)
	}
	after := new.services
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i].Name.Compare(after[j].Name) < 0):
			ch.Removed = append(ch.Removed, before[i].Name)
			i++
		case i == len(before) || before[i].Name.Compare(after[j].Name) > 0:
			ch.Added = append(ch.Added, after[j].Name)
			j++
		default:
			if before[i] != after[j] && !before[i].Equal(after[j]) {
				ch.Changed = append(ch.Changed, after[j].Name)
			}
			i++
			j++
		}
	}
	return ch
}

func configEqual(a, b *Config) bool {
	return a.Family == b.Family && a.Node == b.Node &&
		slices.Equal(a.ClusterCIDRs, b.ClusterCIDRs) &&
		a.MasqueradeAll == b.MasqueradeAll && a.Mark() == b.Mark() &&
		slices.Equal(a.NodePortAddresses, b.NodePortAddresses) &&
		a.LocalhostNodePorts == b.LocalhostNodePorts &&
		a.RestrictExternalIPs == b.RestrictExternalIPs &&
		slices.Equal(a.AllowedExternalIPs, b.AllowedExternalIPs) &&
		a.ComputeHints == b.ComputeHints
}
