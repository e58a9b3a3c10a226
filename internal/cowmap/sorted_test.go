package cowmap

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// FromSorted equals the Map that With builds, for sizes around the node
// size and its powers; unsorted input falls back to With.
func TestFromSorted(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 1023, 1024, 1025, 40000} {
		var keys []types.NamespacedName
		var vals []int
		var want Map[int]
		for i := range n {
			k := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("k%06d", i)}
			keys, vals = append(keys, k), append(vals, i)
			want = want.With(k, i)
		}
		got := FromSorted(keys, vals)
		if got.Len() != n {
			t.Fatalf("n=%d: Len %d", n, got.Len())
		}
		want.Diff(got, func(k types.NamespacedName, before, after int) {
			if before != after {
				t.Fatalf("n=%d: %v: With %d, FromSorted %d", n, k, before, after)
			}
		})
		got = got.With(types.NamespacedName{Namespace: "ns", Name: "k000000x"}, -1).Without(types.NamespacedName{Namespace: "ns", Name: "k000001"})
		if v, ok := got.Get(types.NamespacedName{Namespace: "ns", Name: "k000000x"}); !ok || v != -1 {
			t.Fatalf("n=%d: With after FromSorted: %v %v", n, v, ok)
		}
	}
	unsorted := FromSorted([]types.NamespacedName{{Name: "b"}, {Name: "a"}, {Name: "b"}}, []int{1, 2, 3})
	if v, _ := unsorted.Get(types.NamespacedName{Name: "b"}); unsorted.Len() != 2 || v != 3 {
		t.Fatalf("unsorted: Len %d, b=%d", unsorted.Len(), v)
	}
}
