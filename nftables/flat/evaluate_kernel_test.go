//go:build linux

package flat_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// TestKernelFlatReadBackEvaluatesAsRendered: a flat-layout table loaded
// with nft -f into a namespace, read back with `nft list table` and
// `nft -j list table`, sends every packet where the rendered script sends
// it: the evaluator reads what nft prints of typeof sets and maps, data
// maps with numgen in their keys, concatenated interval sets and
// `dnat ip to … map @…` as it reads what we render; and where the tracer
// says. Clusters of both families, from TestFlatMatchesTrace's generator.
func TestKernelFlatReadBackEvaluatesAsRendered(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("flattrace")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()
	gen := rapid.Custom(genFlatCase)
	families := map[v1.IPFamily]int{}
	compared := 0
	for seed := 0; seed < 40 && (seed < 16 || len(families) < 2); seed++ {
		c := gen.Example(seed)
		family := string(kfamily(c.rs.Config().Family))
		families[c.rs.Config().Family]++
		runScript(t, ns, nft, c.text)
		read := func(args ...string) (*nfttrace.Table, string) {
			out, err := ns.Run(ctx, nft, append(args, "list", "table", family, flat.DefaultTable)...)
			if err != nil {
				t.Fatalf("seed %d: nft %v: %v", seed, args, err)
			}
			tb, err := nfttrace.Parse(out)
			if err != nil {
				t.Fatalf("seed %d: reading nft %v list table: %v\n%s", seed, args, err, out)
			}
			return tb, out
		}
		fromKernel, listed := read()
		fromJSON, _ := read("-j")
		fromText, err := nfttrace.Parse(c.text)
		if err != nil {
			t.Fatalf("seed %d: reading the rendered script: %v", seed, err)
		}
		for _, p := range c.packets {
			compared++
			want, _, errText := fromText.Evaluate(p)
			got, path, errKernel := fromKernel.Evaluate(p)
			gotJSON, _, errJSON := fromJSON.Evaluate(p)
			if errText != nil || errKernel != nil || errJSON != nil {
				t.Fatalf("seed %d: %v: rendered: %v, read back: %v, as JSON: %v", seed, p, errText, errKernel, errJSON)
			}
			if diff := cmp.Diff(want, got, outcomeOptions...); diff != "" {
				t.Fatalf("seed %d: %v: read back differs from rendered (-rendered +read back):\n%s\npath:\n%s\nscript:\n%s", seed, p, diff, path, c.text)
			}
			if diff := cmp.Diff(want, gotJSON, outcomeOptions...); diff != "" {
				t.Fatalf("seed %d: %v: read back as JSON differs from rendered (-rendered +JSON):\n%s", seed, p, diff)
			}
		}
		if msg, err := flatDivergence(c.rs, listed, c.packets); err != nil || msg != "" {
			t.Fatalf("seed %d: read back against the tracer: %v%s\nlisting:\n%s", seed, err, msg, listed)
		}
		if out, err := ns.Run(ctx, nft, "delete", "table", family, flat.DefaultTable); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, out)
		}
	}
	if len(families) < 2 {
		t.Fatalf("families covered: %v", families)
	}
	t.Logf("%d packets compared over %v tables", compared, families)
}
