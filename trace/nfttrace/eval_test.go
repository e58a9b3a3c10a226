package nfttrace_test

import (
	"math/big"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

func choice(ep string, share int64, masq bool) ruleset.Choice {
	return ruleset.Choice{Target: ruleset.Target{Endpoint: netip.MustParseAddrPort(ep)}, Share: big.NewRat(1, share), Masquerade: masq}
}

func demoPort(name, port string, proto v1.Protocol) servicemap.PortName {
	return servicemap.PortName{Namespace: "demo", Name: name, Port: port, Protocol: proto}
}

// TestEvaluateDemo: the demo table as nft lists it sends each packet where
// the demo's Services say.
func TestEvaluateDemo(t *testing.T) {
	tb := demoTable(t, "demo-listed.nft")
	web, api, empty := demoPort("web", "http", v1.ProtocolTCP), demoPort("api", "https", v1.ProtocolTCP), demoPort("empty", "http", v1.ProtocolTCP)
	cart, shop, dns := demoPort("cart", "http", v1.ProtocolTCP), demoPort("shop", "http", v1.ProtocolTCP), demoPort("dns", "dns", v1.ProtocolUDP)
	tenMinutes, _ := affinity.ClientIP(600)
	want := map[string]trace.Outcome{
		demoPackets[0]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.1.11:8080", 2, false), choice("198.18.2.12:8080", 2, false)}},
		demoPackets[1]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.1.11:8080", 2, false), choice("198.18.2.12:8080", 2, false)}},
		demoPackets[2]:  {Verdict: ruleset.VerdictFirewall, Service: api, Kind: ruleset.KindLoadBalancerIP},
		demoPackets[3]:  {Verdict: ruleset.VerdictDrop, Service: api, Kind: ruleset.KindLoadBalancerIP},
		demoPackets[4]:  {Verdict: ruleset.VerdictFirewall, Service: api, Kind: ruleset.KindLoadBalancerIP},
		demoPackets[5]:  {Verdict: ruleset.VerdictReject, Service: empty, Kind: ruleset.KindClusterIP},
		demoPackets[6]:  {Verdict: ruleset.VerdictForward, Service: cart, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.1.41:8080", 2, false), choice("198.18.2.42:8080", 2, false)}, Affinity: tenMinutes},
		demoPackets[7]:  {Verdict: ruleset.VerdictForward, Service: shop, Kind: ruleset.KindNodePort, Targets: []ruleset.Choice{choice("198.18.1.31:8080", 1, false)}},
		demoPackets[8]:  {Verdict: ruleset.VerdictForward, Service: shop, Kind: ruleset.KindNodePort, Targets: []ruleset.Choice{choice("198.18.1.31:8080", 3, true), choice("198.18.2.32:8080", 3, true), choice("198.18.2.33:8080", 3, true)}, Masquerade: true, ShortCircuit: true},
		demoPackets[9]:  {Verdict: ruleset.VerdictDrop, Service: api, Kind: ruleset.KindNodePort},
		demoPackets[10]: {Verdict: ruleset.VerdictReject},
		demoPackets[11]: {Verdict: ruleset.VerdictForward, Service: dns, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.1.21:53", 1, false)}},
		demoPackets[12]: {Verdict: ruleset.VerdictForward, Service: dns, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.1.21:53", 1, true)}},
		demoPackets[13]: {},
		demoPackets[14]: {},
	}
	for _, s := range demoPackets {
		got, path, err := tb.Evaluate(packet(t, s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if diff := diffOutcomes(want[s], got); diff != "" {
			t.Errorf("%s (-want +got):\n%s\npath:\n%s", s, diff, path)
		}
	}
}

// table is a small table of family ip named t, as commands, for the
// semantics tests; body is its chains, sets and rules.
func table(t *testing.T, body string) *nfttrace.Table {
	t.Helper()
	tb, err := nfttrace.Parse("add table ip t\n" + body)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

const (
	preroutingNAT = "add chain ip t pre { type nat hook prerouting priority dstnat ; }\n"
	postrouting   = "add chain ip t post { type nat hook postrouting priority srcnat ; }\n"
	forward       = "add chain ip t fwd { type filter hook forward priority filter ; }\n"
)

// TestEvaluateSemantics: nftables' semantics, one at a time, on small
// tables; each case names what it would catch if the evaluator got it
// wrong.
func TestEvaluateSemantics(t *testing.T) {
	tcp := func(src, dst string) trace.Packet {
		return trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst)}
	}
	dnat := func(ep string, share int64, masq bool) trace.Outcome {
		return trace.Outcome{Verdict: ruleset.VerdictForward, Targets: []ruleset.Choice{choice(ep, share, masq)}}
	}
	for _, tc := range []struct {
		name   string
		body   string
		packet trace.Packet
		want   trace.Outcome
	}{{
		name:   "return goes back after the jump",
		body:   forward + "add chain ip t a\nadd rule ip t a return\nadd rule ip t a drop\nadd rule ip t fwd jump a\nadd rule ip t fwd reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "the end of a chain reached by goto returns to the caller of the chain that went there",
		body:   forward + "add chain ip t a\nadd chain ip t b\nadd rule ip t a goto b\nadd rule ip t a drop\nadd rule ip t fwd jump a\nadd rule ip t fwd reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "a goto from the base chain ends it",
		body:   forward + "add chain ip t b\nadd rule ip t fwd goto b\nadd rule ip t fwd reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{},
	}, {
		name:   "the base chain's drop policy",
		body:   "add chain ip t fwd { type filter hook forward priority 0 ; policy drop ; }\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictDrop},
	}, {
		name:   "base chains by priority, not by order",
		body:   "add chain ip t late { type filter hook forward priority 10 ; }\nadd chain ip t early { type filter hook forward priority filter - 10 ; }\nadd rule ip t late drop\nadd rule ip t early reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "accept ends the base chain only",
		body:   forward + "add chain ip t fwd2 { type filter hook forward priority 5 ; }\nadd rule ip t fwd accept\nadd rule ip t fwd drop\nadd rule ip t fwd2 reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "prefixes and ranges in an anonymous set",
		body:   forward + "add rule ip t fwd ip saddr { 10.0.0.0/8 , 198.18.0.1-198.18.0.9 } reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "outside the ranges",
		body:   forward + "add rule ip t fwd ip saddr { 10.0.0.0/8 , 198.18.0.1-198.18.0.4 } reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{},
	}, {
		name:   "a negated set",
		body:   forward + "add rule ip t fwd ip saddr != { 198.18.0.0/24 } drop\n",
		packet: tcp("198.18.1.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictDrop},
	}, {
		name:   "tcp dport does not match udp",
		body:   forward + "add rule ip t fwd tcp dport 80 drop\n",
		packet: trace.Packet{Protocol: v1.ProtocolUDP, Src: netip.MustParseAddrPort("198.18.0.5:1"), Dst: netip.MustParseAddrPort("198.18.0.6:80")},
		want:   trace.Outcome{},
	}, {
		name:   "an interval set of ports by concatenation",
		body:   forward + "add set ip t s { type inet_proto . inet_service ; flags interval ; }\nadd element ip t s { tcp . 70-90 }\nadd rule ip t fwd meta l4proto . th dport @s drop\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictDrop},
	}, {
		name:   "numgen: exact shares, merged by target",
		body:   preroutingNAT + "add chain ip t a\nadd chain ip t b\nadd rule ip t a dnat to 198.18.64.1:8080\nadd rule ip t b dnat to 198.18.64.2:8080\nadd rule ip t pre numgen random mod 3 vmap { 0 : goto a , 1 : goto b , 2 : goto b }\n",
		packet: tcp("198.18.0.5:1", "198.19.0.1:80"),
		want: trace.Outcome{Verdict: ruleset.VerdictForward, Targets: []ruleset.Choice{
			{Target: ruleset.Target{Endpoint: netip.MustParseAddrPort("198.18.64.1:8080")}, Share: big.NewRat(1, 3)},
			{Target: ruleset.Target{Endpoint: netip.MustParseAddrPort("198.18.64.2:8080")}, Share: big.NewRat(2, 3)},
		}},
	}, {
		name:   "dnat keeps the port it is not given",
		body:   preroutingNAT + "add rule ip t pre dnat to 198.18.64.1\n",
		packet: tcp("198.18.0.5:1", "198.19.0.1:80"),
		want:   dnat("198.18.64.1:80", 1, false),
	}, {
		name:   "the mark before the DNAT chain, then masquerade in postrouting",
		body:   preroutingNAT + postrouting + "add chain ip t ep\nadd rule ip t pre meta mark set meta mark | 0x10\nadd rule ip t pre goto ep\nadd rule ip t ep dnat to 198.18.64.1:8080\nadd rule ip t post meta mark & 0x10 == 0 return\nadd rule ip t post masquerade\n",
		packet: tcp("198.18.0.5:1", "198.19.0.1:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictForward, Masquerade: true, Targets: []ruleset.Choice{choice("198.18.64.1:8080", 1, true)}},
	}, {
		name:   "a mark set in the DNAT chain masquerades that target only",
		body:   preroutingNAT + postrouting + "add chain ip t ep\nadd rule ip t pre goto ep\nadd rule ip t ep mark set mark or 0x10\nadd rule ip t ep dnat to 198.18.64.1:8080\nadd rule ip t post mark and 0x10 == 0 return\nadd rule ip t post masquerade\n",
		packet: tcp("198.18.0.5:1", "198.19.0.1:80"),
		want:   dnat("198.18.64.1:8080", 1, true),
	}, {
		name:   "fib daddr type local: the node's own address goes to input",
		body:   preroutingNAT + "add chain ip t in { type filter hook input priority 0 ; }\nadd rule ip t pre fib daddr type local reject\n",
		packet: trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.9.9:1"), Dst: netip.MustParseAddrPort("198.18.0.1:80"), ToNode: true},
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "from the node to itself: output, postrouting, then input",
		body:   "add chain ip t in { type filter hook input priority 0 ; }\nadd chain ip t out { type filter hook output priority 0 ; }\nadd rule ip t out fib saddr type local accept\nadd rule ip t in ct state new reject\n",
		packet: trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("127.0.0.1:1"), Dst: netip.MustParseAddrPort("127.0.0.1:80"), FromNode: true},
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "ct state established does not match a new flow",
		body:   forward + "add rule ip t fwd ct state established,related drop\nadd rule ip t fwd ct state != established reject\n",
		packet: tcp("198.18.0.5:1", "198.18.0.6:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject},
	}, {
		name:   "a packet of the other family",
		body:   forward + "add rule ip t fwd drop\n",
		packet: tcp("[2001:db8::5]:1", "[2001:db8::6]:80"),
		want:   trace.Outcome{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, path, err := table(t, tc.body).Evaluate(tc.packet)
			if err != nil {
				t.Fatal(err)
			}
			if diff := diffOutcomes(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\npath:\n%s", diff, path)
			}
		})
	}
}

// TestEvaluateErrors: rules the evaluator cannot sum up in an Outcome are
// errors.
func TestEvaluateErrors(t *testing.T) {
	p := trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.0.5:1"), Dst: netip.MustParseAddrPort("198.18.0.6:80")}
	for _, tc := range []struct{ name, body, want string }{
		{"a loop", forward + "add chain ip t a\nadd rule ip t a jump a\nadd rule ip t fwd jump a\n", "nested jumps"},
		{"draws that end differently", forward + "add rule ip t fwd numgen random mod 2 vmap { 0 : drop }\n", "random draws end differently"},
		{"too many draws", forward + "add rule ip t fwd numgen random mod 4000000000 vmap { 0 : drop }\n", "random draws"},
		{"dnat in a filter chain", forward + "add rule ip t fwd dnat to 198.18.64.1:80\n", "dnat outside a nat chain"},
		{"masquerade in prerouting", preroutingNAT + "add rule ip t pre masquerade\n", "masquerade outside a nat chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := table(t, tc.body).Evaluate(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
	if _, _, err := table(t, forward).Evaluate(trace.Packet{Protocol: "ICMP", Src: p.Src, Dst: p.Dst}); err == nil {
		t.Error("an ICMP packet evaluated")
	}
}
