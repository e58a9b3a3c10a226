package endpoints_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Sizes of the scale benchmarks: Services × 10 endpoints.
var (
	scaleSizes = []int{1000, 10000, 30000}
	oneSizes   = []int{100, 1000, 10000, 30000}
)

// BenchmarkScaleTracker feeds the EndpointSlice of every Service of a
// generated cluster into a new Tracker and takes a Snapshot: a proxy's cold
// start.
func BenchmarkScaleTracker(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			must := warnings.Must(b)
			_, slices := scalegen.Spec{Services: n}.Objects()
			b.ReportAllocs()
			for b.Loop() {
				t := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
				for _, s := range slices {
					must.Used(t.Update(s))
				}
				if _, ch := t.Snapshot(); len(ch.Changed) != n {
					b.Fatalf("%d changed ports", len(ch.Changed))
				}
			}
		})
	}
}

// BenchmarkScaleTrackerOne replaces one endpoint of one Service in a loaded
// Tracker (alternating between two versions of its EndpointSlice) and takes a
// Snapshot: the endpoints part of an incremental sync.
func BenchmarkScaleTrackerOne(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			must := warnings.Must(b)
			spec := scalegen.Spec{Services: n}
			_, slices := spec.Objects()
			t := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
			for _, s := range slices {
				must.Used(t.Update(s))
			}
			t.Snapshot()
			i := n / 2
			versions := [2]*discovery.EndpointSlice{spec.ChangedSlice(i, 1), spec.ChangedSlice(i, 2)}
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				must.Used(t.Update(versions[k%2]))
				if _, ch := t.Snapshot(); len(ch.Changed) != 1 {
					b.Fatalf("changes %+v", ch)
				}
			}
		})
	}
}
