package iptables

import (
	"regexp"
	"strings"
	"testing"
)

// The property of TestPropEvaluateRender bites: each rendering bug below,
// made by editing the rendered text, makes it find a counterexample within
// the first cases genEvalCase draws.

// mutation is a rendering bug, made by editing the text of Render.
type mutation struct {
	name   string
	mutate func(names Names, text string) string
}

var probabilityRE = regexp.MustCompile(`--probability [0-9.]+`)

var mutations = []mutation{
	{
		// The localnet guard where it was before commit 1e1efbf: in filter
		// KUBE-NODEPORTS (reached from INPUT only) instead of
		// KUBE-FIREWALL (INPUT and OUTPUT). Made by renaming the chain of
		// the guard's "-A" line.
		name: "localnet guard in KUBE-NODEPORTS",
		mutate: func(names Names, text string) string {
			guard := "-A " + names.Firewall() + " -m comment --comment \"block incoming localnet connections\""
			return strings.Replace(text, guard, "-A "+names.NodePorts()+" -m comment --comment \"block incoming localnet connections\"", 1)
		},
	},
	{
		// Every statistic rule with probability 1/2: wrong for the first
		// N−2 targets of N ≥ 3. Made by rewriting each "--probability P".
		name: "probability 1/2 everywhere",
		mutate: func(_ Names, text string) string {
			return probabilityRE.ReplaceAllString(text, "--probability 0.5000000000")
		},
	},
	{
		// externalTrafficPolicy Cluster without its masquerade: the
		// external chain no longer jumps to KUBE-MARK-MASQ. Made by
		// deleting the rules commented "masquerade traffic for …".
		name: "no masquerade for external traffic",
		mutate: func(_ Names, text string) string {
			var kept []string
			for _, line := range strings.Split(text, "\n") {
				if !strings.Contains(line, "--comment \"masquerade traffic for ") {
					kept = append(kept, line)
				}
			}
			return strings.Join(kept, "\n")
		},
	},
}

// TestPropEvaluateBites: for each mutation, some case of the first 2,000
// that genEvalCase draws disagrees with the tracer; the first is logged.
func TestPropEvaluateBites(t *testing.T) {
	const cases = 2000
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			for seed := range cases {
				c := genEvalCase.Example(seed)
				text := withJumps(c.names, Render(c.names, c.rs))
				mutated := []byte(m.mutate(c.names, string(text)))
				if string(mutated) == string(text) {
					continue
				}
				if d := disagreement(c, mutated, nil); d != "" {
					t.Logf("counterexample at case %d:\n%s", seed, d)
					return
				}
			}
			t.Errorf("no counterexample in %d cases", cases)
		})
	}
}
