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
// Services and reads again. It
// returns the heap after a collection before the reload, with the first
// Input held as a proxy holds what it applied, and the largest sampled
// during the reload (heapSampler): of heap objects, and of the live heap.
// They are taken with the collector's target at 10 % above the live heap
// (debug.SetGCPercent(10)), so that they measure what the reload keeps
// rather than when the collector runs.
func reloadHeap(tb testing.TB, files, changed int) (steady, peak, peakLive uint64) {
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
	steady, _ = heap()
	s := startHeapSampler()
	in, err := w.Read()
	peak, peakLive = s.end()
	if err != nil || in == nil || len(in.Objects.Services) != services {
		tb.Fatalf("reload: %v, %v", in, err)
	}
	runtime.KeepAlive(applied)
	return steady, peak, peakLive
}

// TestReloadMemory: while a Watcher reloads one file of the manifests of
// 10,000 Services × 10 endpoints in ten files, every EndpointSlice of the
// file changed, the heap stays within twice what it was before (it reads
// the file as a stream, a document at a time, decodes only the documents
// that changed, and parses no other file).
func TestReloadMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and parses the manifests of 10,000 Services")
	}
	steady, peak, live := reloadHeap(t, 10, 1000)
	t.Logf("heap before the reload %d MiB, at most %d MiB during it (%.2f×; live %d MiB)", steady>>20, peak>>20, float64(peak)/float64(steady), live>>20)
	if peak > 2*steady {
		t.Errorf("heap during the reload %d MiB, more than twice the %d MiB before", peak>>20, steady>>20)
	}
}

// BenchmarkReloadMemory is reloadHeap with the 10,000 Services in 10
// files or in one, the EndpointSlices of the rewritten file all changed
// or only one: the heap before the reload (steady-MiB), the largest
// during it (peak-MiB) and their ratio, and the largest live heap
// (live-MiB).
func BenchmarkReloadMemory(b *testing.B) {
	for _, c := range []struct{ files, changed int }{{10, 1000}, {1, 10000}, {1, 1}} {
		b.Run(fmt.Sprintf("files=%d/changed=%d", c.files, c.changed), func(b *testing.B) {
			var steady, peak, live uint64
			for b.Loop() {
				steady, peak, live = reloadHeap(b, c.files, c.changed)
			}
			b.ReportMetric(float64(live)/(1<<20), "live-MiB")
			b.ReportMetric(float64(steady)/(1<<20), "steady-MiB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(peak)/float64(steady), "peak/steady")
		})
	}
}
