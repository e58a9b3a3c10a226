//go:build linux

package nftables_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// TestKernelReadBackEvaluatesAsRendered: a table the Executor loads into a
// namespace, read back with `nft list table` (and `nft -j list table`),
// sends every packet where the rendered text sends it, and where the tracer
// says: the evaluator reads what nft prints (priorities by name, merged
// element lists, prefixes without braces, "meta mark set meta mark | …",
// JSON) as it reads what we render. Clusters of both families, from the property tests' generator.
func TestKernelReadBackEvaluatesAsRendered(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("nfttrace")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()
	gen := rapid.Custom(genEvalCase)
	families := map[v1.IPFamily]int{}
	compared := 0
	for seed := 0; seed < 40 && (seed < 16 || len(families) < 2); seed++ {
		c := gen.Example(seed)
		cfg := c.rs.Config()
		families[cfg.Family]++
		ex := executorIn(t, ns, nftables.ExecutorConfig{Family: cfg.Family, Now: func() time.Time { return time.Unix(1e9, 0) }})
		if _, err := ex.Sync(ctx, c.rs); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		listed, err := ns.Run(ctx, nft, "list", "table", string(nftables.Family(cfg.Family)), nftables.DefaultTable)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !strings.HasPrefix(listed, "table ") {
			t.Fatalf("seed %d: nft list table printed no table block:\n%s", seed, listed)
		}
		fromKernel, err := nfttrace.Parse(listed)
		if err != nil {
			t.Fatalf("seed %d: reading nft's listing: %v\n%s", seed, err, listed)
		}
		listedJSON, err := ns.Run(ctx, nft, "-j", "list", "table", string(nftables.Family(cfg.Family)), nftables.DefaultTable)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		fromJSON, err := nfttrace.Parse(listedJSON)
		if err != nil {
			t.Fatalf("seed %d: reading nft's JSON listing: %v\n%s", seed, err, listedJSON)
		}
		fromText, err := nfttrace.Parse(c.text)
		if err != nil {
			t.Fatalf("seed %d: reading the rendered text: %v", seed, err)
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
				t.Fatalf("seed %d: %v: read back differs from rendered (-rendered +read back):\n%s\npath:\n%s\nlisting:\n%s", seed, p, diff, path, listed)
			}
			if diff := cmp.Diff(want, gotJSON, outcomeOptions...); diff != "" {
				t.Fatalf("seed %d: %v: read back as JSON differs from rendered (-rendered +JSON):\n%s\nlisting:\n%s", seed, p, diff, listedJSON)
			}
		}
		if msg, err := divergence(c.rs, listed, c.packets); err != nil || msg != "" {
			t.Fatalf("seed %d: read back against the tracer: %v%s\nlisting:\n%s", seed, err, msg, listed)
		}
		if err := ex.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(families) < 2 {
		t.Fatalf("families covered: %v", families)
	}
	t.Logf("%d packets compared over %v tables", compared, families)
}
