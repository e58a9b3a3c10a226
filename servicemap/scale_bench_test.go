package servicemap_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Sizes of the scale benchmarks: Services × 10 endpoints.
var (
	scaleSizes = []int{1000, 10000, 30000}
	oneSizes   = []int{100, 1000, 10000, 30000}
)

// BenchmarkScaleTracker feeds every Service of a generated cluster into a
// new Tracker and takes a Snapshot: a proxy's cold start.
func BenchmarkScaleTracker(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			must := warnings.Must(b)
			svcs, _ := scalegen.Spec{Services: n}.Objects()
			b.ReportAllocs()
			for b.Loop() {
				t := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
				for _, s := range svcs {
					must.Used(t.Update(s))
				}
				if s, _ := t.Snapshot(); s.Len() != n {
					b.Fatalf("%d ServicePorts", s.Len())
				}
			}
		})
	}
}

// BenchmarkScaleTrackerOne changes one Service of a loaded Tracker (its
// session affinity, back and forth) and takes a Snapshot: the servicemap
// part of an incremental sync.
func BenchmarkScaleTrackerOne(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			must := warnings.Must(b)
			spec := scalegen.Spec{Services: n}
			svcs, _ := spec.Objects()
			t := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
			for _, s := range svcs {
				must.Used(t.Update(s))
			}
			t.Snapshot()
			i := n / 2
			versions := [2]*v1.Service{spec.Service(i), spec.Service(i)}
			versions[1].Spec.SessionAffinity = v1.ServiceAffinityClientIP
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				must.Used(t.Update(versions[(k+1)%2]))
				if _, ch := t.Snapshot(); len(ch.Changed) != 1 {
					b.Fatalf("changes %+v", ch)
				}
			}
		})
	}
}

// BenchmarkScaleSnapshotAll walks every ServicePort of a Snapshot in
// PortName order, as Build does.
func BenchmarkScaleSnapshotAll(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			must := warnings.Must(b)
			svcs, _ := scalegen.Spec{Services: n}.Objects()
			t := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
			for _, s := range svcs {
				must.Used(t.Update(s))
			}
			snap, _ := t.Snapshot()
			b.ReportAllocs()
			for b.Loop() {
				count := 0
				for range snap.All() {
					count++
				}
				if count != n {
					b.Fatalf("%d ServicePorts, want %d", count, n)
				}
			}
		})
	}
}
