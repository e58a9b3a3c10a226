package ruleset

import (
	"fmt"
	"slices"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/servicemap"
)

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
	buildIndex(all).all(func(e frontendNames) bool {
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
