package state

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy"
)

// objectKey names one input object of a kind.
type objectKey struct {
	kind string
	types.NamespacedName
}

// report records warnings, those of one event about the object key (over
// all families), and returns the ones not already recorded for key by its
// previous event: each warning once, for as long as it persists.
func (s *State) report(key objectKey, warnings []svcproxy.Warning) []svcproxy.Warning {
	previous := s.reported[key]
	var current, fresh []svcproxy.Warning
	for _, w := range warnings {
		if slices.Contains(current, w) {
			continue
		}
		current = append(current, w)
		if !slices.Contains(previous, w) {
			fresh = append(fresh, w)
		}
	}
	if len(current) == 0 {
		delete(s.reported, key)
	} else {
		s.reported[key] = current
	}
	return fresh
}
