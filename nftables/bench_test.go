package nftables_test

import (
	"fmt"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

// benchWorld builds n Services with 10 endpoints each, and the same with
// one more endpoint on the first Service.
func benchWorld(b *testing.B, n int) (before, after *ruleset.Ruleset) {
	w := newWorld(b, config4())
	for i := range n {
		name := fmt.Sprintf("svc%05d", i)
		var eps []ep
		for j := range 10 {
			eps = append(eps, ep{ip: fmt.Sprintf("198.18.%d.%d", 64+(i*10+j)/250%64, (i*10+j)%250+2), node: node})
		}
		w.add(svc("bench", name, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)), slice("bench", name, 8080, eps...))
	}
	before = w.build()
	var eps []ep
	for j := range 11 {
		eps = append(eps, ep{ip: fmt.Sprintf("198.18.127.%d", j+2), node: node})
	}
	w.add(slice("bench", "svc00000", 8080, eps...))
	return before, w.build()
}

func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rs, _ := benchWorld(b, n)
			fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
			b.ResetTimer()
			for b.Loop() {
				tx := fake.NewTransaction()
				if _, err := nftables.Render(tx, rs, nftables.Options{}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRenderChanges(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			before, after := benchWorld(b, n)
			fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
			b.ResetTimer()
			for b.Loop() {
				tx := fake.NewTransaction()
				if _, err := nftables.RenderChanges(tx, before, after, nftables.Options{}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
