// Package parallel splits work over a range of indices between goroutines,
// one per processor the Go runtime may use (runtime.GOMAXPROCS), for the
// pure packages whose whole-cluster computations (a Build, a first sync's
// render) are linear in the number of Services.
//
// The split depends on GOMAXPROCS, so callers must produce the same result
// for every split: each range writes only its own part of the result, and
// the caller joins the parts in range order.
package parallel

import (
	"runtime"
	"sync"
)

// Ranges returns the ranges [lo, hi) that Run splits [0, n) into: as many
// as there are processors, but none shorter than minLen (one range when n
// < 2·minLen), contiguous, in order, their lengths differing by at most
// one.
func Ranges(n, minLen int) [][2]int {
	k := min(runtime.GOMAXPROCS(0), n/max(minLen, 1))
	return Split(n, max(k, 1))
}

// Split divides [0, n) into k ≥ 1 contiguous ranges, in order, whose
// lengths differ by at most one (some are empty when k > n).
func Split(n, k int) [][2]int {
	out := make([][2]int, k)
	lo := 0
	for i := range k {
		hi := lo + n/k
		if i < n%k {
			hi++
		}
		out[i] = [2]int{lo, hi}
		lo = hi
	}
	return out
}

// Run calls f(i, lo, hi) for each range i of ranges (from Ranges), the
// first in the calling goroutine and each other in a goroutine of its own,
// and returns when all have returned. A panic in f is raised again in the
// calling goroutine (the first range's panic first), after every call
// has ended.
func Run(ranges [][2]int, f func(i, lo, hi int)) {
	if len(ranges) == 1 {
		f(0, ranges[0][0], ranges[0][1])
		return
	}
	panics := make([]any, len(ranges))
	call := func(i int) {
		defer func() { panics[i] = recover() }()
		f(i, ranges[i][0], ranges[i][1])
	}
	var wg sync.WaitGroup
	for i := 1; i < len(ranges); i++ {
		wg.Go(func() { call(i) })
	}
	call(0)
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
}
