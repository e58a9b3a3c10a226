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
// included) and their EndpointSlices (at version version), one document
// each.
func scaleManifest(tb testing.TB, spec scalegen.Spec, from, to, version int) []byte {
	tb.Helper()
	var b strings.Builder
	for i := from; i < to; i++ {
		svc, es := spec.Service(i), spec.ChangedSlice(i, version)
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
	data := scaleManifest(b, scalegen.Spec{Services: 1000}, 0, 1000, 0)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := manifests.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// heapSampler samples the bytes of heap objects (live and not yet swept)
// every 100 µs and keeps the largest.
type heapSampler struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func heapNow() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), peak: heapNow()}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			h.peak = max(h.peak, heapNow())
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) end() uint64 {
	close(h.stop)
	h.done.Wait()
	return max(h.peak, heapNow())
}

// reloadHeap writes the manifests of 10,000 Services × 10 endpoints
// (scalegen's) in files files of a directory, reads them with a Watcher,
// rewrites the first file with other endpoints and reads again. It
// returns the heap (the bytes of heap objects, runtime/metrics) after a
// collection before the reload, with the first Input held as a proxy
// holds what it applied, and the largest sampled during the reload. Both
// are taken with the collector's target at 10 % above the live heap
// (debug.SetGCPercent(10)), so that they measure what the reload keeps
// reachable rather than when the collector runs.
func reloadHeap(tb testing.TB, files int) (steady, peak uint64) {
	tb.Helper()
	const services = 10000
	spec := scalegen.Spec{Services: services}
	dir := tb.TempDir()
	per := services / files
	write := func(f, version int) {
		data := scaleManifest(tb, spec, f*per, (f+1)*per, version)
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
	steady = heapNow()
	s := startHeapSampler()
	in, err := w.Read()
	peak = s.end()
	if err != nil || in == nil || len(in.Objects.Services) != services {
		tb.Fatalf("reload: %v, %v", in, err)
	}
	runtime.KeepAlive(applied)
	return steady, peak
}

// TestReloadMemory: while a Watcher reloads one file of the manifests of
// 10,000 Services × 10 endpoints in ten files, the heap stays within twice
// what it was before (it reads the file as a stream, a document at a
// time, and parses no other file).
func TestReloadMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and parses the manifests of 10,000 Services")
	}
	steady, peak := reloadHeap(t, 10)
	t.Logf("heap before the reload %d MiB, at most %d MiB during it (%.2f×)", steady>>20, peak>>20, float64(peak)/float64(steady))
	if peak > 2*steady {
		t.Errorf("heap during the reload %d MiB, more than twice the %d MiB before", peak>>20, steady>>20)
	}
}

// BenchmarkReloadMemory is reloadHeap with the 10,000 Services in 10
// files and in one: the heap before the reload (steady-MiB), the largest
// during it (peak-MiB), and their ratio.
func BenchmarkReloadMemory(b *testing.B) {
	for _, files := range []int{10, 1} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			var steady, peak uint64
			for b.Loop() {
				steady, peak = reloadHeap(b, files)
			}
			b.ReportMetric(float64(steady)/(1<<20), "steady-MiB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(peak)/float64(steady), "peak/steady")
		})
	}
}
