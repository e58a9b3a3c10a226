package nfttrace_test

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// TestParseErrors: what the evaluator does not know is an error that names
// the line, never a guess.
func TestParseErrors(t *testing.T) {
	const head = "add table ip t\nadd chain ip t c { type filter hook input priority 0 ; }\n"
	for _, tc := range []struct {
		name, text string
		want       []string // substrings of the error
	}{
		{"unknown statement", head + "add rule ip t c log prefix \"x\" drop\n", []string{"line 3", "unknown expression \"log prefix\""}},
		{"unknown expression", head + "add rule ip t c ct helper \"ftp\" accept\n", []string{"line 3", "unknown ct expression"}},
		{"unknown ct status", head + "add rule ip t c ct status snat accept\n", []string{"line 3", "only dnat"}},
		{"reject options", head + "add rule ip t c reject with tcp reset\n", []string{"line 3", "reject options"}},
		{"jump to no chain", head + "add rule ip t c jump nowhere\n", []string{"line 3", "no chain nowhere"}},
		{"goto in a map to no chain", head + "add map ip t m { type inet_proto . inet_service : verdict ; }\nadd element ip t m { tcp . 80 : goto nowhere }\n", []string{"line 4", "no chain nowhere"}},
		{"set of another type", head + "add set ip t s { type ipv4_addr ; }\nadd rule ip t c th dport @s drop\n", []string{"line 4", "has type"}},
		{"no such set", head + "add rule ip t c ip daddr @nothere drop\n", []string{"line 3", "no set or map nothere"}},
		{"second table", head + "add table ip u\n", []string{"line 3", "a second table ip u"}},
		{"inet family", "add table inet t\n", []string{"line 1", "family \"inet\""}},
		{"unknown set type", "add table ip t\nadd set ip t s { type ifname ; }\n", []string{"line 2", "unknown set type"}},
		{"bad element", "add table ip t\nadd set ip t s { type ipv4_addr ; }\nadd element ip t s { 2001:db8::1 }\n", []string{"line 3", "is not an ipv4_addr"}},
		{"rule position", head + "add rule ip t c index 0 drop\n", []string{"line 3", "rule positions"}},
		{"unbalanced braces", "table ip t {\n\tchain c {\n", []string{"line 1", "braces"}},
		{"ip6 match in an ip table", head + "add rule ip t c ip6 daddr ::1 drop\n", []string{"line 3", "ip6 daddr in a table of family ip"}},
		{"unknown hook", "add table ip t\nadd chain ip t c { type filter hook ingress priority 0 ; }\n", []string{"line 2", "unknown hook"}},
		{"unknown priority", "add table ip t\nadd chain ip t c { type filter hook input priority nonsense ; }\n", []string{"line 2", "unknown priority"}},
		{"unknown command", head + "reset counters ip t\n", []string{"line 3", "unknown command"}},
		{"listed chain item", "table ip t {\n\tchain c {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tlimit rate 1/second accept\n\t}\n}\n", []string{"line 4", "unknown expression \"limit rate\""}},
		{"no table", "\n", []string{"no table"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nfttrace.Parse(tc.text)
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestParseBothSyntaxes: the same table, as nft lists it and as commands,
// reads the same: every packet evaluates to the same Outcome and Path
// (but for the lines and the rules' spelling). testdata/demo.nft is the
// dry run of the reference nftables proxy on the demo manifests for
// node-a; testdata/demo-listed.nft is what nft 1.0.6 lists after loading
// it in a fresh network namespace.
func TestParseBothSyntaxes(t *testing.T) {
	listed, commands := demoTable(t, "demo-listed.nft"), demoTable(t, "demo.nft")
	if listed.Family() != "ip" || listed.Name() != "kube-proxy" || commands.Name() != "kube-proxy" {
		t.Fatalf("tables %s %s and %s %s", listed.Family(), listed.Name(), commands.Family(), commands.Name())
	}
	for _, s := range demoPackets {
		p := packet(t, s)
		a, pathA, errA := listed.Evaluate(p)
		b, pathB, errB := commands.Evaluate(p)
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v, %v", s, errA, errB)
		}
		if diff := diffOutcomes(a, b); diff != "" {
			t.Errorf("%s: listed and commands differ (-listed +commands):\n%s", s, diff)
		}
		if len(pathA) != len(pathB) {
			t.Errorf("%s: paths of %d and %d steps:\n%s\n--\n%s", s, len(pathA), len(pathB), pathA, pathB)
			continue
		}
		for i := range pathA {
			if pathA[i].Chain != pathB[i].Chain || pathA[i].Hook != pathB[i].Hook || (pathA[i].Share == nil) != (pathB[i].Share == nil) {
				t.Errorf("%s: step %d: %v and %v", s, i, pathA[i], pathB[i])
			}
		}
	}
}

// TestParseJSON: the demo table as `nft -j list table` prints it
// (testdata/demo-listed.json, nft 1.0.6) evaluates as the text listing.
func TestParseJSON(t *testing.T) {
	listed, fromJSON := demoTable(t, "demo-listed.nft"), demoTable(t, "demo-listed.json")
	for _, s := range demoPackets {
		p := packet(t, s)
		a, pathA, errA := listed.Evaluate(p)
		b, pathB, errB := fromJSON.Evaluate(p)
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v, %v", s, errA, errB)
		}
		if diff := diffOutcomes(a, b); diff != "" {
			t.Errorf("%s: listed and JSON differ (-listed +JSON):\n%s", s, diff)
		}
		if len(pathA) != len(pathB) {
			t.Errorf("%s: paths of %d and %d steps:\n%s\n--\n%s", s, len(pathA), len(pathB), pathA, pathB)
		}
	}
	for _, tc := range []struct{ name, text, want string }{
		{"unknown statement", `{"nftables": [{"table": {"family": "ip", "name": "t"}}, {"chain": {"family": "ip", "table": "t", "name": "c", "handle": 3}},
			{"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 4, "expr": [{"log": {"prefix": "x"}}]}}]}`, "object 2 (rule in chain c, handle 4): unknown statement"},
		{"refused by the text parser", `{"nftables": [{"table": {"family": "ip", "name": "t"}}, {"chain": {"family": "ip", "table": "t", "name": "c", "handle": 3}},
			{"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 4, "expr": [{"jump": {"target": "nowhere"}}]}}]}`, "object 2 (rule in chain c, handle 4): chain c: rule \"jump nowhere\": no chain nowhere"},
		{"not JSON", `{"nftables": [`, "JSON"},
	} {
		if _, err := nfttrace.Parse(tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one that says %q", tc.name, err, tc.want)
		}
	}
}
