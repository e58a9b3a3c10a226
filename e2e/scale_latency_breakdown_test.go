//go:build scale && linux

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// deliveries records when the test's own watch of the EndpointSlices saw
// each slice change: about when the proxy's informer sees it, from the same
// API server.
type deliveries struct {
	mu   sync.Mutex
	at   map[string]time.Time // first event of each slice, by namespace/name
	done chan struct{}
}

// watchSlices watches the EndpointSlices of every namespace from the
// current resource version until ctx is done.
func watchSlices(ctx context.Context, t *testing.T, client kubernetes.Interface) *deliveries {
	t.Helper()
	slicesAPI := client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
	list, err := slicesAPI.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatalf("listing EndpointSlices for their resource version: %v", err)
	}
	w, err := slicesAPI.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watching EndpointSlices: %v", err)
	}
	d := &deliveries{at: map[string]time.Time{}, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if es, ok := ev.Object.(*discovery.EndpointSlice); ok {
					d.record(es.Namespace+"/"+es.Name, time.Now())
				}
			}
		}
	}()
	return d
}

func (d *deliveries) record(slice string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.at[slice]; !ok {
		d.at[slice] = at
	}
}

// wait waits for the watch to end (its context done) and returns the
// deliveries by slice.
func (d *deliveries) wait() map[string]time.Time {
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
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

// summarizeSyncs says how many syncs there were, of which kinds, how long
// they took and how far apart they started.
func summarizeSyncs(syncs []syncRecord) string {
	var took, gaps []time.Duration
	full, periodic, failed := 0, 0, 0
	for i, s := range syncs {
		took = append(took, s.end.Sub(s.start))
		if i > 0 {
			gaps = append(gaps, s.start.Sub(syncs[i-1].start))
		}
		full += boolInt(s.full)
		periodic += boolInt(s.periodic)
		failed += boolInt(s.failed)
	}
	return fmt.Sprintf("%d syncs (%d full, %d periodic, %d failed); durations %s; from one start to the next %s",
		len(syncs), full, periodic, failed, durationSpread(took), durationSpread(gaps))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// durationSpread is the minimum, median, 99th percentile and maximum of ds, rounded
// to the millisecond.
func durationSpread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	ds = slices.Sorted(slices.Values(ds))
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("min %v / p50 %v / p99 %v / max %v", r(ds[0]), r(nearestRank(ds, 0.5)), r(nearestRank(ds, 0.99)), r(ds[len(ds)-1]))
}

// nearestRank is the q-quantile of sorted ds by the nearest-rank method.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
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

// breakdown is attribute's result, each part's spread over the changes.
func breakdown(changes []change, delivered map[string]time.Time, syncs []syncRecord) string {
	parts, unseen, unsynced := attribute(changes, delivered, syncs)
	pick := func(f func(programmed) time.Duration) string {
		var ds []time.Duration
		for _, p := range parts {
			ds = append(ds, f(p))
		}
		return durationSpread(ds)
	}
	return fmt.Sprintf("%d changes attributed (%d not seen by the watch, %d seen after the last sync started): API write %s; change → watch %s; watch → sync start %s; sync %s; trigger time → sync end %s",
		len(parts), unseen, unsynced,
		pick(func(p programmed) time.Duration { return p.written }),
		pick(func(p programmed) time.Duration { return p.delivered }),
		pick(func(p programmed) time.Duration { return p.waited }),
		pick(func(p programmed) time.Duration { return p.synced }),
		pick(func(p programmed) time.Duration { return p.total }))
}

// missingReport says, when observations are missing, which changes the
// test's watch never saw, the syncs after the last delivery, and the
// proxy's warnings and errors.
func missingReport(changes []change, delivered map[string]time.Time, syncs []syncRecord, log string) string {
	var unseen []string
	var last time.Time
	for _, c := range changes {
		at, ok := delivered[c.slice]
		if !ok {
			unseen = append(unseen, c.slice)
		} else if at.After(last) {
			last = at
		}
	}
	after := 0
	for _, s := range syncs {
		if s.start.After(last) {
			after++
		}
	}
	var notes []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			notes = append(notes, line)
		}
	}
	return fmt.Sprintf("the watch never saw %d of the changes %v; %d syncs started after its last delivery (%s); the proxy's warnings and errors (%d), last ones:\n%s",
		len(unseen), unseen[:min(len(unseen), 20)], after, last.Format(time.RFC3339Nano), len(notes),
		strings.Join(notes[max(0, len(notes)-20):], "\n"))
}
