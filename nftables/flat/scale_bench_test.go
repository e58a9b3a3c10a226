package flat_test

import (
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

// BenchmarkScaleFlatFirstSync renders a generated cluster as the flat
// layout's first sync (FirstSync: the table, its definitions' nft
// text), as the scale tool's flat first sync does.
func BenchmarkScaleFlatFirstSync(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			rs := scaleworld.New(scalegen.Spec{Services: n}).Ruleset
			// The loop renders the same Ruleset again: check its
			// warnings once.
			_, _, res := flat.FirstSync(rs, flat.Options{})
			warnings.None(b, res.Warnings)
			b.ReportAllocs()
			for b.Loop() {
				flat.FirstSync(rs, flat.Options{})
			}
		})
	}
}

// BenchmarkScaleFlatGeneration is the scale tool's generation for the flat
// layout: the trackers' snapshots, Build and FirstSync, with the World
// (its trackers and Ruleset) alive as it is in the scale tool.
func BenchmarkScaleFlatGeneration(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := scaleworld.New(scalegen.Spec{Services: n})
			b.ReportAllocs()
			for b.Loop() {
				flat.FirstSync(w.Build(), flat.Options{})
			}
		})
	}
}
