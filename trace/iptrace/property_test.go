package iptrace_test

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// ruleWords are the pieces random rule sets are made of: options, values
// and targets, right and wrong.
var ruleWords = []string{
	"!", "-p", "tcp", "udp", "icmp", "-s", "-d", "198.19.0.1", "198.19.0.0/16", "2001:db8::1", "bad/99",
	"-m", "comment", "--comment", `"a b"`, "ns/a:p", "tcp", "--dport", "--sport", "80", "80:90",
	"addrtype", "--dst-type", "--src-type", "LOCAL", "statistic", "--mode", "random", "--probability", "0.5", "2",
	"recent", "--name", "X", "--rcheck", "--set", "--seconds", "10", "--reap", "conntrack", "--ctstate", "NEW,DNAT",
	"mark", "--mark", "0x4000/0x4000", "0xZZ", "-j", "-g", "ACCEPT", "DROP", "REJECT", "RETURN", "A", "B", "MISSING",
	"MARK", "--or-mark", "--set-xmark", "0x4000", "DNAT", "--to-destination", "198.18.1.1:80", "[2001:db8::2]:80",
	"MASQUERADE", "--random-fully",
}

// goodRules are well-formed rules, after "-A CHAIN".
var goodRules = []string{
	"-j A", "-j B", "-g A", "-j RETURN", "-j ACCEPT", "-j DROP", "-j REJECT",
	"-m statistic --mode random --probability 0.3 -j A",
	"-m statistic --mode random --probability 0.5 -j DNAT --to-destination 198.18.1.1:80",
	"-p tcp -j DNAT --to-destination 198.18.1.2:80", "-j MARK --or-mark 0x4000",
	"-m mark --mark 0x4000/0x4000 -j MASQUERADE", "-m addrtype --dst-type LOCAL -j B",
	"-m conntrack ! --ctstate DNAT -d 127.0.0.0/8 -j DROP", "-m recent --name X --rcheck --seconds 10 -j A",
}

// genRuleSet draws nat and filter tables of two user chains, A and B, and
// up to eight rules in random chains: well-formed ones, or random words.
var genRuleSet = rapid.Custom(func(t *rapid.T) string {
	var b strings.Builder
	chains := []string{"PREROUTING", "OUTPUT", "POSTROUTING", "INPUT", "FORWARD", "A", "B"}
	for _, table := range []string{"nat", "filter"} {
		b.WriteString("*" + table + "\n:A - [0:0]\n:B - [0:0]\n")
		for range rapid.IntRange(0, 8).Draw(t, "rules") {
			c := rapid.SampledFrom(chains).Draw(t, "chain")
			rule := rapid.SampledFrom(goodRules).Draw(t, "good")
			if rapid.Float64Range(0, 1).Draw(t, "random") < 0.1 {
				rule = strings.Join(rapid.SliceOfN(rapid.SampledFrom(ruleWords), 0, 10).Draw(t, "words"), " ")
			}
			b.WriteString("-A " + c + " " + rule + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
})

// Property: random rule sets never make Parse or Evaluate panic; Parse
// either accepts them or names a line, and Evaluate of what it accepts
// either answers with shares that sum to 1 or says why it cannot.
func TestPropNoPanic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := genRuleSet.Draw(t, "rules")
		rules, err := iptrace.Parse([]byte(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error names no line: %v", err)
			}
			return
		}
		p := trace.Packet{
			Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"),
			Src:      netip.MustParseAddrPort(rapid.SampledFrom([]string{"198.18.1.5:40000", "[2001:db8::5]:40000"}).Draw(t, "src")),
			Dst:      netip.MustParseAddrPort(rapid.SampledFrom([]string{"198.19.0.1:80", "127.0.0.1:80", "[2001:db8::1]:80"}).Draw(t, "dst")),
			FromNode: rapid.Bool().Draw(t, "fromNode"),
			ToNode:   rapid.Bool().Draw(t, "toNode"),
		}
		o, _, err := rules.Evaluate(p)
		if err != nil || o.Verdict != ruleset.VerdictForward {
			return
		}
		sum := 0.0
		for _, c := range o.Targets {
			f, _ := c.Share.Float64()
			sum += f
		}
		if sum < 1-1e-12 || sum > 1+1e-12 {
			t.Fatalf("shares sum to %v:\n%s", sum, text)
		}
	})
}
