package ruleset

import "github.com/svcproxy/svcproxy/topology"

// slabLen is the most elements of an array that slabs cut slices from,
// unless one slice needs more.
const slabLen = 1024

// slabs cut the targets of the Services of one Build range from a few
// shared arrays, rather than allocating each on its own, and hold the
// range's scratch. Each slice is capped, so that an append to it copies
// instead of writing into its neighbour's. A nil *slabs allocates each
// slice on its own.
type slabs struct {
	targets []Target
	// left is the number of Services still to be built, this one
	// included: a new array has room for that many slices like this
	// one's, up to slabLen elements, so that a small Build allocates
	// little more than it uses.
	left int
	// marks is scratch for the Service being built: the Membership of
	// each of its endpoints. Each Service reuses it.
	marks []topology.Membership
}

// marksOf returns n Memberships to overwrite, valid until the next call.
func (a *slabs) marksOf(n int) []topology.Membership {
	if a == nil {
		return make([]topology.Membership, n)
	}
	if cap(a.marks) < n {
		a.marks = make([]topology.Membership, max(n, 64))
	}
	return a.marks[:n]
}

// targetsOf returns n zero Targets.
func (a *slabs) targetsOf(n int) []Target {
	if a == nil {
		return make([]Target, n)
	}
	return take(&a.targets, n, a.left)
}

// take cuts n zero elements off the front of *slab, first replacing it
// with a new array when it has fewer than n: of n·left elements, but no
// more than slabLen unless n is.
func take[T any](slab *[]T, n, left int) []T {
	if n > len(*slab) {
		*slab = make([]T, max(n, min(n*left, slabLen)))
	}
	s := (*slab)[:n:n]
	*slab = (*slab)[n:]
	return s
}
