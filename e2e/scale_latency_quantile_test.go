//go:build scale && linux

package e2e

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	bounds := []float64{1, 2, 4, inf}
	tests := []struct {
		name   string
		counts []uint64 // cumulative, per bound
		q      float64
		want   float64
	}{
		{name: "first bucket interpolates from 0", counts: []uint64{10, 10, 10, 10}, q: 0.5, want: 0.5},
		{name: "middle of the second bucket", counts: []uint64{0, 10, 10, 10}, q: 0.5, want: 1.5},
		{name: "rank on a bucket's upper edge", counts: []uint64{5, 10, 10, 10}, q: 0.5, want: 1},
		{name: "p99 in the third bucket", counts: []uint64{50, 50, 100, 100}, q: 0.99, want: 2 + 2*0.98},
		{name: "in +Inf: the largest finite bound", counts: []uint64{0, 0, 1, 100}, q: 0.99, want: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := histogram{bounds: bounds, counts: tc.counts, count: tc.counts[len(tc.counts)-1]}
			if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := (histogram{bounds: bounds, counts: []uint64{0, 0, 0, 0}}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of no observations = %v, want NaN", got)
	}
}

func TestHistogramMinus(t *testing.T) {
	bounds := []float64{1, math.Inf(1)}
	before := histogram{bounds: bounds, counts: []uint64{3, 5}, count: 5}
	after := histogram{bounds: bounds, counts: []uint64{4, 9}, count: 9}
	d := after.minus(before)
	if d.count != 4 || d.counts[0] != 1 || d.counts[1] != 4 {
		t.Errorf("minus = %+v, want count 4, counts [1 4]", d)
	}
}

func TestParseSyncsAndAttribute(t *testing.T) {
	log := strings.Join([]string{
		`time=2026-12-01T10:00:01.500Z level=INFO msg=synced mode=nftables families=[IPv4] full=true periodic=false duration=500ms manifestReload=0`,
		`time=2026-12-01T10:00:02.000Z level=INFO msg="something else" duration=1s`,
		`time=2026-12-01T10:00:02.300Z level=ERROR msg="sync failed" periodic=false duration=100ms err="x y"`,
		`time=2026-12-01T10:00:03.250Z level=INFO msg=synced mode=nftables families=[IPv4] full=false periodic=true duration=250ms manifestReload=0`,
		`time=bad level=INFO msg=synced duration=1ms`,
	}, "\n")
	at := func(ms int) time.Time {
		return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	}
	got := parseSyncs(log)
	want := []syncRecord{
		{start: at(1000), end: at(1500), full: true},
		{start: at(2200), end: at(2300), failed: true},
		{start: at(3000), end: at(3250), periodic: true},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(syncRecord{})); diff != "" {
		t.Fatalf("parseSyncs (-want +got):\n%s", diff)
	}
	if n := len(syncsIn(got, at(1500), at(2300))); n != 2 {
		t.Errorf("syncsIn [1.5 s, 2.3 s]: %d syncs, want 2", n)
	}
	changes := []change{
		{slice: "a", made: at(100), trigger: at(0), applied: at(150)},      // seen before the first sync
		{slice: "b", made: at(1100), trigger: at(1100), applied: at(1200)}, // seen during it: the failed sync is skipped
		{slice: "c", made: at(2900), trigger: at(2900), applied: at(2950)}, // seen after the last sync started
		{slice: "d", made: at(2900), trigger: at(2900), applied: at(2950)}, // never seen
	}
	delivered := map[string]time.Time{"a": at(200), "b": at(1300), "c": at(3100)}
	parts, unseen, unsynced := attribute(changes, delivered, got)
	wantParts := []programmed{
		{written: 50 * time.Millisecond, delivered: 100 * time.Millisecond, waited: 800 * time.Millisecond, synced: 500 * time.Millisecond, total: 1500 * time.Millisecond},
		{written: 100 * time.Millisecond, delivered: 200 * time.Millisecond, waited: 1700 * time.Millisecond, synced: 250 * time.Millisecond, total: 2150 * time.Millisecond},
	}
	if diff := cmp.Diff(wantParts, parts, cmp.AllowUnexported(programmed{})); diff != "" || unseen != 1 || unsynced != 1 {
		t.Errorf("attribute: unseen %d, unsynced %d (want 1, 1); parts (-want +got):\n%s", unseen, unsynced, diff)
	}
}
