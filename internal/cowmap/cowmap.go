// Package cowmap is a copy-on-write map keyed by namespace and name, and the
// Journal that the trackers of servicemap and endpoints are built on. Taking
// an immutable snapshot after a change costs time proportional to the change,
// not to the size of the map.
//
// Entries live in 4,096 leaf maps in a two-level table of 64 × 64, chosen by
// an FNV-1a hash of the key. A Map is immutable; With and Without return a
// new Map that shares everything but the path to the leaf they touch: they
// copy two tables of 64 pointers and one leaf. With 30,000 keys a leaf holds
// about 7 entries, so a change costs the same at 100 keys as at 30,000.
//
// The map is unordered on purpose. ruleset keeps its own persistent
// structure, an ordered tree, because Diff and the renderers walk Services in
// name order; the trackers need no order and get O(1) changes from hashing.
package cowmap

import "k8s.io/apimachinery/pkg/types"

const (
	fanout     = 64
	leafCount  = fanout * fanout
	leafBits   = 6
	leafMask   = fanout - 1
	hashOffset = 2166136261
	hashPrime  = 16777619
)

type (
	// A leaf is behind a pointer so that Diff can tell a shared leaf from
	// a copied one.
	leaf[V any]  struct{ m map[types.NamespacedName]V }
	inner[V any] [fanout]*leaf[V]
	table[V any] [fanout]*inner[V]
)

// Map is an immutable map from types.NamespacedName to V. The zero Map is
// empty and ready to use.
type Map[V any] struct {
	root   *table[V]
	length int
}

// Len is the number of keys.
func (m Map[V]) Len() int { return m.length }

// Get returns the value for key and whether it is present.
func (m Map[V]) Get(key types.NamespacedName) (V, bool) {
	var zero V
	if m.root == nil {
		return zero, false
	}
	i := leafOf(key)
	in := m.root[i>>leafBits]
	if in == nil {
		return zero, false
	}
	l := in[i&leafMask]
	if l == nil {
		return zero, false
	}
	v, ok := l.m[key]
	return v, ok
}

// With returns a Map in which key maps to v.
func (m Map[V]) With(key types.NamespacedName, v V) Map[V] {
	n, l := m.copyPath(leafOf(key))
	if _, existed := l.m[key]; !existed {
		n.length++
	}
	l.m[key] = v
	return n
}

// Without returns a Map without key.
func (m Map[V]) Without(key types.NamespacedName) Map[V] {
	if _, ok := m.Get(key); !ok {
		return m
	}
	n, l := m.copyPath(leafOf(key))
	delete(l.m, key)
	n.length--
	return n
}

// All calls yield for every entry, in no particular order, until yield
// returns false.
func (m Map[V]) All(yield func(types.NamespacedName, V) bool) {
	if m.root == nil {
		return
	}
	for _, in := range m.root {
		if in == nil {
			continue
		}
		for _, l := range in {
			if l == nil {
				continue
			}
			for k, v := range l.m {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Diff calls changed for every key of m or o that may map to different
// values in the two: the keys of every leaf that the two Maps do not share.
// The value is the zero V where a key is missing. Between a Map and one made
// from it by k calls of With and Without, Diff visits O(k) leaves, about
// seven keys each at 30,000 keys; between unrelated Maps it visits all.
func (m Map[V]) Diff(o Map[V], changed func(key types.NamespacedName, before, after V)) {
	if m.root == o.root {
		return
	}
	var none table[V]
	mr, or := m.root, o.root
	if mr == nil {
		mr = &none
	}
	if or == nil {
		or = &none
	}
	for t := range fanout {
		mi, oi := mr[t], or[t]
		if mi == oi {
			continue
		}
		for l := range fanout {
			var ml, ol *leaf[V]
			if mi != nil {
				ml = mi[l]
			}
			if oi != nil {
				ol = oi[l]
			}
			if ml != ol {
				diffLeaves(ml, ol, changed)
			}
		}
	}
}

// diffLeaves calls changed for every key of before and after (either may be
// nil).
func diffLeaves[V any](before, after *leaf[V], changed func(key types.NamespacedName, before, after V)) {
	var zero V
	if before != nil {
		for k, b := range before.m {
			a := zero
			if after != nil {
				a = after.m[k]
			}
			changed(k, b, a)
		}
	}
	if after != nil {
		for k, a := range after.m {
			if before != nil {
				if _, ok := before.m[k]; ok {
					continue
				}
			}
			changed(k, zero, a)
		}
	}
}

// copyPath returns a Map sharing all of m but the path to leaf i: the root
// table, leaf i's inner table and leaf i itself are copies, and the leaf is
// returned for the caller to modify.
func (m Map[V]) copyPath(i uint16) (Map[V], *leaf[V]) {
	root := new(table[V])
	if m.root != nil {
		*root = *m.root
	}
	in := new(inner[V])
	if old := root[i>>leafBits]; old != nil {
		*in = *old
	}
	root[i>>leafBits] = in
	l := &leaf[V]{}
	if old := in[i&leafMask]; old != nil {
		l.m = make(map[types.NamespacedName]V, len(old.m)+1)
		for k, v := range old.m {
			l.m[k] = v
		}
	} else {
		l.m = make(map[types.NamespacedName]V, 1)
	}
	in[i&leafMask] = l
	return Map[V]{root: root, length: m.length}, l
}

// leafOf is the leaf of key: 12 bits of its FNV-1a hash.
func leafOf(key types.NamespacedName) uint16 {
	h := uint32(hashOffset)
	for i := 0; i < len(key.Namespace); i++ {
		h = (h ^ uint32(key.Namespace[i])) * hashPrime
	}
	h = (h ^ '/') * hashPrime
	for i := 0; i < len(key.Name); i++ {
		h = (h ^ uint32(key.Name[i])) * hashPrime
	}
	return uint16((h ^ h>>12 ^ h>>24) % leafCount)
}
