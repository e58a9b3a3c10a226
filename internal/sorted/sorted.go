// Package sorted walks two lists sorted by the same order side by side: the
// merge step that diffs of snapshots, Rulesets and frontend lists share.
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
