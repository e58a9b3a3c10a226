package cowmap

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// FromSorted returns the Map of keys[i] to vals[i], built bottom up in
// O(n) time (n calls of With take O(n log n), copying a path each). keys
// must be sorted by Compare, each once, and as long as vals; otherwise
// FromSorted falls back to With, one entry after the other (a later
// duplicate wins; missing values are the zero V).
func FromSorted[V any](keys []types.NamespacedName, vals []V) Map[V] {
	ordered := len(keys) == len(vals)
	for i := 1; ordered && i < len(keys); i++ {
		ordered = Compare(keys[i-1], keys[i]) < 0
	}
	if !ordered {
		var m Map[V]
		for i, k := range keys {
			var v V
			if i < len(vals) {
				v = vals[i]
			}
			m = m.With(k, v)
		}
		return m
	}
	if len(keys) == 0 {
		return Map[V]{}
	}
	var level []*node[V]
	for lo := 0; lo < len(keys); lo += maxNode {
		hi := min(lo+maxNode, len(keys))
		level = append(level, &node[V]{keys: slices.Clone(keys[lo:hi]), vals: slices.Clone(vals[lo:hi])})
	}
	for len(level) > 1 {
		var up []*node[V]
		for lo := 0; lo < len(level); lo += maxNode {
			hi := min(lo+maxNode, len(level))
			n := &node[V]{kids: slices.Clone(level[lo:hi])}
			for _, kid := range n.kids {
				n.keys = append(n.keys, kid.keys[0])
			}
			up = append(up, n)
		}
		level = up
	}
	return Map[V]{root: level[0], length: len(keys)}
}
