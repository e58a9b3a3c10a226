package cowmap

// Journal is the skeleton of a change tracker: a current Map, the Map of the
// last Commit, and the keys whose values differ between the two. A key set
// back to its committed value (an identical update, an add then a delete) is
// forgotten, as kube-proxy's change trackers forget it. The zero Journal is
// not ready: use NewJournal. A Journal is not safe for concurrent use; the
// Maps it returns are immutable, as every Map is.
type Journal[K interface {
	comparable
	Key[K]
}, V any] struct {
	current, last Map[K, V]
	touched       map[K]struct{}
	equal         func(a, b V) bool
}

// NewJournal returns an empty Journal whose values are compared with equal;
// a missing key has the zero V, so equal must treat it as it treats an
// empty value.
func NewJournal[K interface {
	comparable
	Key[K]
}, V any](equal func(a, b V) bool) *Journal[K, V] {
	return &Journal[K, V]{touched: map[K]struct{}{}, equal: equal}
}

// Current is the Map with every Set and Delete applied.
func (j *Journal[K, V]) Current() Map[K, V] { return j.current }

// Set makes key map to v.
func (j *Journal[K, V]) Set(key K, v V) {
	j.current = j.current.With(key, v)
	j.touch(key, v)
}

// Delete removes key.
func (j *Journal[K, V]) Delete(key K) {
	j.current = j.current.Without(key)
	var zero V
	j.touch(key, zero)
}

func (j *Journal[K, V]) touch(key K, v V) {
	if last, _ := j.last.Get(key); j.equal(last, v) {
		delete(j.touched, key)
	} else {
		j.touched[key] = struct{}{}
	}
}

// Pending is the number of keys whose values differ from the last Commit's.
func (j *Journal[K, V]) Pending() int { return len(j.touched) }

// Commit calls changed with the committed and the current value of every key
// that differs (the zero V where a key is missing), in no particular order,
// then makes the current Map the committed one and returns it.
func (j *Journal[K, V]) Commit(changed func(key K, before, after V)) Map[K, V] {
	for key := range j.touched {
		before, _ := j.last.Get(key)
		after, _ := j.current.Get(key)
		changed(key, before, after)
	}
	// A new map, not clear: clearing (and later ranging over) a map costs
	// its peak size, which an initial load makes as large as the cluster.
	j.touched = map[K]struct{}{}
	j.last = j.current
	return j.current
}
