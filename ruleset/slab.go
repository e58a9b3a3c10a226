package ruleset

import "net/netip"

// slabLen is the number of elements of each array that slabs cut slices
// from.
const slabLen = 1024

// slabs cut the targets and Serving slices of the Services of one Build
// range from a few shared arrays, rather than allocating each on its own.
// Each slice is capped, so that an append to it copies instead of writing
// into its neighbour's. A nil *slabs allocates each slice on its own.
type slabs struct {
	targets []Target
	serving []netip.AddrPort
}

// targetsOf returns n zero Targets.
func (a *slabs) targetsOf(n int) []Target {
	if a == nil {
		return make([]Target, n)
	}
	return take(&a.targets, n)
}

// servingOf returns an empty slice with room for n addresses and ports.
func (a *slabs) servingOf(n int) []netip.AddrPort {
	if a == nil {
		return make([]netip.AddrPort, 0, n)
	}
	return take(&a.serving, n)[:0]
}

// take cuts n zero elements off the front of *slab, first replacing it
// with a new array of at least slabLen elements when it has fewer than n.
func take[T any](slab *[]T, n int) []T {
	if n > len(*slab) {
		*slab = make([]T, max(n, slabLen))
	}
	s := (*slab)[:n:n]
	*slab = (*slab)[n:]
	return s
}
