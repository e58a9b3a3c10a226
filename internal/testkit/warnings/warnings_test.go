package warnings

import (
	"testing"

	"github.com/svcproxy/svcproxy"
)

// recorder is a T that records whether the check failed.
type recorder struct{ failed bool }

func (*recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestChecks(t *testing.T) {
	w := svcproxy.Warning{Kind: "Service", Namespace: "ns", Name: "web", Reason: "bad"}
	other := svcproxy.Warning{Kind: "Service", Namespace: "ns", Name: "db", Reason: "bad"}
	for _, tc := range []struct {
		name  string
		check func(T)
		fails bool
	}{
		{"None of none", func(t T) { None(t, nil) }, false},
		{"None of one", func(t T) { None(t, []svcproxy.Warning{w}) }, true},
		{"Used", func(t T) { Must(t).Used("", nil) }, false},
		{"Used but skipped", func(t T) { Must(t).Used("filtered", nil) }, true},
		{"Used but warned", func(t T) { Must(t).Used("", []svcproxy.Warning{w}) }, true},
		{"Skipped", func(t T) { Must(t).Skipped("filtered", nil) }, false},
		{"Skipped but used", func(t T) { Must(t).Skipped("", nil) }, true},
		{"Skipped with a warning", func(t T) { Must(t).Skipped("bad", []svcproxy.Warning{w}) }, true},
		{"Within", func(t T) { Within(t, []svcproxy.Warning{w}, []svcproxy.Warning{other, w}) }, false},
		{"not Within", func(t T) { Within(t, []svcproxy.Warning{other}, []svcproxy.Warning{w}) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			tc.check(&r)
			if r.failed != tc.fails {
				t.Errorf("failed %v, want %v", r.failed, tc.fails)
			}
		})
	}
}

func TestExamplePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a warning in an Example did not panic")
		}
	}()
	None(Example, []svcproxy.Warning{{Kind: "Node", Name: "n1", Reason: "bad"}})
}
