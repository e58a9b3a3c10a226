package sorted_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/internal/sorted"
)

func walk(a, b []int) (onlyA, onlyB, both []int) {
	sorted.Walk(a, b, cmp.Compare[int],
		func(x int) { onlyA = append(onlyA, x) },
		func(y int) { onlyB = append(onlyB, y) },
		func(x, y int) {
			if x != y {
				panic(fmt.Sprintf("both(%d, %d)", x, y))
			}
			both = append(both, x)
		})
	return onlyA, onlyB, both
}

func TestWalk(t *testing.T) {
	tests := []struct {
		a, b               []int
		onlyA, onlyB, both []int
	}{
		{nil, nil, nil, nil, nil},
		{[]int{1, 2}, nil, []int{1, 2}, nil, nil},
		{nil, []int{1, 2}, nil, []int{1, 2}, nil},
		{[]int{1, 3, 5}, []int{2, 3, 6}, []int{1, 5}, []int{2, 6}, []int{3}},
		{[]int{1, 2, 3}, []int{1, 2, 3}, nil, nil, []int{1, 2, 3}},
	}
	for _, tt := range tests {
		onlyA, onlyB, both := walk(tt.a, tt.b)
		if diff := gocmp.Diff([][]int{tt.onlyA, tt.onlyB, tt.both}, [][]int{onlyA, onlyB, both}); diff != "" {
			t.Errorf("Walk(%v, %v) (-want +got):\n%s", tt.a, tt.b, diff)
		}
	}
}

// Every element of either list is visited exactly once, in its set.
func TestWalkProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.SliceOfDistinct(rapid.IntRange(0, 50), rapid.ID[int])
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		slices.Sort(a)
		slices.Sort(b)
		onlyA, onlyB, both := walk(a, b)
		for _, x := range onlyA {
			if slices.Contains(b, x) {
				t.Fatalf("%d only in a, but b has it", x)
			}
		}
		for _, y := range onlyB {
			if slices.Contains(a, y) {
				t.Fatalf("%d only in b, but a has it", y)
			}
		}
		for _, x := range both {
			if !slices.Contains(a, x) || !slices.Contains(b, x) {
				t.Fatalf("%d in both, but one lacks it", x)
			}
		}
		if len(onlyA)+len(both) != len(a) || len(onlyB)+len(both) != len(b) {
			t.Fatalf("visited %d+%d+%d for lists of %d and %d", len(onlyA), len(onlyB), len(both), len(a), len(b))
		}
		for _, l := range [][]int{onlyA, onlyB, both} {
			if !slices.IsSorted(l) {
				t.Fatalf("not visited in order: %v", l)
			}
		}
	})
}

// TestMerge: the merge of two sorted lists is their concatenation sorted
// stably (a's equal elements first), and an empty side returns the other.
func TestMerge(t *testing.T) {
	type pair struct{ key, from int }
	byKey := func(x, y pair) int { return cmp.Compare(x.key, y.key) }
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.SliceOf(rapid.IntRange(0, 20))
		var a, b []pair
		for _, k := range gen.Draw(t, "a") {
			a = append(a, pair{k, 0})
		}
		for _, k := range gen.Draw(t, "b") {
			b = append(b, pair{k, 1})
		}
		slices.SortFunc(a, byKey)
		slices.SortFunc(b, byKey)
		want := slices.Concat(a, b)
		slices.SortStableFunc(want, byKey)
		if got := sorted.Merge(a, b, byKey); !slices.Equal(got, want) {
			t.Fatalf("Merge(%v, %v) = %v, want %v", a, b, got, want)
		}
	})
}
