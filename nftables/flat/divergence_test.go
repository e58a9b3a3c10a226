package flat_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// masqueradeMark is the statement of the flat layout's rules that marks a
// flow for masquerading.
var masqueradeMark = regexp.MustCompile(`meta mark set meta mark \| 0x[0-9a-f]+ `)

// numgenMod is the numgen of a targets map's key.
var numgenMod = regexp.MustCompile(`numgen random mod ([0-9]+) map`)

// flatMutations rewrite the flat layout's rendered script into a table
// that does not do what the Ruleset says; each reports false when the
// script has nothing to rewrite.
var flatMutations = []struct {
	name   string
	mutate func(text string) (string, bool)
}{{
	// The rules of the external groups (external and load-balancer IPs
	// and node ports under externalTrafficPolicy Cluster) DNAT without
	// marking the flow for masquerading.
	name: "external groups not masqueraded",
	mutate: func(text string) (string, bool) {
		return rewriteLines(text, func(line string) string {
			if strings.Contains(line, " svcproxy-flat external ") || strings.Contains(line, " svcproxy-flat nodeport-external ") {
				return masqueradeMark.ReplaceAllString(line, "")
			}
			return line
		})
	},
}, {
	// The first rule that spreads over N ≥ 2 targets draws among N−1: its
	// last target gets no flows, the others 1/(N−1).
	name: "numgen modulus one short",
	mutate: func(text string) (string, bool) {
		done := false
		return rewriteLines(text, func(line string) string {
			m := numgenMod.FindStringSubmatchIndex(line)
			if done || !strings.HasPrefix(line, "add rule ") || m == nil {
				return line
			}
			n, _ := strconv.Atoi(line[m[2]:m[3]])
			if n < 2 {
				return line
			}
			done = true
			return line[:m[2]] + fmt.Sprint(n-1) + line[m[3]:]
		})
	},
}, {
	// No hairpin masquerading: the rule of masquerading that marks a flow
	// DNATed to its own source is deleted.
	name: "no hairpin masquerading",
	mutate: func(text string) (string, bool) {
		return rewriteLines(text, func(line string) string {
			if strings.Contains(line, " svcproxy-flat masquerading ct status dnat ") {
				return ""
			}
			return line
		})
	},
}, {
	// The hairpin set keyed by address and port alone: each element is
	// there for every protocol, so that a flow DNATed to its own source
	// is masqueraded when that endpoint is a target on this node of a
	// Service port of another protocol.
	name: "hairpin without protocol",
	mutate: func(text string) (string, bool) {
		return rewriteLines(text, func(line string) string {
			if !strings.HasPrefix(line, "add element ") || !strings.Contains(line, " hairpin {") {
				return line
			}
			seen := map[string]bool{}
			var elems []string
			for _, m := range hairpinElement.FindAllStringSubmatch(line, -1) {
				if seen[m[1]+m[3]] {
					continue
				}
				seen[m[1]+m[3]] = true
				for _, proto := range []string{"tcp", "udp", "sctp"} {
					elems = append(elems, fmt.Sprintf("%s . %s . %s", m[1], proto, m[3]))
				}
			}
			return line[:strings.Index(line, "{")+1] + " " + strings.Join(elems, ", ") + " }"
		})
	},
}, {
	// Flows to frontends with ClientIP affinity do not record the
	// client's endpoint: the rules of affinity-record are deleted.
	name: "affinity not recorded",
	mutate: func(text string) (string, bool) {
		return rewriteLines(text, func(line string) string {
			if strings.Contains(line, " svcproxy-flat affinity-record ") && strings.HasPrefix(line, "add rule ") {
				return ""
			}
			return line
		})
	},
}, {
	// The check after DNAT knows no target for external sources: their
	// flows to frontends with affinity are dropped as if their endpoint
	// had been removed.
	name: "affinity targets of external sources missing",
	mutate: func(text string) (string, bool) {
		return rewriteLines(text, func(line string) string {
			if strings.HasPrefix(line, "add element ") && (strings.Contains(line, " affinity-targets-external {") || strings.Contains(line, " nodeport-affinity-targets-external {")) {
				return ""
			}
			return line
		})
	},
}}

// hairpinElement is an element of the hairpin set: its address (twice),
// its protocol and its port.
var hairpinElement = regexp.MustCompile(`([0-9a-f.:]+ \. [0-9a-f.:]+) \. (tcp|udp|sctp) \. ([0-9]+)`)

// rewriteLines applies f to each line of text (a line f makes empty is
// deleted) and reports whether it changed any.
func rewriteLines(text string, f func(string) string) (string, bool) {
	var out []string
	changed := false
	for _, line := range strings.Split(text, "\n") {
		next := f(line)
		changed = changed || next != line
		if next != "" || line == "" {
			out = append(out, next)
		}
	}
	return strings.Join(out, "\n"), changed
}

// TestFlatDivergencesAreCaught: each mutation of the flat layout's rendered
// script makes the property of TestFlatMatchesTrace fail: among the first
// examples of its generator there is a cluster and a packet for which the
// mutated table and the tracer disagree while the rendered table agrees.
func TestFlatDivergencesAreCaught(t *testing.T) {
	gen := rapid.Custom(genFlatCase)
	for _, m := range flatMutations {
		t.Run(m.name, func(t *testing.T) {
			const examples = 1000
			for seed := range examples {
				c := gen.Example(seed)
				text, ok := m.mutate(c.text)
				if !ok {
					continue
				}
				msg, err := flatDivergence(c.rs, text, c.packets)
				if err != nil {
					t.Fatalf("example %d: %v", seed, err)
				}
				if msg == "" {
					continue
				}
				if unmutated, err := flatDivergence(c.rs, c.text, c.packets); err != nil || unmutated != "" {
					continue
				}
				t.Logf("example %d: counterexample: %s", seed, msg[:strings.Index(msg, "\npath:")])
				return
			}
			t.Fatalf("no counterexample among %d examples", examples)
		})
	}
}
