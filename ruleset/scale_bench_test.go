package ruleset_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Sizes of the scale benchmarks: Services × 10 endpoints. The
// one-change benchmarks also run at 100 Services, to show that one change
// costs about the same at every size.
var (
	scaleSizes = []int{1000, 10000, 30000}
	oneSizes   = []int{100, 1000, 10000, 30000}
)

// BenchmarkScaleBuild builds the Ruleset of a generated cluster from its
// snapshots.
func BenchmarkScaleBuild(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			spec := scalegen.Spec{Services: n}
			ss, es := scaleworld.Snapshots(spec)
			builder, err := ruleset.NewBuilder(scaleworld.Config())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				rs, ws := builder.Build(ss, es)
				warnings.None(b, ws)
				if len(rs.Services()) != n {
					b.Fatal(len(rs.Services()))
				}
			}
		})
	}
}

// BenchmarkScaleSharedDestinations finds the shared destinations of a
// built Ruleset, as the flat nftables render does on a first sync.
func BenchmarkScaleSharedDestinations(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			rs := scaleRuleset(b, n)
			want := len(rs.SharedDestinations())
			b.ReportAllocs()
			for b.Loop() {
				if got := len(rs.SharedDestinations()); got != want {
					b.Fatalf("%d shared destinations, then %d", want, got)
				}
			}
		})
	}
}

// BenchmarkScaleFrontendIndex makes the Frontend index of a built Ruleset,
// as its first ServicesAt or Owns does.
func BenchmarkScaleFrontendIndex(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			rs := scaleRuleset(b, n)
			b.ReportAllocs()
			for b.Loop() {
				if got := ruleset.FrontendIndexLen(rs); got < n {
					b.Fatalf("%d destinations for %d Services", got, n)
				}
			}
		})
	}
}

// scaleRuleset builds the Ruleset of a generated cluster of n Services.
func scaleRuleset(b *testing.B, n int) *ruleset.Ruleset {
	b.Helper()
	ss, es := scaleworld.Snapshots(scalegen.Spec{Services: n})
	builder, err := ruleset.NewBuilder(scaleworld.Config())
	if err != nil {
		b.Fatal(err)
	}
	rs, ws := builder.Build(ss, es)
	warnings.None(b, ws)
	return rs
}

// BenchmarkScaleDiff compares two Rulesets that differ in one endpoint of
// one Service.
func BenchmarkScaleDiff(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(scalegen.Spec{Services: n})
			before := w.Ruleset
			after := w.ChangeEndpoints(n/2, 1)
			b.ReportAllocs()
			for b.Loop() {
				if ch := ruleset.Diff(before, after); len(ch.Changed) != 1 {
					b.Fatalf("%+v", ch)
				}
			}
		})
	}
}

// BenchmarkScaleIncremental is the generation side of an incremental sync
// after one endpoint of one Service changed, when every sync builds the whole
// Ruleset: the EndpointSlice update, both snapshots, Build, and Diff against
// the previous Ruleset. BenchmarkScaleUpdate is the same with Builder.Update.
func BenchmarkScaleIncremental(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(scalegen.Spec{Services: n})
			i := n / 2
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				prev := w.Ruleset
				next := w.ChangeEndpoints(i, 1+k%2)
				if ch := ruleset.Diff(prev, next); len(ch.Changed) != 1 {
					b.Fatalf("%+v", ch)
				}
			}
		})
	}
}

// BenchmarkScaleUpdate is the generation side of an incremental sync after
// one endpoint of one Service changed, with Builder.Update: the EndpointSlice
// update, both snapshots with their changes, Update from the previous
// Ruleset, and Diff against it.
func BenchmarkScaleUpdate(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(scalegen.Spec{Services: n})
			w.Incremental = true
			i := n / 2
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				prev := w.Ruleset
				next := w.ChangeEndpoints(i, 1+k%2)
				if ch := ruleset.Diff(prev, next); len(ch.Changed) != 1 {
					b.Fatalf("%+v", ch)
				}
			}
		})
	}
}

// BenchmarkScaleSteadyHeap measures the heap a steady cluster of N × 10
// holds, after a garbage collection, in bytes per endpoint:
//
//   - heap-B/endpoint: the servicemap and endpoints snapshots and the Ruleset
//     built from them, the trackers dropped;
//   - proxy-heap-B/endpoint: what a proxy keeps between syncs, trackers
//     included.
//
// The objects are generated one at a time while feeding the trackers, so the
// v1 objects are not counted (the trackers keep none of them, or they would
// be). The time per op is that of feeding and building, with two forced GCs.
func BenchmarkScaleSteadyHeap(b *testing.B) {
	for _, n := range []int{10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			spec := scalegen.Spec{Services: n}
			var snap, proxy float64
			for b.Loop() {
				base := heap()
				w := scaleworld.New(spec)
				proxy = float64(heap()-base) / float64(spec.Total())
				ss, _ := w.Services.Snapshot()
				es, _ := w.Endpoints.Snapshot()
				rs := w.Ruleset
				w = nil
				snap = float64(heap()-base) / float64(spec.Total())
				runtime.KeepAlive(ss)
				runtime.KeepAlive(es)
				runtime.KeepAlive(rs)
				runtime.KeepAlive(w)
			}
			b.ReportMetric(snap, "heap-B/endpoint")
			b.ReportMetric(proxy, "proxy-heap-B/endpoint")
		})
	}
}

// heap is the live heap after two garbage collections.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
