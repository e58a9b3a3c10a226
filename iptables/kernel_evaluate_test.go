//go:build linux

package iptables

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/trace"
)

// TestKernelEvaluate: what the kernel gives back is what the evaluator
// reads. For the first 24 cases genEvalCase draws (both families, both
// prefixes), an Executor syncs the Ruleset in a fresh namespace, and the
// output of iptables-save (ip6tables-save) there, in the kernel's canonical
// form (-d ADDR/32, --set-xmark, probabilities with 11 decimals, …), parses
// and sends every packet of the case where the tracer says. Cleanup removes
// the rules between cases.
func TestKernelEvaluate(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ns := lab.NewNS("iptrace")
	ctx := context.Background()
	forwarded := 0
	for seed := range 24 {
		c := genEvalCase.Example(seed)
		family := c.rs.Config().Family
		e, err := NewExecutor(ExecutorConfig{Family: family, Names: c.names, Runner: nsRunner(ns)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Sync(ctx, c.rs); err != nil {
			t.Fatalf("case %d: Sync: %v", seed, err)
		}
		save := "iptables-save"
		if family == v1.IPv6Protocol {
			save = "ip6tables-save"
		}
		saved, err := ns.Run(ctx, save)
		if err != nil {
			t.Fatalf("case %d: %s: %v", seed, save, err)
		}
		if !strings.Contains(saved, "/128 ") && !strings.Contains(saved, "/32 ") {
			t.Fatalf("case %d: %s does not print addresses in the kernel's form:\n%s", seed, save, saved)
		}
		seen := map[trace.Result]int{}
		if d := disagreement(c, []byte(saved), seen); d != "" {
			t.Errorf("case %d: %s\n%s output:\n%s", seed, d, save, saved)
		}
		forwarded += seen[trace.Forwarded]
		if err := e.Cleanup(ctx); err != nil {
			t.Fatalf("case %d: Cleanup: %v", seed, err)
		}
	}
	if forwarded == 0 {
		t.Error("no packet was forwarded: the cases miss the statistic cascades")
	}
}
