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
	leaf[V any]  map[types.NamespacedName]V
	inner[V any] [fanout]leaf[V]
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
	v, ok := in[i&leafMask][key]
	return v, ok
}

// With returns a Map in which key maps to v.
func (m Map[V]) With(key types.NamespacedName, v V) Map[V] {
	n, l := m.copyPath(leafOf(key))
	if _, existed := l[key]; !existed {
		n.length++
	}
	l[key] = v
	return n
}

// Without returns a Map without key.
func (m Map[V]) Without(key types.NamespacedName) Map[V] {
	if _, ok := m.Get(key); !ok {
		return m
	}
	n, l := m.copyPath(leafOf(key))
	delete(l, key)
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
			for k, v := range l {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// copyPath returns a Map sharing all of m but the path to leaf i: the root
// table, leaf i's inner table and leaf i itself are copies, and the leaf is
// returned for the caller to modify.
func (m Map[V]) copyPath(i uint16) (Map[V], leaf[V]) {
	root := new(table[V])
	if m.root != nil {
		*root = *m.root
	}
	in := new(inner[V])
	if old := root[i>>leafBits]; old != nil {
		*in = *old
	}
	root[i>>leafBits] = in
	old := in[i&leafMask]
	l := make(leaf[V], len(old)+1)
	for k, v := range old {
		l[k] = v
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
