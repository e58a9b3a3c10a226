package iptables

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

// builtinOrder lists the built-in chains of each table as iptables-save
// prints them.
var builtinOrder = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
}

// saveText writes the fake kernel's filter and nat tables as iptables-save
// prints them: the built-in chains with their policies, the chains, then
// every rule, the jumps from the built-in chains first.
func saveText(k *fakeKernel, names Names) []byte {
	var b strings.Builder
	for _, table := range []string{"filter", "nat"} {
		b.WriteString("*" + table + "\n")
		for _, c := range builtinOrder[table] {
			b.WriteString(":" + c + " ACCEPT [0:0]\n")
		}
		for _, c := range k.tables.chainsOf(table) {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, c := range builtinOrder[table] {
			for _, spec := range k.builtin[table+"/"+c] {
				b.WriteString("-A " + c + " " + quotedJump(names, spec) + "\n")
			}
		}
		for _, c := range k.tables.chainsOf(table) {
			for _, r := range k.tables[table][c] {
				b.WriteString("-A " + c + " " + r + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}

// quotedJump quotes the comment of a jump the fake kernel keeps with its
// arguments joined by spaces: the one of jumps it is.
func quotedJump(names Names, spec string) string {
	for _, j := range jumps {
		if args := j.spec(names); strings.Join(args, " ") == spec {
			return restoreArgs(args)
		}
	}
	return spec
}

// TestPropEvaluateAfterSyncs: after any sequence of syncs through the real
// Executor (a full sync, then partial syncs of random changes, with full
// syncs requested at random), the tables the fake kernel holds, written as
// iptables-save writes them, send every packet where the tracer says for
// the last Ruleset.
func TestPropEvaluateAfterSyncs(t *testing.T) {
	seen := map[string]int{}
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		cfg.Node.Name = rapid.SampledFrom(genNodes).Draw(t, "node")
		v6 := cfg.Family == v1.IPv6Protocol
		names := rapid.SampledFrom([]Names{{}, mustNames("CNI")}).Draw(t, "names")
		k := &fakeKernel{family: cfg.Family, tables: newModel(), builtin: map[string][]string{}}
		e, err := NewExecutor(ExecutorConfig{Family: cfg.Family, Names: names, Runner: k})
		if err != nil {
			t.Fatal(err)
		}
		w := genServedWorld(t, v6)
		var rs *ruleset.Ruleset
		for step := range rapid.IntRange(1, 6).Draw(t, "syncs") {
			if step > 0 {
				for range rapid.IntRange(1, 3).Draw(t, "changes") {
					mutate(t, w, v6)
				}
			}
			if rapid.Float64Range(0, 1).Draw(t, "full") < 0.2 {
				e.RequestFullSync()
			}
			rs = buildFrom(t, cfg, w.objects())
			if _, err := e.Sync(context.Background(), rs); err != nil {
				t.Fatalf("sync %d: %v", step, err)
			}
		}
		c := evalCase{rs: rs, names: names}
		for i := range rapid.IntRange(4, 32).Draw(t, "packets") {
			c.packets = append(c.packets, genPacket(t, rs, fmt.Sprint("packet", i)))
		}
		text := saveText(k, names)
		if d := disagreement(c, text, seen); d != "" {
			t.Fatalf("%s\nkernel state:\n%s", d, text)
		}
	})
	wantEveryResult(t, seen)
}
