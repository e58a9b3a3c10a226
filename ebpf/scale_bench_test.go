package ebpf_test

import (
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
)

// Sizes of the scale benchmarks: Services × 10 endpoints; IPv6 above
// scalegen.MaxServices (32,000), the most an IPv4 cluster of the
// generator holds.
var scaleSizes = []int{10000, 100000}

func spec(n int) scalegen.Spec { return scalegen.Spec{Services: n, IPv6: n > scalegen.MaxServices} }

// BenchmarkScaleFirstRender renders a generated cluster's maps from
// nothing and lists every element (Maps), as a first sync does.
func BenchmarkScaleFirstRender(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(spec(n))
			b.ReportAllocs()
			for b.Loop() {
				if m := ebpf.Render(w.Ruleset, nil).Maps(); len(m.Services) < n {
					b.Fatal(len(m.Services))
				}
			}
		})
	}
}

// BenchmarkScaleOneChange is the pure side of an incremental sync after one
// Service changed: Render of the new Ruleset (made by Builder.Update, not
// timed) from the previous Contents, and Changes between the two.
func BenchmarkScaleOneChange(b *testing.B) {
	for _, n := range scaleSizes {
		for _, change := range []string{"endpoints", "udp-endpoints", "add", "remove"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, change), func(b *testing.B) {
				w := scaleworld.New(spec(n))
				w.Incremental = true
				c := ebpf.Render(w.Ruleset, nil)
				ops := 0
				version := 0
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					switch change {
					case "endpoints": // a TCP ClusterIP Service (index mod 100 = 50)
						version++
						w.ChangeEndpoints(n/2+50, version)
					case "udp-endpoints": // a UDP one (mod 100 = 0)
						version++
						w.ChangeEndpoints(n/2, version)
					case "add":
						w.AddService()
					case "remove":
						if w.Added == 0 {
							w.AddService()
							c = ebpf.Render(w.Ruleset, c)
						}
						w.RemoveAdded()
					}
					b.StartTimer()
					next := ebpf.Render(w.Ruleset, c)
					ops += ebpf.Changes(c, next).Len()
					c = next
				}
				b.ReportMetric(float64(ops)/float64(b.N), "ops/change")
			})
		}
	}
}
