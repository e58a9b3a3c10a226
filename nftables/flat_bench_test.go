package nftables_test

import (
	"fmt"
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
