package ruleset

import (
	"fmt"
	"slices"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
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
	return buildIndex(svcs, destRanges(svcs)).len
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
	buildIndex(svcs, parallel.Split(len(svcs), k)).all(func(e frontendNames) bool {
		out = append(out, IndexEntry{e.f, e.names})
		return true
	})
	return out
}

// CheckInvariants reports what is wrong with the structure of r: its tree
// unbalanced or out of order, its Frontend index different from the one
// Build would make, Services not sorted.
func CheckInvariants(r *Ruleset) error {
	if err := checkTree(r.services.root, r.services.len, func(*Service) error { return nil }); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	idx := r.index()
	if err := checkTree(idx.root, idx.len, func(e frontendNames) error {
		f, names := e.f, e.names
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
	want := map[Frontend][]servicemap.PortName{}
	buildIndex(all, [][2]int{{0, len(all)}}).all(func(e frontendNames) bool {
		want[e.f] = e.names
		return true
	})
	got := map[Frontend][]servicemap.PortName{}
	idx.all(func(e frontendNames) bool {
		got[e.f] = e.names
		return true
	})
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b Frontend) bool { return a == b })); diff != "" {
		return fmt.Errorf("frontend index differs from a fresh one (-fresh +kept):\n%s", diff)
	}
	return nil
}

// checkTree checks the AVL invariants of the tree under n, its size, and
// each entry with check.
func checkTree[K keyed[K], V entry[K]](n *node[K, V], size int, check func(V) error) error {
	count := 0
	var prev *K
	var rec func(n *node[K, V]) (int8, error)
	rec = func(n *node[K, V]) (int8, error) {
		if n == nil {
			return 0, nil
		}
		hl, err := rec(n.left)
		if err != nil {
			return 0, err
		}
		k := n.val.key()
		if prev != nil && (*prev).Compare(k) >= 0 {
			return 0, fmt.Errorf("key %v after %v", k, *prev)
		}
		prev = &k
		count++
		if err := check(n.val); err != nil {
			return 0, err
		}
		hr, err := rec(n.right)
		if err != nil {
			return 0, err
		}
		if hl-hr > 1 || hr-hl > 1 {
			return 0, fmt.Errorf("node %v unbalanced: heights %d and %d", k, hl, hr)
		}
		if h := 1 + max(hl, hr); n.height != h {
			return 0, fmt.Errorf("node %v: height %d, want %d", k, n.height, h)
		}
		return n.height, nil
	}
	if _, err := rec(n); err != nil {
		return err
	}
	if count != size {
		return fmt.Errorf("%d entries, length %d", count, size)
	}
	return nil
}
