package flat_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// genFlatCase is genEvalCase with the cluster rendered in the flat layout,
// as the script nft -f loads.
func genFlatCase(t *rapid.T) evalCase {
	cfg, opts, p, a := genEvalConfig(t)
	rs := genCluster(t, cfg, p)
	// Random clusters share frontends, which warns: what matters here is
	// where packets go.
	_, script, _ := flat.Script(rs, opts)
	c := evalCase{rs: rs, text: script}
	for range rapid.IntRange(1, 40).Draw(t, "packets") {
		c.packets = append(c.packets, genPacket(t, p, a))
	}
	return c
}

// flatDivergence evaluates the flat-layout text for each packet and
// describes the first whose outcome is not the tracer's for rs, or returns
// "".
func flatDivergence(rs *ruleset.Ruleset, text string, packets []trace.Packet) (string, error) {
	return divergenceAfter(rs, text, packets, func(o trace.Outcome) trace.Outcome { return o })
}

// TestFlatMatchesTrace: for random clusters on either node, the flat
// layout's rendered table, evaluated by nfttrace, sends every random packet
// where trace.Trace says (with the nftables options): the same result,
// Service port and kind of frontend, the same targets with their exact
// shares (numgen in the targets maps' keys) and masquerading, the same
// short-circuit, and the ClientIP affinity timeout (which the update of
// the affinity map after DNAT carries), in both families (the generator's
// endpoints of a port listen on one port, which IPv6 tables need for
// affinity).
func TestFlatMatchesTrace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genFlatCase(t)
		msg, err := flatDivergence(c.rs, c.text, c.packets)
		if err != nil {
			t.Fatalf("%v\ntable:\n%s", err, c.text)
		}
		if msg != "" {
			t.Fatalf("%s\ntable:\n%s", msg, c.text)
		}
	})
}

// TestFlatSplitMatchesOneRange: the whole flat table of a random cluster,
// rendered with its Service ports split into ranges (as on several
// processors), is the one rendered in one range: the same script, warnings
// and state; and its definitions are those of its configuration's elements
// alone.
func TestFlatSplitMatchesOneRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p, _ := genEvalConfig(t)
		rs := genCluster(t, cfg, p)
		k := rapid.IntRange(2, 6).Draw(t, "ranges")
		if diff := flat.SplitDiff(rs, opts, k); diff != "" {
			t.Fatal(diff)
		}
	})
}

// TestFlatOwnershipMatchesRuleset: the whole table's ownership, which asks
// the Ruleset only about shared destinations and finds a shared cluster
// IP's first port itself, names the owner that the Ruleset's index names,
// for every frontend of a random cluster.
func TestFlatOwnershipMatchesRuleset(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, _, p, _ := genEvalConfig(t)
		if diff := flat.OwnershipDiff(genCluster(t, cfg, p)); diff != "" {
			t.Fatal(diff)
		}
	})
}

// TestFlatIncrementalMatchesFull: after random changes, RenderChanges
// applied to a Fake that holds the old table gives what Render of the
// new Ruleset gives, in transactions the kernel would accept.
func TestFlatIncrementalMatchesFull(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		w := newWorld(t, cfg)
		mutate(t, w, p)
		old := w.build()
		family := kfamily(cfg.Family)
		fake := knftables.NewFake(family, flat.DefaultTable)
		tx := fake.NewTransaction()
		// Random clusters share frontends, which warns: RenderChanges'
		// warnings are checked against Render's below.
		st, _ := flat.Render(tx, old, opts)
		apply(t, fake, tx)
		for range rapid.IntRange(1, 4).Draw(t, "syncs") {
			mutate(t, w, p)
			next := w.update(old)
			tx := fake.NewTransaction()
			ch, err := flat.RenderChanges(tx, st, old, next)
			if err != nil {
				t.Fatal(err)
			}
			if ch.ElementsOnly && hasNonElementOps(tx) {
				t.Fatalf("ElementsOnly, but the transaction changes more:\n%s", tx)
			}
			apply(t, fake, tx)
			want := knftables.NewFake(family, flat.DefaultTable)
			wtx := want.NewTransaction()
			_, res := flat.Render(wtx, next, opts)
			warnings.Within(t, ch.Warnings, res.Warnings)
			apply(t, want, wtx)
			if diff := cmp.Diff(canonical(want.Dump()), canonical(fake.Dump())); diff != "" {
				t.Fatalf("incremental differs from full (-full +incremental):\n%s\ntransaction:\n%s", diff, tx)
			}
			old = next
		}
	})
}

// hasNonElementOps reports whether tx does anything but add or delete
// elements.
func hasNonElementOps(tx *knftables.Transaction) bool {
	for _, line := range strings.Split(strings.TrimSpace(tx.String()), "\n") {
		if line != "" && !strings.HasPrefix(line, "add element ") && !strings.HasPrefix(line, "delete element ") {
			return true
		}
	}
	return false
}
