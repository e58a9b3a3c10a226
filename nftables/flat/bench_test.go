package flat_test

import (
	"fmt"
	"runtime"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

func BenchmarkRenderFlat(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		rs, _ := benchWorld(b, n)
		// The loops render the same Ruleset again: check its warnings once.
		_, _, res := flat.Script(rs, flat.Options{})
		warnings.None(b, res.Warnings)
		fake := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable)
		b.Run(fmt.Sprintf("knftables/%d", n), func(b *testing.B) {
			for b.Loop() {
				flat.Render(fake.NewTransaction(), rs, flat.Options{})
			}
		})
		b.Run(fmt.Sprintf("script/%d", n), func(b *testing.B) {
			for b.Loop() {
				flat.Script(rs, flat.Options{})
			}
		})
		b.Run(fmt.Sprintf("firstsync/%d", n), func(b *testing.B) {
			for b.Loop() {
				flat.FirstSync(rs, flat.Options{})
			}
		})
	}
}

func BenchmarkRenderFlatChanges(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			before, after := benchWorld(b, n)
			fake := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable)
			for b.Loop() {
				b.StopTimer()
				st, _, _ := flat.Script(before, flat.Options{})
				b.StartTimer()
				if _, err := flat.RenderChanges(fake.NewTransaction(), st, before, after); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFlatStateHeap reports the heap that the flat layout's state
// keeps between syncs (State: the endpoint counts in use and the
// hairpin keys), per endpoint of the Ruleset.
func BenchmarkFlatStateHeap(b *testing.B) {
	rs, _ := benchWorld(b, 10000)
	var st *flat.State
	for b.Loop() {
		st = nil
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st, _, _ = flat.Script(rs, flat.Options{})
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/float64(rs.Len()*10), "B/endpoint")
	}
	runtime.KeepAlive(st)
}
