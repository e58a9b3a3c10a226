package iptables

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

// TestExecutorStats: the rules of ours in each table after a sync are
// those a full render of its Ruleset has, whether the sync was full or
// partial, and the last sync's are those its input wrote; failed restores
// are counted, partial ones apart.
func TestExecutorStats(t *testing.T) {
	ctx := context.Background()
	k := newFakeKernel(t, v1.IPv4Protocol)
	e := newTestExecutor(t, k)
	if st := e.Stats(); st.Rules != nil || st.LastSync != nil {
		t.Errorf("Stats before a sync: %+v; want no rule counts", st)
	}
	web := func(n int) []any {
		return []any{service("ns1", "web", "198.19.0.10", nodePort(30080)), slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(n, false)...)}
	}
	db := []any{service("ns1", "db", "198.19.0.11"), slice("ns1", "db", "db-1", 5432, v1.ProtocolTCP, readyEPs(3, false)...)}
	steps := []struct {
		name    string
		objs    []any
		partial bool
	}{
		{"first, full", append(web(2), db...), false},
		{"an endpoint more for web", append(web(3), db...), true},
		{"db removed", web(3), true},
		{"web without endpoints", web(0), true},
	}
	var prev *ruleset.Ruleset
	for _, st := range steps {
		rs := build(t, testConfig(), st.objs...)
		d, err := e.Apply(ctx, rs)
		if err != nil || d.Full == st.partial {
			t.Fatalf("%s: full %v, %v; want partial %v", st.name, d.Full, err, st.partial)
		}
		input := Render(DefaultNames(), rs)
		if st.partial {
			if input, err = RenderPartial(DefaultNames(), prev, rs, ruleset.Diff(prev, rs)); err != nil {
				t.Fatal(err)
			}
		}
		prev = rs
		got := e.Stats()
		if d := cmp.Diff(countRules(Render(DefaultNames(), rs)), got.Rules); d != "" {
			t.Errorf("%s: rules in the kernel (-full render +Stats):\n%s", st.name, d)
		}
		if d := cmp.Diff(countRules(input), got.LastSync); d != "" {
			t.Errorf("%s: rules of the last sync (-its input +Stats):\n%s", st.name, d)
		}
		// db's chains, unchanged, were not written.
		if st.name == "an endpoint more for web" && got.LastSync["nat"] >= got.Rules["nat"] {
			t.Errorf("%s: a partial sync wrote %d nat rules of %d: all of them", st.name, got.LastSync["nat"], got.Rules["nat"])
		}
	}

	// A failing partial restore, then a failing full one.
	k.failRestore = 2
	if _, err := e.Apply(ctx, build(t, testConfig(), web(1)...)); err == nil {
		t.Fatal("the failing restores were not reported")
	}
	if got := e.Stats(); got.RestoreFailures != 2 || got.PartialRestoreFailures != 1 {
		t.Errorf("failures counted: %d restores, %d partial; want 2 and 1", got.RestoreFailures, got.PartialRestoreFailures)
	}
}

// TestCountRules counts the rules of every golden rendering as the restore
// model holds them.
func TestCountRules(t *testing.T) {
	for _, sc := range scenarios {
		text := sc.render(t)
		m, err := applyRestore(newModel(), text)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{}
		for _, table := range []string{"filter", "nat"} {
			want[table] = 0
			for _, rules := range m[table] {
				want[table] += len(rules)
			}
		}
		if d := cmp.Diff(want, countRules(text)); d != "" {
			t.Errorf("%s: rules by table (-model +countRules):\n%s", sc.name, d)
		}
	}
}
