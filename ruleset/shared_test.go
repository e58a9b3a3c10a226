package ruleset_test

import (
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

// Property: SharedDestinations are exactly the destinations at which
// ServicesAt names more than one Service port, or one port has frontends
// of two kinds; sorted, each once.
func TestPropSharedDestinations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, _, rs, _ := genBuilt(t)
		shared := rs.SharedDestinations()
		if !slices.IsSortedFunc(shared, ruleset.Frontend.Compare) || len(slices.Compact(slices.Clone(shared))) != len(shared) {
			t.Fatalf("SharedDestinations not sorted, each once: %v", shared)
		}
		dest := func(f ruleset.Frontend) ruleset.Frontend { f.Kind = 0; return f }
		want := map[ruleset.Frontend]bool{}
		for _, s := range rs.Services() {
			fs := s.Frontends()
			for _, f := range fs {
				kinds := 0
				for _, g := range fs {
					if dest(g) == dest(f) {
						kinds++
					}
				}
				if len(rs.ServicesAt(f)) > 1 || kinds > 1 {
					want[dest(f)] = true
				}
			}
		}
		got := map[ruleset.Frontend]bool{}
		for _, d := range shared {
			got[d] = true
		}
		if !maps.Equal(got, want) {
			t.Fatalf("SharedDestinations %v, want %v", shared, want)
		}
	})
}
