package ruleset_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
)

// splits are the numbers of ranges the split tests force: more than a
// generated cluster has Services, too, so that some ranges are empty.
var splits = []int{2, 3, 7}

// fataler is what checkSplits needs of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkBuilt fails t when rs, built from es in k ranges (0: as Build
// splits), is not a valid Ruleset with the same Services as whole, built
// in one, in the same order, or when a slice of one of its Services has
// room beyond what the Service's endpoints can fill (Build cuts them from
// shared arrays: an append must not write into another Service's).
func checkBuilt(t fataler, es endpoints.Snapshot, rs, whole *ruleset.Ruleset, k int) {
	t.Helper()
	if err := ruleset.CheckInvariants(rs); err != nil {
		t.Fatalf("Build in %d ranges: %v", k, err)
	}
	if diff := cmp.Diff(values(whole.Services()), values(rs.Services()), cmpOpts); diff != "" {
		t.Fatalf("Build in %d ranges: Services differ (-one range +%d):\n%s", k, k, diff)
	}
	for _, s := range rs.Services() {
		n := len(es.Get(s.Name))
		if cap(s.ClusterTargets) != len(s.ClusterTargets) || cap(s.LocalTargets) != len(s.LocalTargets) || cap(s.Serving) != len(s.Serving) {
			t.Fatalf("Build in %d ranges: %v: a slice has room beyond its %d endpoints", k, s.Name, n)
		}
	}
}

// checkFrontendSplits fails t when sorting the frontends of rs's Services
// in k ranges gives other shared destinations or another Frontend index
// than in one range, or another order.
func checkFrontendSplits(t fataler, rs *ruleset.Ruleset, k int) {
	t.Helper()
	if diff := cmp.Diff(ruleset.SharedDestinationsSplit(rs, 1), ruleset.SharedDestinationsSplit(rs, k), cmpOpts); diff != "" {
		t.Fatalf("SharedDestinations in %d ranges differ (-one range +%d):\n%s", k, k, diff)
	}
	if diff := cmp.Diff(ruleset.IndexSplit(rs, 1), ruleset.IndexSplit(rs, k), cmpOpts); diff != "" {
		t.Fatalf("Frontend index in %d ranges differs (-one range +%d):\n%s", k, k, diff)
	}
}

// Property: Build, SharedDestinations and the Frontend index give the same
// result, in the same order, however the Service ports are split between
// goroutines.
func TestPropSplitGivesSameResult(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		h := genHistory(t, family)
		b, err := ruleset.NewBuilder(genConfig(t, family))
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		ss, es := feed(family, h.Order(t, "order"))
		whole, wantWarnings := ruleset.BuildSplit(b, ss, es, 1)
		for _, k := range splits {
			rs, warnings := ruleset.BuildSplit(b, ss, es, k)
			if diff := cmp.Diff(wantWarnings, warnings); diff != "" {
				t.Fatalf("Build in %d ranges: warnings differ (-one range +%d):\n%s", k, k, diff)
			}
			checkBuilt(t, es, rs, whole, k)
			checkFrontendSplits(t, whole, k)
		}
	})
}

// TestSplitScaleCluster checks a generated cluster large enough that Build
// and SharedDestinations split it by themselves on a machine with more than
// one processor.
func TestSplitScaleCluster(t *testing.T) {
	spec := scalegen.Spec{Services: 3000}
	ss, es := scaleworld.Snapshots(spec)
	b, err := ruleset.NewBuilder(scaleworld.ConfigFor(spec))
	if err != nil {
		t.Fatal(err)
	}
	whole, ws := ruleset.BuildSplit(b, ss, es, 1)
	warnings.None(t, ws)
	if whole.Len() != spec.Services {
		t.Fatalf("%d Services, want %d", whole.Len(), spec.Services)
	}
	// CheckInvariants compares the Frontend index, made as ServicesAt
	// splits, with one made in one range.
	rs, ws := b.Build(ss, es)
	warnings.None(t, ws)
	checkBuilt(t, es, rs, whole, 0)
	if diff := cmp.Diff(ruleset.SharedDestinationsSplit(whole, 1), rs.SharedDestinations(), cmpOpts); diff != "" {
		t.Fatalf("SharedDestinations differ (-one range +default):\n%s", diff)
	}
	for _, k := range splits {
		rs, ws := ruleset.BuildSplit(b, ss, es, k)
		warnings.None(t, ws)
		checkBuilt(t, es, rs, whole, k)
		checkFrontendSplits(t, whole, k)
	}
}
