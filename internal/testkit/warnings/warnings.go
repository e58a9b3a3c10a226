// Package warnings checks the svcproxy.Warnings a conversion returned, for
// the tests of servicemap and endpoints. It imports no svcproxy package but
// the root one.
package warnings

import (
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
