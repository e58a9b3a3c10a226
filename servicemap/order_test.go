package servicemap

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/internal/parallel"
)

// Property: serviceOrder sorts keys by namespace, then name, in any number
// of ranges, for names and namespaces over a small alphabet with the zero
// byte, sharing long beginnings (so that order keys tie and the common
// beginning is long), of any length (some longer than an order key holds).
func TestPropServiceOrder(t *testing.T) {
	runes := rapid.SampledFrom([]rune{0, 'a', 'b', 0x7f})
	namespace := rapid.Custom(func(t *rapid.T) string {
		return rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'b'}), 0, 2, -1).Draw(t, "ns") +
			rapid.SampledFrom([]string{"", "team-namespace-"}).Draw(t, "nsMore")
	})
	rapid.Check(t, func(t *rapid.T) {
		common := rapid.StringOfN(runes, 0, 12, -1).Draw(t, "common")
		rest := rapid.StringOfN(runes, 0, 9, -1)
		seen := map[types.NamespacedName]bool{}
		var keys []types.NamespacedName
		for range rapid.IntRange(0, 300).Draw(t, "n") {
			k := types.NamespacedName{Namespace: namespace.Draw(t, "namespace"), Name: common + rest.Draw(t, "name")}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		want := slices.SortedFunc(slices.Values(keys), func(a, b types.NamespacedName) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		for _, k := range []int{1, 2, 3, 7} {
			order, l := serviceOrderIn(keys, parallel.Split(len(keys), k))
			var got []types.NamespacedName
			for _, o := range order {
				got = append(got, keys[l.index(o)])
			}
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Fatalf("%d ranges (-want +got):\n%s", k, diff)
			}
		}
	})
}
