package manifests_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/manifests"
)

// scaleManifest is the YAML of scalegen's Services from to to (not
// included) and their EndpointSlices, one document each; the slices of
// the first changed of them at version version (scalegen.ChangedSlice),
// the others at 0.
func scaleManifest(tb testing.TB, spec scalegen.Spec, from, to, changed, version int) []byte {
	tb.Helper()
	var b strings.Builder
	for i := from; i < to; i++ {
		v := version
		if i >= from+changed {
			v = 0
		}
		svc, es := spec.Service(i), spec.ChangedSlice(i, v)
		svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		es.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
		for _, o := range []any{svc, es} {
			data, err := yaml.Marshal(o)
			if err != nil {
				tb.Fatal(err)
			}
			b.WriteString("---\n")
			b.Write(data)
		}
	}
	return []byte(b.String())
}

// BenchmarkParse is Parse of the manifest of 1,000 Services with 10
// endpoints each.
func BenchmarkParse(b *testing.B) {
	data := scaleManifest(b, scalegen.Spec{Services: 1000}, 0, 1000, 0, 0)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := manifests.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// heapSampler samples the heap every 100 µs and keeps the largest: the
// bytes of heap objects (runtime/metrics' /memory/classes/heap/objects,
// live ones and those not yet swept) and of the live heap as the last
// collection marked it (/gc/heap/live).
type heapSampler struct {
	stop       chan struct{}
	done       sync.WaitGroup
	peak, live uint64
}

// heap is the two sizes heapSampler samples.
func heap() (objects, live uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	h.sample()
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) sample() {
	objects, live := heap()
	h.peak, h.live = max(h.peak, objects), max(h.live, live)
}

// end stops the sampling and returns the largest sizes.
func (h *heapSampler) end() (objects, live uint64) {
	close(h.stop)
	h.done.Wait()
	h.sample()
	return h.peak, h.live
}

// reloadHeap writes the manifests of 10,000 Services × 10 endpoints
// (scalegen's) in files files of a directory, reads them with a Watcher,
// rewrites the first file with other endpoints for its first changed
// Services and reads again. It returns the heap sizes of reloadMemory.
// They are taken with the collector's target at 10 % above the live heap
// (debug.SetGCPercent(10)), so that they measure what the reload keeps
// rather than when the collector runs.
func reloadHeap(tb testing.TB, files, changed int) reloadMemory {
	tb.Helper()
	const services = 10000
	spec := scalegen.Spec{Services: services}
	dir := tb.TempDir()
	per := services / files
	write := func(f, version int) {
		data := scaleManifest(tb, spec, f*per, (f+1)*per, changed, version)
		path := filepath.Join(dir, fmt.Sprintf("services-%02d.yaml", f))
		if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			tb.Fatal(err)
		}
		// A modification time of its own, whatever the file system's
		// resolution.
		at := time.Now().Add(time.Duration(version) * time.Minute)
		if err := os.Chtimes(path, at, at); err != nil {
			tb.Fatal(err)
		}
	}
	for f := range files {
		write(f, 0)
	}
	w := manifests.NewWatcher(dir, 0)
	applied, err := w.Read()
	if err != nil || applied == nil {
		tb.Fatalf("first read: %v, %v", applied, err)
	}
	write(0, 1)
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var m reloadMemory
	m.steady, _ = heap()
	s := startHeapSampler()
	in, err := w.Read()
	m.peak, m.peakLive = s.end()
	if err != nil || in == nil || len(in.Objects.Services) != services {
		tb.Fatalf("reload: %v, %v", in, err)
	}
	runtime.GC()
	m.held, _ = heap()
	runtime.KeepAlive(applied)
	runtime.KeepAlive(in)
	return m
}

// reloadMemory is what reloadHeap measures: the heap (of objects) after a
// collection before the reload, with the first Input held as a proxy
// holds what it applied (steady); the largest sampled during the reload
// (heapSampler) of heap objects (peak) and of the live heap (peakLive);
// and after a collection once the reload returned, both Inputs held
// (held).
type reloadMemory struct{ steady, peak, peakLive, held uint64 }

// reloadCases are the reloads TestReloadMemory and BenchmarkReloadMemory
// measure: the 10,000 Services in files files, the EndpointSlices of the
// first changed Services of the rewritten file changed; maxPeak bounds
// the largest heap during the reload, maxHeld the heap once it returned,
// both as a multiple of the heap before.
var reloadCases = []struct {
	files, changed   int
	maxPeak, maxHeld float64
}{
	{files: 10, changed: 1000, maxPeak: 2, maxHeld: 2},
	// Every slice decoded again: the new slices are held with the old
	// ones, and the peak depends on how the collector keeps up with the
	// YAML decoder's garbage, 48 kB a document (BENCHMARKS.md); what the
	// reload holds is bounded instead.
	{files: 1, changed: 10000, maxHeld: 1.6},
	{files: 1, changed: 1, maxPeak: 2, maxHeld: 2},
}

// TestReloadMemory: while a Watcher reloads the manifests of 10,000
// Services × 10 endpoints, the heap stays within twice what it was before:
// in ten files, one rewritten with every EndpointSlice changed (it reads
// the file as a stream, a document at a time, decodes only the documents
// that changed, and parses no other file); in one file with one slice
// changed (reading a document it does not decode allocates nothing). In
// one file with every slice changed, what the reload holds once done
// stays within 1.6 times (a changed slice shares what it has equal with
// the one it replaces).
func TestReloadMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and parses the manifests of 10,000 Services")
	}
	for _, c := range reloadCases {
		t.Run(fmt.Sprintf("files=%d/changed=%d", c.files, c.changed), func(t *testing.T) {
			m := reloadHeap(t, c.files, c.changed)
			ratio := func(n uint64) float64 { return float64(n) / float64(m.steady) }
			t.Logf("heap before the reload %d MiB, at most %d MiB during it (%.2f×; live %d MiB), %d MiB after it (%.2f×)",
				m.steady>>20, m.peak>>20, ratio(m.peak), m.peakLive>>20, m.held>>20, ratio(m.held))
			if c.maxPeak > 0 && ratio(m.peak) > c.maxPeak {
				t.Errorf("heap during the reload %d MiB, more than %.1f times the %d MiB before", m.peak>>20, c.maxPeak, m.steady>>20)
			}
			if ratio(m.held) > c.maxHeld {
				t.Errorf("heap after the reload %d MiB, more than %.1f times the %d MiB before", m.held>>20, c.maxHeld, m.steady>>20)
			}
		})
	}
}

// BenchmarkReloadMemory is reloadHeap of each of reloadCases: the heap
// before the reload (steady-MiB), the largest during it (peak-MiB) and
// its ratio to the heap before, the largest live heap (live-MiB), and the
// heap after it (held-MiB).
func BenchmarkReloadMemory(b *testing.B) {
	for _, c := range reloadCases {
		b.Run(fmt.Sprintf("files=%d/changed=%d", c.files, c.changed), func(b *testing.B) {
			var m reloadMemory
			for b.Loop() {
				m = reloadHeap(b, c.files, c.changed)
			}
			b.ReportMetric(float64(m.peakLive)/(1<<20), "live-MiB")
			b.ReportMetric(float64(m.steady)/(1<<20), "steady-MiB")
			b.ReportMetric(float64(m.peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(m.peak)/float64(m.steady), "peak/steady")
			b.ReportMetric(float64(m.held)/(1<<20), "held-MiB")
		})
	}
}
