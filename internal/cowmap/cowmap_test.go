package cowmap

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"
)

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// contents lists every entry of m, checking that All visits each key once.
func contents[V any](t interface {
	Helper()
	Fatalf(string, ...any)
}, m Map[V]) map[types.NamespacedName]V {
	t.Helper()
	out := map[types.NamespacedName]V{}
	m.All(func(k types.NamespacedName, v V) bool {
		if _, dup := out[k]; dup {
			t.Fatalf("All visits %v twice", k)
		}
		out[k] = v
		return true
	})
	return out
}

func TestZeroMap(t *testing.T) {
	var m Map[int]
	if m.Len() != 0 {
		t.Errorf("Len = %d", m.Len())
	}
	if v, ok := m.Get(key("a", "b")); ok || v != 0 {
		t.Errorf("Get = %v, %v", v, ok)
	}
	m.All(func(types.NamespacedName, int) bool { t.Error("All visits an entry of the zero Map"); return true })
	if n := m.Without(key("a", "b")); n.Len() != 0 {
		t.Errorf("Without on zero Map: Len = %d", n.Len())
	}
}

func TestWithWithoutGet(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  func(Map[string]) Map[string]
		want map[types.NamespacedName]string
	}{{
		name: "add",
		ops:  func(m Map[string]) Map[string] { return m.With(key("ns", "a"), "1").With(key("ns", "b"), "2") },
		want: map[types.NamespacedName]string{key("ns", "a"): "1", key("ns", "b"): "2"},
	}, {
		name: "replace keeps Len",
		ops:  func(m Map[string]) Map[string] { return m.With(key("ns", "a"), "1").With(key("ns", "a"), "2") },
		want: map[types.NamespacedName]string{key("ns", "a"): "2"},
	}, {
		name: "remove",
		ops: func(m Map[string]) Map[string] {
			return m.With(key("ns", "a"), "1").With(key("ns", "b"), "2").Without(key("ns", "a"))
		},
		want: map[types.NamespacedName]string{key("ns", "b"): "2"},
	}, {
		name: "remove missing is a no-op",
		ops: func(m Map[string]) Map[string] {
			return m.With(key("ns", "a"), "1").Without(key("ns", "zz")).Without(key("ns", "zz"))
		},
		want: map[types.NamespacedName]string{key("ns", "a"): "1"},
	}, {
		name: "remove everything",
		ops:  func(m Map[string]) Map[string] { return m.With(key("ns", "a"), "1").Without(key("ns", "a")) },
		want: map[types.NamespacedName]string{},
	}, {
		name: "namespace and name are not concatenated",
		ops: func(m Map[string]) Map[string] {
			return m.With(key("ab", "c"), "1").With(key("a", "bc"), "2").With(key("a/b", "c"), "3").With(key("a", "b/c"), "4")
		},
		want: map[types.NamespacedName]string{key("ab", "c"): "1", key("a", "bc"): "2", key("a/b", "c"): "3", key("a", "b/c"): "4"},
	}, {
		name: "empty key",
		ops:  func(m Map[string]) Map[string] { return m.With(key("", ""), "e") },
		want: map[types.NamespacedName]string{key("", ""): "e"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.ops(Map[string]{})
			if m.Len() != len(tc.want) {
				t.Errorf("Len = %d, want %d", m.Len(), len(tc.want))
			}
			if diff := cmp.Diff(tc.want, contents(t, m)); diff != "" {
				t.Errorf("All (-want +got):\n%s", diff)
			}
			for k, v := range tc.want {
				if got, ok := m.Get(k); !ok || got != v {
					t.Errorf("Get(%v) = %q, %v; want %q", k, got, ok, v)
				}
			}
		})
	}
}

func TestPersistence(t *testing.T) {
	const n = 2000
	versions := []Map[int]{{}}
	for i := range n {
		versions = append(versions, versions[len(versions)-1].With(key(fmt.Sprintf("ns%d", i%7), fmt.Sprintf("svc-%d", i)), i))
	}
	// Replace and delete from the full map; every older version must stay.
	full := versions[n]
	replaced := full.With(key("ns0", "svc-0"), -1)
	removed := full.Without(key("ns1", "svc-1"))
	for i, m := range versions {
		if m.Len() != i {
			t.Fatalf("version %d: Len = %d", i, m.Len())
		}
		if i%50 != 0 && i != n {
			continue // enumerate a sample: every version costs O(n)
		}
		if got := len(contents(t, m)); got != i {
			t.Fatalf("version %d holds %d entries", i, got)
		}
	}
	for i := range n {
		k := key(fmt.Sprintf("ns%d", i%7), fmt.Sprintf("svc-%d", i))
		if v, ok := full.Get(k); !ok || v != i {
			t.Fatalf("full.Get(%v) = %d, %v", k, v, ok)
		}
		if _, ok := versions[i].Get(k); ok {
			t.Fatalf("version %d already holds %v", i, k)
		}
		if v, ok := versions[i+1].Get(k); !ok || v != i {
			t.Fatalf("version %d: Get(%v) = %d, %v", i+1, k, v, ok)
		}
	}
	if v, _ := replaced.Get(key("ns0", "svc-0")); v != -1 {
		t.Errorf("replaced value = %d", v)
	}
	if v, _ := full.Get(key("ns0", "svc-0")); v != 0 {
		t.Errorf("With changed the map it was called on: %d", v)
	}
	if replaced.Len() != n || removed.Len() != n-1 || full.Len() != n {
		t.Errorf("Len: replaced %d, removed %d, full %d", replaced.Len(), removed.Len(), full.Len())
	}
	if _, ok := full.Get(key("ns1", "svc-1")); !ok {
		t.Errorf("Without changed the map it was called on")
	}
	if _, ok := removed.Get(key("ns1", "svc-1")); ok {
		t.Errorf("Without did not remove")
	}
}

// checkTree checks the B+tree invariants of m: every leaf at one depth,
// no node empty or over maxNode, keys sorted, an inner node's keys its
// children's least keys, and Len the number of entries.
func checkTree[V any](t interface {
	Helper()
	Fatalf(string, ...any)
}, m Map[V]) {
	t.Helper()
	if m.root == nil {
		if m.length != 0 {
			t.Fatalf("empty tree, Len %d", m.length)
		}
		return
	}
	leafDepth, count := -1, 0
	var walk func(n *node[V], depth int)
	walk = func(n *node[V], depth int) {
		if len(n.keys) == 0 || len(n.keys) > maxNode {
			t.Fatalf("node with %d keys", len(n.keys))
		}
		if !slices.IsSortedFunc(n.keys, Compare) || len(slices.CompactFunc(slices.Clone(n.keys), func(a, b types.NamespacedName) bool { return a == b })) != len(n.keys) {
			t.Fatalf("keys not sorted and distinct: %v", n.keys)
		}
		if n.kids == nil {
			if len(n.vals) != len(n.keys) {
				t.Fatalf("leaf with %d keys and %d values", len(n.keys), len(n.vals))
			}
			if leafDepth >= 0 && depth != leafDepth {
				t.Fatalf("leaves at depths %d and %d", leafDepth, depth)
			}
			leafDepth = depth
			count += len(n.keys)
			return
		}
		if len(n.kids) != len(n.keys) {
			t.Fatalf("inner node with %d keys and %d children", len(n.keys), len(n.kids))
		}
		for i, k := range n.kids {
			if k.keys[0] != n.keys[i] {
				t.Fatalf("child %d's least key %v, its parent says %v", i, k.keys[0], n.keys[i])
			}
			walk(k, depth+1)
		}
	}
	walk(m.root, 0)
	if count != m.length {
		t.Fatalf("Len %d, %d entries", m.length, count)
	}
}

// nodes are the nodes of the subtree n.
func nodes[V any](n *node[V]) map[*node[V]]bool {
	out := map[*node[V]]bool{}
	var walk func(n *node[V])
	walk = func(n *node[V]) {
		out[n] = true
		for _, k := range n.kids {
			walk(k)
		}
	}
	if n != nil {
		walk(n)
	}
	return out
}

// TestChangeCopiesOnePath checks that With and Without copy only the path
// to the leaf they change: at 30,000 keys, a replaced value copies one
// node per level and shares the others.
func TestChangeCopiesOnePath(t *testing.T) {
	var m Map[int]
	for i := range 30000 {
		m = m.With(key("ns", fmt.Sprintf("svc-%05d", i)), i)
	}
	checkTree(t, m)
	depth := 0
	for n := m.root; n.kids != nil; n = n.kids[0] {
		depth++
	}
	before := nodes(m.root)
	for _, next := range []Map[int]{
		m.With(key("ns", "svc-00042"), -1),
		m.Without(key("ns", "svc-00042")),
	} {
		checkTree(t, next)
		fresh := 0
		for n := range nodes(next.root) {
			if !before[n] {
				fresh++
			}
		}
		if fresh != depth+1 {
			t.Errorf("a change made %d new nodes, want %d (one per level)", fresh, depth+1)
		}
	}
}

// TestAllInOrder checks that All and AllFrom yield in key order, AllFrom
// from the first key not below its start, present or not.
func TestAllInOrder(t *testing.T) {
	var m Map[int]
	var keys []types.NamespacedName
	for i := range 2000 {
		k := key(fmt.Sprintf("ns-%d", i%7), fmt.Sprintf("svc-%d", i))
		keys = append(keys, k)
		m = m.With(k, i)
	}
	slices.SortFunc(keys, Compare)
	collect := func(from *types.NamespacedName) []types.NamespacedName {
		var got []types.NamespacedName
		yield := func(k types.NamespacedName, _ int) bool { got = append(got, k); return true }
		if from == nil {
			m.All(yield)
		} else {
			m.AllFrom(*from, yield)
		}
		return got
	}
	if diff := cmp.Diff(keys, collect(nil)); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		from types.NamespacedName
		want []types.NamespacedName
	}{
		{keys[0], keys},
		{key("", ""), keys},
		{keys[700], keys[700:]},
		{key(keys[700].Namespace, keys[700].Name+"!"), keys[701:]},
		{keys[len(keys)-1], keys[len(keys)-1:]},
		{key("ot", ""), nil},
	} {
		if diff := cmp.Diff(tc.want, collect(&tc.from), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("AllFrom(%v) (-want +got):\n%s", tc.from, diff)
		}
	}
	calls := 0
	m.AllFrom(keys[10], func(types.NamespacedName, int) bool { calls++; return calls < 3 })
	if calls != 3 {
		t.Errorf("AllFrom called yield %d times after it returned false at 3", calls)
	}
}

func TestAllStopsEarly(t *testing.T) {
	var m Map[int]
	for i := range 100 {
		m = m.With(key("ns", fmt.Sprint(i)), i)
	}
	calls := 0
	m.All(func(types.NamespacedName, int) bool { calls++; return calls < 3 })
	if calls != 3 {
		t.Errorf("All called yield %d times after it returned false at 3", calls)
	}
}

// TestPropertyModel checks random With/Without sequences against Go maps,
// keeping every version and checking all of them at the end.
func TestPropertyModel(t *testing.T) {
	genKey := rapid.Custom(func(t *rapid.T) types.NamespacedName {
		return key(rapid.SampledFrom([]string{"", "a", "b", "kube-system"}).Draw(t, "ns"),
			rapid.StringMatching(`[a-f]{0,3}`).Draw(t, "name"))
	})
	rapid.Check(t, func(t *rapid.T) {
		m := Map[int]{}
		model := map[types.NamespacedName]int{}
		var versions []Map[int]
		var models []map[types.NamespacedName]int
		// Up to 600 changes of about 1,000 keys: trees of three levels,
		// nodes that split and children that go.
		for i, n := 0, rapid.IntRange(0, 600).Draw(t, "ops"); i < n; i++ {
			k := genKey.Draw(t, "key")
			if rapid.Bool().Draw(t, "with") {
				m = m.With(k, i)
				model[k] = i
			} else {
				m = m.Without(k)
				delete(model, k)
			}
			versions = append(versions, m)
			models = append(models, maps.Clone(model))
		}
		for i := range versions {
			checkTree(t, versions[i])
			if versions[i].Len() != len(models[i]) {
				t.Fatalf("version %d: Len = %d, want %d", i, versions[i].Len(), len(models[i]))
			}
			if diff := cmp.Diff(models[i], contents(t, versions[i])); diff != "" {
				t.Fatalf("version %d (-want +got):\n%s", i, diff)
			}
			for k, v := range models[i] {
				if got, ok := versions[i].Get(k); !ok || got != v {
					t.Fatalf("version %d: Get(%v) = %d, %v; want %d", i, k, got, ok, v)
				}
			}
		}
	})
}

// Property: Diff visits every key whose value differs between two Maps (one
// made from the other, or both from a common one), each once, with the
// right values, and nothing for a Map and itself.
func TestPropDiff(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// A base of up to 1,500 keys (three levels), two Maps made from it
		// by up to 30 changes each, among its keys and others.
		nameOf := func(i int) types.NamespacedName { return key(fmt.Sprint("ns-", i%5), fmt.Sprint("svc-", i)) }
		var base Map[int]
		for i := range rapid.IntRange(0, 1500).Draw(t, "base") {
			base = base.With(nameOf(i), 1)
		}
		apply := func(m Map[int], label string) (Map[int], map[types.NamespacedName]int) {
			for range rapid.IntRange(0, 30).Draw(t, label+"-ops") {
				k := nameOf(rapid.IntRange(0, 1600).Draw(t, label+"-key"))
				if rapid.Bool().Draw(t, label+"-delete") {
					m = m.Without(k)
				} else {
					m = m.With(k, rapid.IntRange(1, 3).Draw(t, label+"-value"))
				}
			}
			want := map[types.NamespacedName]int{}
			m.All(func(k types.NamespacedName, v int) bool { want[k] = v; return true })
			return m, want
		}
		a, wantA := apply(base, "a")
		b, wantB := apply(base, "b")
		seen := map[types.NamespacedName]bool{}
		a.Diff(b, func(k types.NamespacedName, before, after int) {
			if seen[k] {
				t.Fatalf("key %v visited twice", k)
			}
			seen[k] = true
			if before != wantA[k] || after != wantB[k] {
				t.Fatalf("key %v: got %d -> %d, want %d -> %d", k, before, after, wantA[k], wantB[k])
			}
		})
		for k := range maps.Keys(wantA) {
			if wantA[k] != wantB[k] && !seen[k] {
				t.Fatalf("key %v differs (%d, %d) but was not visited", k, wantA[k], wantB[k])
			}
		}
		for k := range maps.Keys(wantB) {
			if wantA[k] != wantB[k] && !seen[k] {
				t.Fatalf("key %v differs (%d, %d) but was not visited", k, wantA[k], wantB[k])
			}
		}
		a.Diff(a, func(k types.NamespacedName, _, _ int) { t.Fatalf("Diff of a Map and itself visited %v", k) })
	})
}
