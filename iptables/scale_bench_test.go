package iptables_test

import (
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Sizes of the scale benchmarks: Services × 10 endpoints. The
// one-change benchmarks also run at 100 Services, to show that one change
// costs about the same at every size.
var (
	scaleSizes = []int{1000, 10000, 30000}
	oneSizes   = []int{100, 1000, 10000, 30000}
)

// BenchmarkScaleRender renders the whole iptables-restore input of a
// generated cluster (a full sync's input). MB is its size.
func BenchmarkScaleRender(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			rs := scaleworld.New(scalegen.Spec{Services: n}).Ruleset
			var size int
			b.ReportAllocs()
			for b.Loop() {
				size = len(iptables.Render(iptables.Names{}, rs))
			}
			b.ReportMetric(float64(size)/1e6, "MB")
		})
	}
}

// BenchmarkScaleRenderPartial renders the partial-sync input after one
// endpoint of one Service changed (the new Ruleset made by Builder.Update;
// ruleset.Diff is not included). KB is its size: the top-level chains are
// rewritten whole, so it grows with the number of Services.
func BenchmarkScaleRenderPartial(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(scalegen.Spec{Services: n})
			w.Incremental = true
			before := w.Ruleset
			after := w.ChangeEndpoints(n/2, 1)
			ch := ruleset.Diff(before, after)
			var size int
			b.ReportAllocs()
			for b.Loop() {
				out, err := iptables.RenderPartial(iptables.Names{}, before, after, ch)
				if err != nil {
					b.Fatal(err)
				}
				size = len(out)
			}
			b.ReportMetric(float64(size)/1e3, "KB")
		})
	}
}

// BenchmarkScaleOneChange is the whole generation side of a partial sync
// after one endpoint of one Service changed: EndpointSlice update, snapshots,
// Builder.Update, Diff and RenderPartial.
func BenchmarkScaleOneChange(b *testing.B) {
	for _, n := range oneSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(scalegen.Spec{Services: n})
			w.Incremental = true
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				prev := w.Ruleset
				next := w.ChangeEndpoints(n/2, 1+k%2)
				if _, err := iptables.RenderPartial(iptables.Names{}, prev, next, ruleset.Diff(prev, next)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
