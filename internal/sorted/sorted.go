// Package sorted walks two lists sorted by the same order side by side: the
// merge step that diffs of snapshots, Rulesets and frontend lists share, and
// that joins lists sorted apart (on several goroutines).
package sorted

// Walk visits the union of a and b, both sorted by cmp with each key at most
// once, in order: onlyA is called for an element of a that b lacks, onlyB for
// an element of b that a lacks, and both for a pair of equal keys. It takes
// O(len(a) + len(b)) comparisons.
func Walk[T any](a, b []T, cmp func(x, y T) int, onlyA, onlyB func(T), both func(x, y T)) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && cmp(a[i], b[j]) < 0):
			onlyA(a[i])
			i++
		case i == len(a) || cmp(a[i], b[j]) > 0:
			onlyB(b[j])
			j++
		default:
			both(a[i], b[j])
			i++
			j++
		}
	}
}

// Merge returns the elements of a and b, both sorted by cmp, in one sorted
// list; of equal elements, a's come first. It returns a or b itself when
// the other is empty, else a new slice.
func Merge[T any](a, b []T, cmp func(x, y T) int) []T {
	switch {
	case len(a) == 0:
		return b
	case len(b) == 0:
		return a
	}
	out := make([]T, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if cmp(b[0], a[0]) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}
