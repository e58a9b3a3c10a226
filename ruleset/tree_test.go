package ruleset

import (
	"cmp"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

type intKey int

func (a intKey) Compare(b intKey) int { return cmp.Compare(a, b) }

// intEntry is a tree entry: a key and a value.
type intEntry struct {
	k intKey
	v int
}

func (e intEntry) key() intKey { return e.k }

// Property: the persistent tree behaves as a map, stays balanced and
// ordered, and every earlier version stays as it was.
func TestPropTree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		initial := rapid.SliceOfDistinct(rapid.IntRange(0, 200), rapid.ID[int]).Draw(t, "initial")
		slices.Sort(initial)
		entries := make([]intEntry, len(initial))
		model := map[intKey]int{}
		for i, k := range initial {
			entries[i] = intEntry{intKey(k), -k}
			model[intKey(k)] = -k
		}
		tr := treeFromSorted(entries)
		type version struct {
			tr    tree[intKey, intEntry]
			model map[intKey]int
		}
		versions := []version{{tr, maps.Clone(model)}}
		for i := range rapid.IntRange(0, 100).Draw(t, "ops") {
			k := intKey(rapid.IntRange(0, 220).Draw(t, "key"))
			if rapid.Bool().Draw(t, "insert") {
				tr = tr.with(intEntry{k, i})
				model[k] = i
			} else {
				tr = tr.without(k)
				delete(model, k)
			}
			versions = append(versions, version{tr, maps.Clone(model)})
		}
		for i, v := range versions {
			if err := checkTree(v.tr.root, v.tr.len, func(intEntry) error { return nil }); err != nil {
				t.Fatalf("version %d: %v", i, err)
			}
			got := map[intKey]int{}
			v.tr.all(func(e intEntry) bool {
				got[e.k] = e.v
				return true
			})
			if !maps.Equal(got, v.model) {
				t.Fatalf("version %d holds %v, want %v", i, got, v.model)
			}
			for k := range intKey(222) {
				e, ok := v.tr.get(k)
				val := e.v
				want, wantOK := v.model[k]
				if ok != wantOK || val != want || (ok && e.k != k) {
					t.Fatalf("version %d: get(%d) = %d, %v; want %d, %v", i, k, val, ok, want, wantOK)
				}
			}
		}
	})
}
