package e2e

// The pure parts of the scale latency tests (scale_latency*_test.go, behind
// the scale build tag): reading a proxy's log and a histogram of the
// programming-latency metric, and their tests, which need no kernel.

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// change is one EndpointSlice change of a window.
type change struct {
	// slice is the slice changed, namespace/name.
	slice string
	// made is when the change was made; trigger is the trigger time
	// written, made truncated to its format; applied is when the API
	// server had accepted it.
	made, trigger, applied time.Time
}

// histogram is a Prometheus histogram as scraped: cumulative counts by
// upper bound, in increasing order of bound.
type histogram struct {
	bounds []float64
	counts []uint64
	count  uint64
}

// syncRecord is one synced (or sync failed) line of a proxy's log.
type syncRecord struct {
	start, end     time.Time
	full, periodic bool
	failed         bool
}

// parseSyncs reads the sync lines of a reference proxy's log (slog text:
// time=… msg=synced … full=… periodic=… duration=…); the start of a sync is
// its line's time less its duration. Lines it cannot read are skipped.
func parseSyncs(log string) []syncRecord {
	var out []syncRecord
	for _, line := range strings.Split(log, "\n") {
		failed := strings.Contains(line, `msg="sync failed"`)
		if !failed && !strings.Contains(line, "msg=synced") {
			continue
		}
		fields := logFields(line)
		end, err1 := time.Parse(time.RFC3339Nano, fields["time"])
		took, err2 := time.ParseDuration(fields["duration"])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, syncRecord{start: end.Add(-took), end: end, full: fields["full"] == "true",
			periodic: fields["periodic"] == "true", failed: failed})
	}
	return out
}

// logFields are the key=value fields of a slog text line whose values have
// no spaces (quoted values are kept whole only when they have none).
func logFields(line string) map[string]string {
	fields := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

// syncsIn are the syncs that ended in [from, to].
func syncsIn(syncs []syncRecord, from, to time.Time) []syncRecord {
	var out []syncRecord
	for _, s := range syncs {
		if !s.end.Before(from) && !s.end.After(to) {
			out = append(out, s)
		}
	}
	return out
}

// programmed is where one change's time went: written is from the change to
// the API server's answer, delivered to the test's watch seeing it, waited
// from then to the start of the first sync after it, synced that sync's
// duration; total is from the trigger time written to that sync's end (what
// the metric observes when the proxy's informer saw the change with the
// test's watch).
type programmed struct {
	written, delivered, waited, synced, total time.Duration
}

// attribute finds, for each change the watch saw, the first successful sync
// that started after it was seen; changes not seen, or seen after the last
// sync started, are counted apart.
func attribute(changes []change, delivered map[string]time.Time, syncs []syncRecord) (out []programmed, unseen, unsynced int) {
	for _, c := range changes {
		seen, ok := delivered[c.slice]
		if !ok {
			unseen++
			continue
		}
		i := slices.IndexFunc(syncs, func(s syncRecord) bool { return !s.failed && !s.start.Before(seen) })
		if i < 0 {
			unsynced++
			continue
		}
		s := syncs[i]
		out = append(out, programmed{
			written: c.applied.Sub(c.made), delivered: seen.Sub(c.made), waited: s.start.Sub(seen),
			synced: s.end.Sub(s.start), total: s.end.Sub(c.trigger),
		})
	}
	return out, unseen, unsynced
}

// minus is the histogram of the observations made between before and h.
func (h histogram) minus(before histogram) histogram {
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), count: h.count - before.count}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - before.counts[i]
	}
	return d
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linearly inside the bucket that holds it (from 0 for the first bucket);
// the largest finite bound when it falls in the +Inf bucket; NaN with no
// observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	for i, c := range h.counts {
		if float64(c) < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			return h.bounds[i-1]
		}
		lower, below := 0.0, uint64(0)
		if i > 0 {
			lower, below = h.bounds[i-1], h.counts[i-1]
		}
		inBucket := c - below
		if inBucket == 0 {
			return lower
		}
		return lower + (h.bounds[i]-lower)*(rank-float64(below))/float64(inBucket)
	}
	return h.bounds[len(h.bounds)-2]
}

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
