// Package warnings checks the svcproxy.Warnings that calls return, for the
// tests of every package: Check asserts the warnings a test expects; None
// and Must fail a test on warnings it did not expect, so that no test
// discards them. It imports no svcproxy package but the root one.
package warnings

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy"
)

// Check checks that every warning names the object kind namespace/name and
// holds no raw line break, and that the warnings' reasons contain the
// substrings of want, one each, in order.
func Check(t testing.TB, kind, namespace, name string, got []svcproxy.Warning, want []string) {
	t.Helper()
	for _, w := range got {
		if w.Kind != kind || w.Namespace != namespace || w.Name != name {
			t.Errorf("warning %+v does not name %s %s/%s", w, kind, namespace, name)
		}
		if strings.ContainsAny(w.Reason, "\n\r") {
			t.Errorf("warning reason %q holds a raw line break", w.Reason)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d warnings %v, want %d containing %q", len(got), got, len(want), want)
		return
	}
	for i, sub := range want {
		if !strings.Contains(got[i].Reason, sub) {
			t.Errorf("warning %d = %q, want it to contain %q", i, got[i].Reason, sub)
		}
	}
}

// T is the part of a test that None and Must need: *testing.T and
// *rapid.T are both one.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// None fails the test at once when got holds a warning: for a call on
// well-formed input, which must not warn. A test that expects warnings
// checks them (Check, or its own assertions) instead.
func None(t T, got []svcproxy.Warning) {
	t.Helper()
	if len(got) > 0 {
		t.Fatalf("unexpected warnings: %v", got)
	}
}

// Checker fails its test at once on a warning, or a skip, that the test did
// not expect. Its methods take a call's results whole:
//
//	must := warnings.Must(t)
//	must.Used(tracker.Update(svc)) // servicemap's and endpoints' Trackers
//	must.None(st.UpdateService(svc))
type Checker struct{ t T }

// Must returns the Checker of t.
func Must(t T) Checker { return Checker{t} }

// None is None(t, got).
func (c Checker) None(got []svcproxy.Warning) {
	c.t.Helper()
	None(c.t, got)
}

// Used fails the test when a tracker's Update skipped its object or warned
// about it.
func (c Checker) Used(skipped string, got []svcproxy.Warning) {
	c.t.Helper()
	if skipped != "" {
		c.t.Fatalf("unexpectedly skipped: %s", skipped)
	}
	None(c.t, got)
}

// Skipped fails the test unless a tracker's Update skipped its object,
// without a warning (a filtered or other-family object is no mistake).
func (c Checker) Skipped(skipped string, got []svcproxy.Warning) {
	c.t.Helper()
	if skipped == "" {
		c.t.Fatalf("not skipped")
	}
	None(c.t, got)
}

// Within fails the test at once when got holds a warning that all does
// not: for an incremental call (ruleset.Builder.Update) whose warnings are
// some of those of the whole (Build) on input that warns.
func Within(t T, got, all []svcproxy.Warning) {
	t.Helper()
	for _, w := range got {
		if !slices.Contains(all, w) {
			t.Fatalf("warning %v is not among %v", w, all)
		}
	}
}

// Example is the T of an Example function, which has none: its Fatalf
// panics, which fails the Example.
var Example T = example{}

type example struct{}

func (example) Helper() {}

func (example) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
