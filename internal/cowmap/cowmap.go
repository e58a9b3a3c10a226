// Package cowmap is a copy-on-write map keyed by namespace and name, and the
// Journal that the trackers of servicemap and endpoints are built on. Taking
// an immutable snapshot after a change costs time proportional to the change,
// not to the size of the map.
//
// Entries live in 4,096 leaves (small arrays of entries, each with its key's
// hash) in a two-level table of 64 × 64, chosen by an FNV-1a hash of the
// key. A Map is immutable; With and Without return a new Map that shares
// everything but the path to the leaf they touch: they copy the root table
// of 64 pointers, one inner table of 64 leaves and one leaf. With 30,000
// keys a leaf holds about 7 entries, so a change costs the same at 100 keys
// as at 30,000.
//
// The map is unordered on purpose. ruleset keeps its own persistent
// structure, an ordered tree, because Diff and the renderers walk Services in
// name order; the trackers need no order and get O(1) changes from hashing.
package cowmap

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

const (
	fanout     = 64
	leafCount  = fanout * fanout
	leafBits   = 6
	leafMask   = fanout - 1
	hashOffset = 2166136261
	hashPrime  = 16777619
)

type (
	// A leaf is a slice of entries in no order, replaced (never changed)
	// by a change: Diff tells a shared leaf from a copied one by the
	// address of its first entry. A slice rather than a Go map: a leaf
	// holds a few entries, and a lookup then reads one array, skipping
	// the entries of other hashes without reading their keys.
	leaf[V any]  []entry[V]
	inner[V any] [fanout]leaf[V]
	table[V any] [fanout]*inner[V]
)

type entry[V any] struct {
	hash uint32 // the key's hash, of which the leaf index is 12 bits
	key  types.NamespacedName
	val  V
}

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
	h := hashOf(key)
	i := leafOf(h)
	in := m.root[i>>leafBits]
	if in == nil {
		return zero, false
	}
	l := in[i&leafMask]
	if j := l.find(h, key); j >= 0 {
		return l[j].val, true
	}
	return zero, false
}

// find returns the index of key, whose hash is h, in l, or -1.
func (l leaf[V]) find(h uint32, key types.NamespacedName) int {
	for j := range l {
		if l[j].hash == h && l[j].key == key {
			return j
		}
	}
	return -1
}

// With returns a Map in which key maps to v.
func (m Map[V]) With(key types.NamespacedName, v V) Map[V] {
	h := hashOf(key)
	n, in, i := m.copyPath(leafOf(h))
	old := in[i]
	j := old.find(h, key)
	var l leaf[V]
	if j >= 0 {
		l = slices.Clone(old)
		l[j].val = v
	} else {
		l = append(make(leaf[V], 0, len(old)+1), old...)
		l = append(l, entry[V]{h, key, v})
		n.length++
	}
	in[i] = l
	return n
}

// Without returns a Map without key.
func (m Map[V]) Without(key types.NamespacedName) Map[V] {
	if _, ok := m.Get(key); !ok {
		return m
	}
	h := hashOf(key)
	n, in, i := m.copyPath(leafOf(h))
	old := in[i]
	j := old.find(h, key)
	var l leaf[V]
	if len(old) > 1 {
		l = slices.Concat(old[:j], old[j+1:])
	}
	in[i] = l
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
			for j := range l {
				if !yield(l[j].key, l[j].val) {
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
			var ml, ol leaf[V]
			if mi != nil {
				ml = mi[l]
			}
			if oi != nil {
				ol = oi[l]
			}
			if !same(ml, ol) {
				diffLeaves(ml, ol, changed)
			}
		}
	}
}

// same reports whether a and b are one leaf (or both empty).
func same[V any](a, b leaf[V]) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// diffLeaves calls changed for every key of before and after.
func diffLeaves[V any](before, after leaf[V], changed func(key types.NamespacedName, before, after V)) {
	var zero V
	for _, b := range before {
		a := zero
		if j := after.find(b.hash, b.key); j >= 0 {
			a = after[j].val
		}
		changed(b.key, b.val, a)
	}
	for _, a := range after {
		if before.find(a.hash, a.key) < 0 {
			changed(a.key, zero, a.val)
		}
	}
}

// copyPath returns a Map sharing all of m but the path to leaf i: the root
// table and leaf i's inner table are copies, returned with the index of the
// leaf in it for the caller to replace.
func (m Map[V]) copyPath(i uint16) (Map[V], *inner[V], uint16) {
	root := new(table[V])
	if m.root != nil {
		*root = *m.root
	}
	in := new(inner[V])
	if old := root[i>>leafBits]; old != nil {
		*in = *old
	}
	root[i>>leafBits] = in
	return Map[V]{root: root, length: m.length}, in, i & leafMask
}

// hashOf is the FNV-1a hash of key.
func hashOf(key types.NamespacedName) uint32 {
	h := uint32(hashOffset)
	for i := 0; i < len(key.Namespace); i++ {
		h = (h ^ uint32(key.Namespace[i])) * hashPrime
	}
	h = (h ^ '/') * hashPrime
	for i := 0; i < len(key.Name); i++ {
		h = (h ^ uint32(key.Name[i])) * hashPrime
	}
	return h
}

// leafOf is the leaf of a key whose hash is h: 12 bits of it.
func leafOf(h uint32) uint16 {
	return uint16((h ^ h>>12 ^ h>>24) % leafCount)
}
