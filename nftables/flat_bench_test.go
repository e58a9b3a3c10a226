package nftables_test

import (
	"fmt"
	"runtime"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
)

func BenchmarkRenderFlat(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		rs, _ := benchWorld(b, n)
		fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultFlatTable)
		b.Run(fmt.Sprintf("knftables/%d", n), func(b *testing.B) {
			for b.Loop() {
				nftables.RenderFlat(fake.NewTransaction(), rs, nftables.Options{})
			}
		})
		b.Run(fmt.Sprintf("script/%d", n), func(b *testing.B) {
			for b.Loop() {
				nftables.FlatScript(rs, nftables.Options{})
			}
		})
		b.Run(fmt.Sprintf("firstsync/%d", n), func(b *testing.B) {
			for b.Loop() {
				nftables.FlatFirstSync(rs, nftables.Options{})
			}
		})
	}
}

func BenchmarkRenderFlatChanges(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			before, after := benchWorld(b, n)
			fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultFlatTable)
			for b.Loop() {
				b.StopTimer()
				st, _, _ := nftables.FlatScript(before, nftables.Options{})
				b.StartTimer()
				if _, err := nftables.RenderFlatChanges(fake.NewTransaction(), st, before, after); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFlatStateHeap reports the heap that the flat layout's state
// keeps between syncs (FlatState: the endpoint counts in use and the
// hairpin addresses), per endpoint of the Ruleset.
func BenchmarkFlatStateHeap(b *testing.B) {
	rs, _ := benchWorld(b, 10000)
	var st *nftables.FlatState
	for b.Loop() {
		st = nil
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st, _, _ = nftables.FlatScript(rs, nftables.Options{})
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/float64(rs.Len()*10), "B/endpoint")
	}
	runtime.KeepAlive(st)
}
