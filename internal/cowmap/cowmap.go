// Package cowmap is a persistent (copy-on-write) ordered map, generic in its
// key and value types, and the Journal that the trackers of servicemap and
// endpoints are built on. It holds the trackers' snapshots (keyed by
// namespace and name) and a Ruleset's Services and Frontend index.
//
// # Immutability
//
// A Map value is immutable: no method changes the Map it is called on, nor
// any Map it was made from. With and Without return a new Map that shares
// all of its structure with the old one but the path to the entry they
// touch, so that making a version costs time and memory proportional to the
// change, not to the size of the map, and every version stays valid and
// safe for concurrent readers, for as long as anything holds it. A Map is a
// small value (a pointer and a length): copy it freely. Values are stored as
// they are given: a value that is itself mutable (a slice, a pointer) must
// not be changed once a Map holds it.
//
// # Order
//
// Keys order themselves by a Compare method (see Key), as netip.Addr and
// servicemap.PortName do. All reads a Map in key order, AllFrom from a key
// on, and Diff lists the keys whose values two versions may hold differently
// in time proportional to the changes between them.
//
// # Layout
//
// Entries live in the leaves of a B+tree (sorted arrays of at most maxNode
// keys and values) under inner nodes of at most maxNode children, each with
// the least key of its subtree. With and Without copy one node per level,
// O(log n) of them; a node copied for a changed value shares the old one's
// keys.
package cowmap

import (
	"iter"
	"slices"

	"github.com/svcproxy/svcproxy/internal/sorted"
)

// Key is a key type ordered by its Compare method: a.Compare(b) is
// negative, zero or positive as a sorts before b, with b (the same key), or
// after b, a total order. netip.Addr's Compare is one; a basic type gets one
// from cmp.Compare:
//
//	type port int
//	func (p port) Compare(q port) int { return cmp.Compare(p, q) }
type Key[K any] interface{ Compare(K) int }

// maxNode is the most entries of a leaf and children of an inner node. A
// node that grows past it splits in two halves.
const maxNode = 16

// node is a leaf (kids nil) or an inner node of a B+tree. It is never
// changed once a Map holds it.
type node[K Key[K], V any] struct {
	// keys are a leaf's entries' keys, sorted; or an inner node's
	// children's least keys, sorted (each child holds the keys from its
	// own up to the next child's).
	keys []K
	// vals are a leaf's entries' values, by index in keys.
	vals []V
	// kids are an inner node's children, all of one height.
	kids []*node[K, V]
}

// Map is an immutable map from K to V, ordered by K's Compare. The zero Map
// is empty and ready to use.
type Map[K Key[K], V any] struct {
	root   *node[K, V]
	length int
}

// Len is the number of keys.
func (m Map[K, V]) Len() int { return m.length }

// search is the index of the first of keys, which are sorted, not below
// key, and whether it is key.
func search[K Key[K]](keys []K, key K) (int, bool) {
	lo, hi := 0, len(keys)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if keys[h].Compare(key) < 0 {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo, lo < len(keys) && keys[lo].Compare(key) == 0
}

// child is the index of the child of inner node n whose keys key falls
// among: the last whose least key is not above key, or the first.
func (n *node[K, V]) child(key K) int {
	i, found := search(n.keys, key)
	if !found && i > 0 {
		i--
	}
	return i
}

// Get returns the value for key and whether it is present.
func (m Map[K, V]) Get(key K) (V, bool) {
	var zero V
	n := m.root
	if n == nil {
		return zero, false
	}
	for n.kids != nil {
		n = n.kids[n.child(key)]
	}
	if j, found := search(n.keys, key); found {
		return n.vals[j], true
	}
	return zero, false
}

// FromSorted returns the Map of entries. Entries in increasing key order,
// each key once, make it in O(n) time, in full leaves; from the first entry
// out of that order on, it adds the rest as With would, the last value of a
// key winning.
func FromSorted[K Key[K], V any](entries iter.Seq2[K, V]) Map[K, V] {
	var leaves []*node[K, V]
	var leaf *node[K, V]
	var rest []entry[K, V] // from the first entry out of order on
	var last K
	n := 0
	for k, v := range entries {
		if rest != nil || (n > 0 && k.Compare(last) <= 0) {
			rest = append(rest, entry[K, V]{k, v})
			continue
		}
		if leaf == nil || len(leaf.keys) == maxNode {
			leaf = &node[K, V]{keys: make([]K, 0, maxNode), vals: make([]V, 0, maxNode)}
			leaves = append(leaves, leaf)
		}
		leaf.keys, leaf.vals = append(leaf.keys, k), append(leaf.vals, v)
		last = k
		n++
	}
	m := Map[K, V]{root: stack(leaves), length: n}
	for _, e := range rest {
		m = m.With(e.key, e.val)
	}
	return m
}

// stack builds the inner levels of a B+tree over level, its nodes of one
// height in key order, and returns the root (nil for none).
func stack[K Key[K], V any](level []*node[K, V]) *node[K, V] {
	for len(level) > 1 {
		var up []*node[K, V]
		for kids := range slices.Chunk(level, maxNode) {
			n := &node[K, V]{keys: make([]K, len(kids)), kids: slices.Clone(kids)}
			for i, kid := range kids {
				n.keys[i] = kid.keys[0]
			}
			up = append(up, n)
		}
		level = up
	}
	if len(level) == 0 {
		return nil
	}
	return level[0]
}

// With returns a Map in which key maps to v. Where a key equal to key (by
// Compare) is there already, the Map keeps that key and the new value.
func (m Map[K, V]) With(key K, v V) Map[K, V] {
	if m.root == nil {
		return Map[K, V]{root: &node[K, V]{keys: []K{key}, vals: []V{v}}, length: 1}
	}
	n, split, added := insert(m.root, key, v)
	if split != nil {
		n = &node[K, V]{keys: []K{n.keys[0], split.keys[0]}, kids: []*node[K, V]{n, split}}
	}
	if added {
		return Map[K, V]{root: n, length: m.length + 1}
	}
	return Map[K, V]{root: n, length: m.length}
}

// insert returns a copy of n with key mapped to v, and the upper half of
// that copy when it outgrew maxNode (then the copy is the lower half);
// added reports that key was not in n. A copy whose keys are those of n
// shares n's array of them (no node's arrays ever change), so that a
// changed value copies one array of values or children per level.
func insert[K Key[K], V any](n *node[K, V], key K, v V) (c, split *node[K, V], added bool) {
	if n.kids == nil {
		j, found := search(n.keys, key)
		if found {
			c = &node[K, V]{keys: n.keys, vals: slices.Clone(n.vals)}
			c.vals[j] = v
			return c, nil, false
		}
		c = &node[K, V]{keys: inserted(n.keys, j, key), vals: inserted(n.vals, j, v)}
		c, split = c.splitIfFull()
		return c, split, true
	}
	i := n.child(key)
	kid, kidSplit, added := insert(n.kids[i], key, v)
	if kidSplit != nil {
		c = &node[K, V]{keys: inserted(n.keys, i+1, kidSplit.keys[0]), kids: inserted(n.kids, i+1, kidSplit)}
		c.keys[i], c.kids[i] = kid.keys[0], kid
		c, split = c.splitIfFull()
		return c, split, added
	}
	return n.withKid(i, kid), nil, added
}

// withKid is a copy of inner node n with kid as its child i, sharing n's
// keys when kid's least key is the one n has for it.
func (n *node[K, V]) withKid(i int, kid *node[K, V]) *node[K, V] {
	c := &node[K, V]{keys: n.keys, kids: slices.Clone(n.kids)}
	c.kids[i] = kid
	if kid.keys[0].Compare(n.keys[i]) != 0 {
		c.keys = slices.Clone(n.keys)
		c.keys[i] = kid.keys[0]
	}
	return c
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
func (n *node[K, V]) splitIfFull() (lower, upper *node[K, V]) {
	if len(n.keys) <= maxNode {
		return n, nil
	}
	h := len(n.keys) / 2
	lower = &node[K, V]{keys: slices.Clone(n.keys[:h])}
	upper = &node[K, V]{keys: slices.Clone(n.keys[h:])}
	if n.kids == nil {
		lower.vals, upper.vals = slices.Clone(n.vals[:h]), slices.Clone(n.vals[h:])
	} else {
		lower.kids, upper.kids = slices.Clone(n.kids[:h]), slices.Clone(n.kids[h:])
	}
	return lower, upper
}

// Without returns a Map without key.
func (m Map[K, V]) Without(key K) Map[K, V] {
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
	return Map[K, V]{root: n, length: m.length - 1}
}

// remove returns a copy of n without key, nil when that leaves it empty,
// and whether key was there (else n itself). Nodes may be left with few
// entries: a B+tree that never merges them stays correct, and the maps
// here rarely shrink by much.
func remove[K Key[K], V any](n *node[K, V], key K) (*node[K, V], bool) {
	if n.kids == nil {
		j, found := search(n.keys, key)
		if !found {
			return n, false
		}
		if len(n.keys) == 1 {
			return nil, true
		}
		return &node[K, V]{keys: slices.Delete(slices.Clone(n.keys), j, j+1), vals: slices.Delete(slices.Clone(n.vals), j, j+1)}, true
	}
	i := n.child(key)
	kid, removed := remove(n.kids[i], key)
	if !removed {
		return n, false
	}
	switch {
	case kid != nil:
		return n.withKid(i, kid), true
	case len(n.kids) == 1:
		return nil, true
	}
	return &node[K, V]{keys: slices.Delete(slices.Clone(n.keys), i, i+1), kids: slices.Delete(slices.Clone(n.kids), i, i+1)}, true
}

// All calls yield for every entry, in key order, until yield returns
// false: m.All is an iter.Seq2.
func (m Map[K, V]) All(yield func(K, V) bool) {
	if m.root != nil {
		all(m.root, yield)
	}
}

// all is All for the subtree n; false when yield stopped it.
func all[K Key[K], V any](n *node[K, V], yield func(K, V) bool) bool {
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
func (m Map[K, V]) AllFrom(from K, yield func(K, V) bool) {
	if m.root != nil {
		allFrom(m.root, from, yield)
	}
}

// allFrom is AllFrom for the subtree n; false when yield stopped it.
func allFrom[K Key[K], V any](n *node[K, V], from K, yield func(K, V) bool) bool {
	if n.kids == nil {
		j, _ := search(n.keys, from)
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
func (m Map[K, V]) Diff(o Map[K, V], changed func(key K, before, after V)) {
	diff(m.root, o.root, changed)
}

// diff is Diff for the subtrees a (before) and b (after), either nil,
// which hold every key that either holds outside the subtrees that the
// caller found shared.
func diff[K Key[K], V any](a, b *node[K, V], changed func(key K, before, after V)) {
	if a == b {
		return
	}
	if a != nil && b != nil && a.kids != nil && b.kids != nil {
		if slices.EqualFunc(a.keys, b.keys, func(x, y K) bool { return x.Compare(y) == 0 }) {
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
func unshared[K Key[K], V any](xs, ys []*node[K, V]) []*node[K, V] {
	var out []*node[K, V]
	for _, x := range xs {
		if !slices.Contains(ys, x) {
			out = append(out, x)
		}
	}
	return out
}

// entry is a key and its value.
type entry[K Key[K], V any] struct {
	key K
	val V
}

// entries are the entries of the subtrees ns (nil ones hold none), in
// order.
func entries[K Key[K], V any](ns ...*node[K, V]) []entry[K, V] {
	var out []entry[K, V]
	for _, n := range ns {
		if n != nil {
			all(n, func(k K, v V) bool {
				out = append(out, entry[K, V]{k, v})
				return true
			})
		}
	}
	return out
}

// walk calls changed for every key of before or after, two sorted lists
// of entries, in order, with the zero V where one lacks it.
func walk[K Key[K], V any](before, after []entry[K, V], changed func(key K, before, after V)) {
	var zero V
	sorted.Walk(before, after, func(x, y entry[K, V]) int { return x.key.Compare(y.key) },
		func(b entry[K, V]) { changed(b.key, b.val, zero) },
		func(a entry[K, V]) { changed(a.key, zero, a.val) },
		func(b, a entry[K, V]) { changed(a.key, b.val, a.val) })
}
