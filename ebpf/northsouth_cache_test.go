package ebpf

import (
	"maps"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
)

// A sync's north-south contents, rendered with the previous sync's
// tables at hand, equal those rendered afresh; the tables of unchanged
// groups are the previous ones, and a NodePort Service whose endpoints
// changed gets a new one.
func TestRenderNorthSouthReusesTables(t *testing.T) {
	const size = 251
	w := scaleworld.New(scalegen.Spec{Services: 300})
	w.Incremental = true
	c1 := Render(w.Ruleset, nil)
	ns1, err := RenderNorthSouth(w.Ruleset, c1, size)
	if err != nil {
		t.Fatal(err)
	}
	w.ChangeEndpoints(110, 1) // i mod 100 = 10: a NodePort Service
	w.AddService()
	c2 := Render(w.Ruleset, c1)
	inc, err := renderNorthSouth(w.Ruleset, c2, size, ns1)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := RenderNorthSouth(w.Ruleset, c2, size)
	if err != nil {
		t.Fatal(err)
	}
	if !sameNorthSouth(inc, fresh) {
		t.Fatal("the contents rendered with the previous tables differ from those rendered afresh")
	}
	reused, renewed := 0, 0
	for id, tab := range inc.Maglev {
		switch {
		case tab == ns1.Maglev[id]:
			reused++
		case ns1.Maglev[id] != nil:
			renewed++
		}
	}
	if reused == 0 || renewed == 0 || reused+renewed < len(ns1.Maglev)-1 {
		t.Errorf("%d tables reused, %d computed again of %d", reused, renewed, len(ns1.Maglev))
	}
}

// A sync that changes only ClusterIP Services leaves the north-south
// contents as they were, and externalUnchanged says so; one that changes
// a NodePort Service does not.
func TestExternalUnchanged(t *testing.T) {
	const size = 251
	w := scaleworld.New(scalegen.Spec{Services: 300})
	w.Incremental = true
	c1 := Render(w.Ruleset, nil)
	ns1, err := RenderNorthSouth(w.Ruleset, c1, size)
	if err != nil {
		t.Fatal(err)
	}
	if c1.externalUnchanged(nil) || Render(w.Ruleset, nil).externalUnchanged(c1) {
		t.Error("a render from nothing reported as incremental")
	}
	w.ChangeEndpoints(150, 1) // i mod 100 = 50: a ClusterIP Service
	c2 := Render(w.Ruleset, c1)
	ns2, err := RenderNorthSouth(w.Ruleset, c2, size)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.externalUnchanged(c1) {
		t.Error("a ClusterIP Service's change reported as touching external frontends")
	}
	if !sameNorthSouth(ns1, ns2) {
		t.Error("a ClusterIP Service's change changed the north-south contents")
	}
	w.ChangeEndpoints(110, 1) // a NodePort Service
	if c3 := Render(w.Ruleset, c2); c3.externalUnchanged(c2) {
		t.Error("a NodePort Service's change reported as touching no external frontend")
	}
}

// sameNorthSouth reports whether a and b have the same contents, Maglev
// tables compared by value.
func sameNorthSouth(a, b *NorthSouth) bool {
	return maps.Equal(a.Ext, b.Ext) && maps.Equal(a.Ranges, b.Ranges) &&
		maps.EqualFunc(a.Maglev, b.Maglev, func(x, y *MaglevTable) bool { return *x == *y })
}
