package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{0, 1}, {1, 1}, {5, 2}, {10, 2}, {7, 3}, {10000, 4}} {
		rs := Split(tc.n, tc.k)
		if len(rs) != tc.k {
			t.Fatalf("Split(%d, %d): %d ranges", tc.n, tc.k, len(rs))
		}
		lo := 0
		for _, r := range rs {
			if r[0] != lo || r[1] < r[0] {
				t.Fatalf("Split(%d, %d) = %v: not contiguous", tc.n, tc.k, rs)
			}
			if d := (r[1] - r[0]) - tc.n/tc.k; d < 0 || d > 1 {
				t.Fatalf("Split(%d, %d) = %v: uneven", tc.n, tc.k, rs)
			}
			lo = r[1]
		}
		if lo != tc.n {
			t.Fatalf("Split(%d, %d) = %v: ends at %d", tc.n, tc.k, rs, lo)
		}
	}
}

func TestRanges(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	for _, tc := range []struct{ n, minLen, want int }{
		{0, 10, 1},
		{19, 10, 1},
		{10 * procs, 10, procs},
		{1000 * procs, 10, procs},
		{5, 0, min(5, procs)},
	} {
		if got := len(Ranges(tc.n, tc.minLen)); got != max(tc.want, 1) {
			t.Errorf("Ranges(%d, %d): %d ranges, want %d", tc.n, tc.minLen, got, tc.want)
		}
	}
}

func TestRunCallsEachRangeOnce(t *testing.T) {
	const n = 1000
	var seen [n]atomic.Int32
	rs := Split(n, 4)
	Run(rs, func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			seen[j].Add(1)
		}
	})
	for j := range seen {
		if c := seen[j].Load(); c != 1 {
			t.Fatalf("index %d: %d calls", j, c)
		}
	}
}

func TestRunRaisesPanicInCaller(t *testing.T) {
	for _, k := range []int{1, 3} {
		var ended atomic.Int32
		func() {
			defer func() {
				if p := recover(); p != "range 2" && !(k == 1 && p == "range 0") {
					t.Errorf("%d ranges: recovered %v", k, p)
				}
			}()
			Run(Split(30, k), func(i, _, _ int) {
				defer ended.Add(1)
				if i == k-1 {
					panic("range " + string(rune('0'+i)))
				}
			})
		}()
		if int(ended.Load()) != k {
			t.Errorf("%d ranges: %d calls ended before the panic was raised", k, ended.Load())
		}
	}
}
