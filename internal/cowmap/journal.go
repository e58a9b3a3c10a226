package cowmap

import "k8s.io/apimachinery/pkg/types"

// Journal is the skeleton of a change tracker: a current Map, the Map of the
// last Commit, and the keys whose values differ between the two. A key set
// back to its committed value (an identical update, an add then a delete) is
// forgotten, as kube-proxy's change trackers forget it. The zero Journal is
// not ready: use NewJournal. A Journal is not safe for concurrent use.
type Journal[V any] struct {
	current, last Map[V]
	touched       map[types.NamespacedName]struct{}
	equal         func(a, b V) bool
}

// NewJournal returns an empty Journal whose values are compared with equal;
// a missing key has the zero V, so equal must treat it as it treats an
// empty value.
func NewJournal[V any](equal func(a, b V) bool) *Journal[V] {
	return &Journal[V]{touched: map[types.NamespacedName]struct{}{}, equal: equal}
}

// Current is the Map with every Set and Delete applied.
func (j *Journal[V]) Current() Map[V] { return j.current }

// Set makes key map to v.
func (j *Journal[V]) Set(key types.NamespacedName, v V) {
	j.current = j.current.With(key, v)
	j.touch(key, v)
}

// Delete removes key.
func (j *Journal[V]) Delete(key types.NamespacedName) {
	j.current = j.current.Without(key)
	var zero V
	j.touch(key, zero)
}

func (j *Journal[V]) touch(key types.NamespacedName, v V) {
	if last, _ := j.last.Get(key); j.equal(last, v) {
		delete(j.touched, key)
	} else {
		j.touched[key] = struct{}{}
	}
}

// Pending is the number of keys whose values differ from the last Commit's.
func (j *Journal[V]) Pending() int { return len(j.touched) }

// Commit calls changed with the committed and the current value of every key
// that differs (the zero V where a key is missing), in no particular order,
// then makes the current Map the committed one and returns it.
func (j *Journal[V]) Commit(changed func(key types.NamespacedName, before, after V)) Map[V] {
	for key := range j.touched {
		before, _ := j.last.Get(key)
		after, _ := j.current.Get(key)
		changed(key, before, after)
	}
	// A new map, not clear: clearing (and later ranging over) a map costs
	// its peak size, which an initial load makes as large as the cluster.
	j.touched = map[types.NamespacedName]struct{}{}
	j.last = j.current
	return j.current
}
