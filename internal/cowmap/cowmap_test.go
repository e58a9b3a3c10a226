package cowmap

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

// nsName is a namespace and name, ordered by namespace, then name: the
// trackers' key.
type nsName struct{ Namespace, Name string }

func (a nsName) Compare(b nsName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func key(ns, name string) nsName {
	return nsName{Namespace: ns, Name: name}
}

// contents lists every entry of m, checking that All visits each key once.
func contents[V any](t interface {
	Helper()
	Fatalf(string, ...any)
}, m Map[nsName, V]) map[nsName]V {
	t.Helper()
	out := map[nsName]V{}
	m.All(func(k nsName, v V) bool {
		if _, dup := out[k]; dup {
			t.Fatalf("All visits %v twice", k)
		}
		out[k] = v
		return true
	})
	return out
}

func TestZeroMap(t *testing.T) {
	var m Map[nsName, int]
	if m.Len() != 0 {
		t.Errorf("Len = %d", m.Len())
	}
	if v, ok := m.Get(key("a", "b")); ok || v != 0 {
		t.Errorf("Get = %v, %v", v, ok)
	}
	m.All(func(nsName, int) bool { t.Error("All visits an entry of the zero Map"); return true })
	if n := m.Without(key("a", "b")); n.Len() != 0 {
		t.Errorf("Without on zero Map: Len = %d", n.Len())
	}
}

func TestWithWithoutGet(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  func(Map[nsName, string]) Map[nsName, string]
		want map[nsName]string
	}{{
		name: "add",
		ops: func(m Map[nsName, string]) Map[nsName, string] {
			return m.With(key("ns", "a"), "1").With(key("ns", "b"), "2")
		},
		want: map[nsName]string{key("ns", "a"): "1", key("ns", "b"): "2"},
	}, {
		name: "replace keeps Len",
		ops: func(m Map[nsName, string]) Map[nsName, string] {
			return m.With(key("ns", "a"), "1").With(key("ns", "a"), "2")
		},
		want: map[nsName]string{key("ns", "a"): "2"},
	}, {
		name: "remove",
		ops: func(m Map[nsName, string]) Map[nsName, string] {
			return m.With(key("ns", "a"), "1").With(key("ns", "b"), "2").Without(key("ns", "a"))
		},
		want: map[nsName]string{key("ns", "b"): "2"},
	}, {
		name: "remove missing is a no-op",
		ops: func(m Map[nsName, string]) Map[nsName, string] {
			return m.With(key("ns", "a"), "1").Without(key("ns", "zz")).Without(key("ns", "zz"))
		},
		want: map[nsName]string{key("ns", "a"): "1"},
	}, {
		name: "remove everything",
		ops: func(m Map[nsName, string]) Map[nsName, string] {
			return m.With(key("ns", "a"), "1").Without(key("ns", "a"))
		},
		want: map[nsName]string{},
	}, {
		name: "namespace and name are not concatenated",
		ops: func(m Map[nsName, string]) Map[nsName, string] {
			return m.With(key("ab", "c"), "1").With(key("a", "bc"), "2").With(key("a/b", "c"), "3").With(key("a", "b/c"), "4")
		},
		want: map[nsName]string{key("ab", "c"): "1", key("a", "bc"): "2", key("a/b", "c"): "3", key("a", "b/c"): "4"},
	}, {
		name: "empty key",
		ops:  func(m Map[nsName, string]) Map[nsName, string] { return m.With(key("", ""), "e") },
		want: map[nsName]string{key("", ""): "e"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.ops(Map[nsName, string]{})
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
	versions := []Map[nsName, int]{{}}
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
}, m Map[nsName, V]) {
	t.Helper()
	if m.root == nil {
		if m.length != 0 {
			t.Fatalf("empty tree, Len %d", m.length)
		}
		return
	}
	leafDepth, count := -1, 0
	var walk func(n *node[nsName, V], depth int)
	walk = func(n *node[nsName, V], depth int) {
		if len(n.keys) == 0 || len(n.keys) > maxNode {
			t.Fatalf("node with %d keys", len(n.keys))
		}
		if !slices.IsSortedFunc(n.keys, nsName.Compare) || len(slices.CompactFunc(slices.Clone(n.keys), func(a, b nsName) bool { return a == b })) != len(n.keys) {
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
func nodes[V any](n *node[nsName, V]) map[*node[nsName, V]]bool {
	out := map[*node[nsName, V]]bool{}
	var walk func(n *node[nsName, V])
	walk = func(n *node[nsName, V]) {
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
// node per level and shares the others, and the new nodes share the old
// ones' keys.
func TestChangeCopiesOnePath(t *testing.T) {
	var m Map[nsName, int]
	for i := range 30000 {
		m = m.With(key("ns", fmt.Sprintf("svc-%05d", i)), i)
	}
	checkTree(t, m)
	depth := 0
	for n := m.root; n.kids != nil; n = n.kids[0] {
		depth++
	}
	before := nodes(m.root)
	keyArrays := map[*nsName]bool{}
	for n := range before {
		keyArrays[&n.keys[0]] = true
	}
	for _, tc := range []struct {
		name string
		next Map[nsName, int]
		// sharedKeys is the number of new nodes whose keys are an old
		// node's.
		sharedKeys int
	}{
		{"replaced value", m.With(key("ns", "svc-00042"), -1), depth + 1},
		{"removed key", m.Without(key("ns", "svc-00042")), depth},
	} {
		checkTree(t, tc.next)
		fresh, shared := 0, 0
		for n := range nodes(tc.next.root) {
			if !before[n] {
				fresh++
				if keyArrays[&n.keys[0]] {
					shared++
				}
			}
		}
		if fresh != depth+1 {
			t.Errorf("%s: %d new nodes, want %d (one per level)", tc.name, fresh, depth+1)
		}
		if shared != tc.sharedKeys {
			t.Errorf("%s: %d new nodes share old keys, want %d", tc.name, shared, tc.sharedKeys)
		}
	}
}

// TestAllInOrder checks that All and AllFrom yield in key order, AllFrom
// from the first key not below its start, present or not.
func TestAllInOrder(t *testing.T) {
	var m Map[nsName, int]
	var keys []nsName
	for i := range 2000 {
		k := key(fmt.Sprintf("ns-%d", i%7), fmt.Sprintf("svc-%d", i))
		keys = append(keys, k)
		m = m.With(k, i)
	}
	slices.SortFunc(keys, nsName.Compare)
	collect := func(from *nsName) []nsName {
		var got []nsName
		yield := func(k nsName, _ int) bool { got = append(got, k); return true }
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
		from nsName
		want []nsName
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
	m.AllFrom(keys[10], func(nsName, int) bool { calls++; return calls < 3 })
	if calls != 3 {
		t.Errorf("AllFrom called yield %d times after it returned false at 3", calls)
	}
}

func TestAllStopsEarly(t *testing.T) {
	var m Map[nsName, int]
	for i := range 100 {
		m = m.With(key("ns", fmt.Sprint(i)), i)
	}
	calls := 0
	m.All(func(nsName, int) bool { calls++; return calls < 3 })
	if calls != 3 {
		t.Errorf("All called yield %d times after it returned false at 3", calls)
	}
}

// TestPropertyModel checks random With/Without sequences, from a Map that
// FromSorted made of random entries (sorted or not), against Go maps,
// keeping every version and checking all of them at the end.
func TestPropertyModel(t *testing.T) {
	genKey := rapid.Custom(func(t *rapid.T) nsName {
		return key(rapid.SampledFrom([]string{"", "a", "b", "kube-system"}).Draw(t, "ns"),
			rapid.StringMatching(`[a-f]{0,3}`).Draw(t, "name"))
	})
	rapid.Check(t, func(t *rapid.T) {
		initial := rapid.SliceOf(genKey).Draw(t, "initial")
		if rapid.Bool().Draw(t, "sort") {
			slices.SortFunc(initial, nsName.Compare)
			initial = slices.Compact(initial)
		}
		model := map[nsName]int{}
		for i, k := range initial {
			model[k] = -i
		}
		m := FromSorted(func(yield func(nsName, int) bool) {
			for i, k := range initial {
				if !yield(k, -i) {
					return
				}
			}
		})
		versions := []Map[nsName, int]{m}
		models := []map[nsName]int{maps.Clone(model)}
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

// TestFromSorted checks the Maps that FromSorted makes: of sorted entries,
// in full leaves; of others, as With makes them.
func TestFromSorted(t *testing.T) {
	keys := func(n int) []nsName {
		var out []nsName
		for i := range n {
			out = append(out, key("ns", fmt.Sprintf("svc-%05d", i)))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		keys   []nsName
		leaves int // in a Map that FromSorted built whole; 0 when it fell back
	}{
		{"none", nil, 0},
		{"one", keys(1), 1},
		{"a full leaf", keys(maxNode), 1},
		{"two levels", keys(maxNode + 1), 2},
		{"three levels", keys(maxNode*maxNode + 1), maxNode + 1},
		{"out of order", []nsName{key("b", "1"), key("a", "1"), key("c", "1")}, 0},
		{"a key twice, the last value wins", []nsName{key("a", "1"), key("a", "1")}, 0},
		{"out of order after a full leaf", append(keys(maxNode+3), key("a", "0")), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := FromSorted(func(yield func(nsName, int) bool) {
				for i, k := range tc.keys {
					if !yield(k, i) {
						return
					}
				}
			})
			checkTree(t, m)
			var want Map[nsName, int]
			for i, k := range tc.keys {
				want = want.With(k, i)
			}
			if diff := cmp.Diff(contents(t, want), contents(t, m)); diff != "" {
				t.Errorf("FromSorted (-With +FromSorted):\n%s", diff)
			}
			if m.Len() != want.Len() {
				t.Errorf("Len = %d, want %d", m.Len(), want.Len())
			}
			if tc.leaves > 0 {
				leaves := 0
				for n := range nodes(m.root) {
					if n.kids == nil {
						leaves++
					}
				}
				if leaves != tc.leaves {
					t.Errorf("%d leaves, want %d", leaves, tc.leaves)
				}
			}
		})
	}
}

// Property: Diff visits every key whose value differs between two Maps (one
// made from the other, or both from a common one), each once, with the
// right values, and nothing for a Map and itself.
func TestPropDiff(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// A base of up to 1,500 keys (three levels), two Maps made from it
		// by up to 30 changes each, among its keys and others.
		nameOf := func(i int) nsName { return key(fmt.Sprint("ns-", i%5), fmt.Sprint("svc-", i)) }
		var base Map[nsName, int]
		for i := range rapid.IntRange(0, 1500).Draw(t, "base") {
			base = base.With(nameOf(i), 1)
		}
		apply := func(m Map[nsName, int], label string) (Map[nsName, int], map[nsName]int) {
			for range rapid.IntRange(0, 30).Draw(t, label+"-ops") {
				k := nameOf(rapid.IntRange(0, 1600).Draw(t, label+"-key"))
				if rapid.Bool().Draw(t, label+"-delete") {
					m = m.Without(k)
				} else {
					m = m.With(k, rapid.IntRange(1, 3).Draw(t, label+"-value"))
				}
			}
			want := map[nsName]int{}
			m.All(func(k nsName, v int) bool { want[k] = v; return true })
			return m, want
		}
		a, wantA := apply(base, "a")
		b, wantB := apply(base, "b")
		seen := map[nsName]bool{}
		a.Diff(b, func(k nsName, before, after int) {
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
		a.Diff(a, func(k nsName, _, _ int) { t.Fatalf("Diff of a Map and itself visited %v", k) })
	})
}
