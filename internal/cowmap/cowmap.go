// Package cowmap is a copy-on-write map keyed by namespace and name, kept in
// key order, and the Journal that the trackers of servicemap and endpoints
// are built on. Taking an immutable snapshot after a change costs time
// proportional to the change, not to the size of the map.
//
// Entries live in the leaves of a B+tree (sorted arrays of at most
// maxNode entries) under inner nodes of at most maxNode children, each
// with the least key of its subtree. A Map is immutable; With and Without
// return a new Map that shares everything but the path to the leaf they
// touch: a copy of each node on it, three at 30,000 keys.
//
// The map is ordered so that a full sync reads it in order: the Services
// of a servicemap snapshot in the order the renderers walk them, without a
// sort, and the endpoints of an endpoints snapshot alongside them
// (AllFrom), without a lookup per Service.
package cowmap

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/internal/sorted"
)

// maxNode is the most entries of a leaf and children of an inner node. A
// node that grows past it splits in two halves.
const maxNode = 32

// node is a leaf (kids nil) or an inner node of a B+tree. It is never
// changed once a Map holds it.
type node[V any] struct {
	// keys are a leaf's entries' keys, sorted; or an inner node's
	// children's least keys, sorted (each child holds the keys from its
	// own up to the next child's).
	keys []types.NamespacedName
	// vals are a leaf's entries' values, by index in keys.
	vals []V
	// kids are an inner node's children, all of one height.
	kids []*node[V]
}

// Map is an immutable map from types.NamespacedName to V, ordered by
// namespace, then name. The zero Map is empty and ready to use.
type Map[V any] struct {
	root   *node[V]
	length int
}

// Compare orders keys by namespace, then name.
func Compare(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// Len is the number of keys.
func (m Map[V]) Len() int { return m.length }

// child is the index of the child of inner node n whose keys key falls
// among: the last whose least key is not above key, or the first.
func (n *node[V]) child(key types.NamespacedName) int {
	i, found := slices.BinarySearchFunc(n.keys, key, Compare)
	if !found && i > 0 {
		i--
	}
	return i
}

// Get returns the value for key and whether it is present.
func (m Map[V]) Get(key types.NamespacedName) (V, bool) {
	var zero V
	n := m.root
	if n == nil {
		return zero, false
	}
	for n.kids != nil {
		n = n.kids[n.child(key)]
	}
	if j, found := slices.BinarySearchFunc(n.keys, key, Compare); found {
		return n.vals[j], true
	}
	return zero, false
}

// With returns a Map in which key maps to v. The entry holds key itself,
// also where an equal key was there before.
func (m Map[V]) With(key types.NamespacedName, v V) Map[V] {
	if m.root == nil {
		return Map[V]{root: &node[V]{keys: []types.NamespacedName{key}, vals: []V{v}}, length: 1}
	}
	n, split, added := insert(m.root, key, v)
	if split != nil {
		n = &node[V]{keys: []types.NamespacedName{n.keys[0], split.keys[0]}, kids: []*node[V]{n, split}}
	}
	if added {
		return Map[V]{root: n, length: m.length + 1}
	}
	return Map[V]{root: n, length: m.length}
}

// insert returns a copy of n with key mapped to v, and the upper half of
// that copy when it outgrew maxNode (then the copy is the lower half);
// added reports that key was not in n.
func insert[V any](n *node[V], key types.NamespacedName, v V) (c, split *node[V], added bool) {
	if n.kids == nil {
		j, found := slices.BinarySearchFunc(n.keys, key, Compare)
		if found {
			c = &node[V]{keys: slices.Clone(n.keys), vals: slices.Clone(n.vals)}
			c.keys[j], c.vals[j] = key, v
			return c, nil, false
		}
		c = &node[V]{keys: inserted(n.keys, j, key), vals: inserted(n.vals, j, v)}
		c, split = c.splitIfFull()
		return c, split, true
	}
	i := n.child(key)
	kid, kidSplit, added := insert(n.kids[i], key, v)
	if kidSplit == nil {
		c = &node[V]{keys: slices.Clone(n.keys), kids: slices.Clone(n.kids)}
	} else {
		c = &node[V]{keys: inserted(n.keys, i+1, kidSplit.keys[0]), kids: inserted(n.kids, i+1, kidSplit)}
	}
	c.keys[i], c.kids[i] = kid.keys[0], kid
	c, split = c.splitIfFull()
	return c, split, added
}

// inserted is a copy of s with v at index i, in an array of its own just
// long enough: the Map holds every node's arrays as they are made, and
// append's room to grow would stay unused.
func inserted[T any](s []T, i int, v T) []T {
	out := make([]T, len(s)+1)
	copy(out, s[:i])
	out[i] = v
	copy(out[i+1:], s[i:])
	return out
}

// splitIfFull returns n, or, when it has more than maxNode entries or
// children, its lower and upper halves, each in arrays of its own (halves
// of one array would keep all of it alive while either lives).
func (n *node[V]) splitIfFull() (lower, upper *node[V]) {
	if len(n.keys) <= maxNode {
		return n, nil
	}
	h := len(n.keys) / 2
	lower = &node[V]{keys: slices.Clone(n.keys[:h])}
	upper = &node[V]{keys: slices.Clone(n.keys[h:])}
	if n.kids == nil {
		lower.vals, upper.vals = slices.Clone(n.vals[:h]), slices.Clone(n.vals[h:])
	} else {
		lower.kids, upper.kids = slices.Clone(n.kids[:h]), slices.Clone(n.kids[h:])
	}
	return lower, upper
}

// Without returns a Map without key.
func (m Map[V]) Without(key types.NamespacedName) Map[V] {
	if m.root == nil {
		return m
	}
	n, removed := remove(m.root, key)
	if !removed {
		return m
	}
	for n != nil && n.kids != nil && len(n.kids) == 1 {
		n = n.kids[0]
	}
	return Map[V]{root: n, length: m.length - 1}
}

// remove returns a copy of n without key, nil when that leaves it empty,
// and whether key was there (else n itself). Nodes may be left with few
// entries: a B+tree that never merges them stays correct, and a tracker's
// keys rarely shrink by much.
func remove[V any](n *node[V], key types.NamespacedName) (*node[V], bool) {
	if n.kids == nil {
		j, found := slices.BinarySearchFunc(n.keys, key, Compare)
		if !found {
			return n, false
		}
		if len(n.keys) == 1 {
			return nil, true
		}
		return &node[V]{keys: slices.Delete(slices.Clone(n.keys), j, j+1), vals: slices.Delete(slices.Clone(n.vals), j, j+1)}, true
	}
	i := n.child(key)
	kid, removed := remove(n.kids[i], key)
	if !removed {
		return n, false
	}
	c := &node[V]{keys: slices.Clone(n.keys), kids: slices.Clone(n.kids)}
	if kid == nil {
		if len(c.kids) == 1 {
			return nil, true
		}
		c.keys, c.kids = slices.Delete(c.keys, i, i+1), slices.Delete(c.kids, i, i+1)
	} else {
		c.keys[i], c.kids[i] = kid.keys[0], kid
	}
	return c, true
}

// All calls yield for every entry, in key order, until yield returns
// false.
func (m Map[V]) All(yield func(types.NamespacedName, V) bool) {
	if m.root != nil {
		all(m.root, yield)
	}
}

// all is All for the subtree n; false when yield stopped it.
func all[V any](n *node[V], yield func(types.NamespacedName, V) bool) bool {
	if n.kids == nil {
		for j := range n.keys {
			if !yield(n.keys[j], n.vals[j]) {
				return false
			}
		}
		return true
	}
	for _, k := range n.kids {
		if !all(k, yield) {
			return false
		}
	}
	return true
}

// AllFrom is All from the first key not below from on: it finds that key
// as Get does, then reads on in order.
func (m Map[V]) AllFrom(from types.NamespacedName, yield func(types.NamespacedName, V) bool) {
	if m.root != nil {
		allFrom(m.root, from, yield)
	}
}

// allFrom is AllFrom for the subtree n; false when yield stopped it.
func allFrom[V any](n *node[V], from types.NamespacedName, yield func(types.NamespacedName, V) bool) bool {
	if n.kids == nil {
		j, _ := slices.BinarySearchFunc(n.keys, from, Compare)
		for ; j < len(n.keys); j++ {
			if !yield(n.keys[j], n.vals[j]) {
				return false
			}
		}
		return true
	}
	i := n.child(from)
	if !allFrom(n.kids[i], from, yield) {
		return false
	}
	for _, k := range n.kids[i+1:] {
		if !all(k, yield) {
			return false
		}
	}
	return true
}

// Diff calls changed for every key of m or o that may map to different
// values in the two: the keys of every subtree that the two Maps do not
// share, in key order. The value is the zero V where a key is missing.
// Between a Map and one made from it by k calls of With and Without, Diff
// visits O(k) leaves, and the leaves beside a node that split or lost a
// child (its parent's other children that it does not share: at most
// maxNode); between unrelated Maps it visits all.
func (m Map[V]) Diff(o Map[V], changed func(key types.NamespacedName, before, after V)) {
	diff(m.root, o.root, changed)
}

// diff is Diff for the subtrees a (before) and b (after), either nil,
// which hold every key that either holds outside the subtrees that the
// caller found shared.
func diff[V any](a, b *node[V], changed func(key types.NamespacedName, before, after V)) {
	if a == b {
		return
	}
	if a != nil && b != nil && a.kids != nil && b.kids != nil {
		if slices.Equal(a.keys, b.keys) {
			// The children cover the same keys, pairwise.
			for i := range a.kids {
				diff(a.kids[i], b.kids[i], changed)
			}
			return
		}
		// A child that both hold has the same entries in both; the others
		// hold the rest of the keys.
		onlyA, onlyB := unshared(a.kids, b.kids), unshared(b.kids, a.kids)
		if len(onlyA) == 1 && len(onlyB) == 1 {
			diff(onlyA[0], onlyB[0], changed)
			return
		}
		walk(entries(onlyA...), entries(onlyB...), changed)
		return
	}
	walk(entries(a), entries(b), changed)
}

// unshared are the nodes of xs that ys does not hold, in order.
func unshared[V any](xs, ys []*node[V]) []*node[V] {
	var out []*node[V]
	for _, x := range xs {
		if !slices.Contains(ys, x) {
			out = append(out, x)
		}
	}
	return out
}

// entry is a key and its value.
type entry[V any] struct {
	key types.NamespacedName
	val V
}

// entries are the entries of the subtrees ns (nil ones hold none), in
// order.
func entries[V any](ns ...*node[V]) []entry[V] {
	var out []entry[V]
	for _, n := range ns {
		if n != nil {
			all(n, func(k types.NamespacedName, v V) bool {
				out = append(out, entry[V]{k, v})
				return true
			})
		}
	}
	return out
}

// walk calls changed for every key of before or after, two sorted lists
// of entries, in order, with the zero V where one lacks it.
func walk[V any](before, after []entry[V], changed func(key types.NamespacedName, before, after V)) {
	var zero V
	sorted.Walk(before, after, func(x, y entry[V]) int { return Compare(x.key, y.key) },
		func(b entry[V]) { changed(b.key, b.val, zero) },
		func(a entry[V]) { changed(a.key, zero, a.val) },
		func(b, a entry[V]) { changed(a.key, b.val, a.val) })
}
