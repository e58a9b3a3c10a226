package ruleset

import (
	"fmt"
	"slices"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/cowmap"
	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/servicemap"
)

// BuildSplit is b.Build with the ServicePorts split into k ranges.
func BuildSplit(b *Builder, services servicemap.Snapshot, eps endpoints.Snapshot, k int) (*Ruleset, []svcproxy.Warning) {
	return b.build(services, eps, func(n int) [][2]int { return parallel.Split(n, k) })
}

// SharedDestinationsSplit is r.SharedDestinations with the Services split
// into k ranges.
func SharedDestinationsSplit(r *Ruleset, k int) []Frontend {
	svcs := r.Services()
	return sharedDestinations(svcs, parallel.Split(len(svcs), k), layoutFor(len(svcs)))
}

// FrontendIndexLen makes the Frontend index of r's Services afresh, as
// ServicesAt does on first use, and returns its number of destinations.
func FrontendIndexLen(r *Ruleset) int {
	svcs := r.Services()
	return buildIndex(svcs, destRanges(svcs)).Len()
}

// IndexEntry is an entry of a Ruleset's Frontend index: a destination and
// the names of the Service ports with a frontend there.
type IndexEntry struct {
	Destination Frontend
	Names       []servicemap.PortName
}

// IndexSplit returns the entries of the Frontend index of r's Services,
// made with the Services split into k ranges, in order.
func IndexSplit(r *Ruleset, k int) []IndexEntry {
	svcs := r.Services()
	var out []IndexEntry
	buildIndex(svcs, parallel.Split(len(svcs), k)).All(func(f Frontend, names []servicemap.PortName) bool {
		out = append(out, IndexEntry{f, names})
		return true
	})
	return out
}

// CheckInvariants reports what is wrong with the structure of r: its maps
// out of order, a Service under another's name, its Frontend index
// different from the one Build would make, Services not sorted, its
// ListedEndpoints not the sum of its Services'. (The maps'
// own structure is internal/cowmap's to check.)
func CheckInvariants(r *Ruleset) error {
	if err := checkOrder(r.services, func(name servicemap.PortName, s *Service) error {
		if s.Name != name {
			return fmt.Errorf("Service %v under %v", s.Name, name)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	idx := r.index()
	if err := checkOrder(idx, func(f Frontend, names []servicemap.PortName) error {
		if len(names) == 0 || !slices.IsSortedFunc(names, servicemap.PortName.Compare) || len(slices.Compact(slices.Clone(names))) != len(names) {
			return fmt.Errorf("frontend %v: names %v not sorted, unique and not empty", f, names)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("frontends: %w", err)
	}
	all := r.Services()
	if !slices.IsSortedFunc(all, func(a, b *Service) int { return a.Name.Compare(b.Name) }) || len(all) != r.Len() {
		return fmt.Errorf("Services() not sorted or not Len() long")
	}
	listed := 0
	for _, s := range all {
		listed += s.ListedEndpoints
	}
	if r.ListedEndpoints() != listed {
		return fmt.Errorf("ListedEndpoints() = %d, the Services' sum is %d", r.ListedEndpoints(), listed)
	}
	want := map[Frontend][]servicemap.PortName{}
	buildIndex(all, [][2]int{{0, len(all)}}).All(func(f Frontend, names []servicemap.PortName) bool {
		want[f] = names
		return true
	})
	got := map[Frontend][]servicemap.PortName{}
	idx.All(func(f Frontend, names []servicemap.PortName) bool {
		got[f] = names
		return true
	})
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b Frontend) bool { return a == b })); diff != "" {
		return fmt.Errorf("frontend index differs from a fresh one (-fresh +kept):\n%s", diff)
	}
	return nil
}

// checkOrder checks that m yields its keys in increasing order, Len of
// them, and each entry with check.
func checkOrder[K cowmap.Key[K], V any](m cowmap.Map[K, V], check func(K, V) error) error {
	var err error
	var prev *K
	count := 0
	m.All(func(k K, v V) bool {
		if prev != nil && (*prev).Compare(k) >= 0 {
			err = fmt.Errorf("key %v after %v", k, *prev)
			return false
		}
		prev = &k
		count++
		err = check(k, v)
		return err == nil
	})
	if err == nil && count != m.Len() {
		err = fmt.Errorf("%d entries, length %d", count, m.Len())
	}
	return err
}
