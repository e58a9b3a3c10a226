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
