package nfttrace_test

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// flatPackets reach every kind of outcome of the flat demo table
// (testdata/flat*.nft: the nftables package's flat layout of web, empty,
// dns and ext in namespace ns1, on node-a, pod network 198.18.64.0/18).
var flatPackets = []string{
	"tcp 198.18.64.9:40000 -> 198.19.0.10:80 from pod",   // web: two endpoints
	"tcp 198.18.9.1:40000 -> 198.19.0.10:80",             // web from outside the pod network: masqueraded
	"tcp 198.18.64.2:40000 -> 198.19.0.10:80 from pod",   // web from its endpoint: hairpin
	"udp 198.18.64.9:40000 -> 198.19.0.53:80 from pod",   // dns: three endpoints
	"udp 198.18.9.1:40000 -> 198.19.0.53:80",             // dns from outside (see TestEvaluateFlat)
	"tcp 198.18.9.1:40000 -> 198.19.200.1:80",            // ext's external IP: masqueraded
	"tcp 198.18.9.1:40000 -> 198.19.128.1:80",            // web's LB IP, outside the source range
	"tcp 198.18.32.7:40000 -> 198.19.128.1:80",           // web's LB IP, inside: Local
	"tcp 198.18.0.1:40000 -> 198.18.0.1:30080 from node", // web's node port from the node: short-circuit
	"tcp 198.18.9.1:40000 -> 198.18.0.1:30080",           // web's node port: Local
	"tcp 198.18.9.1:40000 -> 198.19.0.11:80",             // empty: rejected
	"tcp 198.18.9.1:40000 -> 198.19.0.10:81",             // an unknown port of a cluster IP
	"tcp 198.18.9.1:40000 -> 198.18.77.7:80",             // not a Service
}

func flatPort(name string, proto v1.Protocol) servicemap.PortName {
	return servicemap.PortName{Namespace: "ns1", Name: name, Port: "p80", Protocol: proto}
}

// TestEvaluateFlat: the flat demo table, as rendered, as nft lists it and
// as nft -j lists it, sends each packet where its Services say: shares of
// exactly 1/N from the numgen in the targets maps' keys, the Service port
// from the elements' comments, the kind of frontend from the sets; UDP
// through its own rule and map (typed `udp dport`) as in the script.
func TestEvaluateFlat(t *testing.T) {
	web, empty, dns, ext := flatPort("web", v1.ProtocolTCP), flatPort("empty", v1.ProtocolTCP), flatPort("dns", v1.ProtocolUDP), flatPort("ext", v1.ProtocolTCP)
	webTargets := func(masq, masqSecond bool) []ruleset.Choice {
		return []ruleset.Choice{choice("198.18.64.2:8080", 2, masq), choice("198.18.65.2:8080", 2, masqSecond)}
	}
	dnsTargets := func(masq bool) []ruleset.Choice {
		return []ruleset.Choice{choice("198.18.64.5:53", 3, masq), choice("198.18.64.6:53", 3, masq), choice("198.18.65.7:53", 3, masq)}
	}
	want := map[string]trace.Outcome{
		flatPackets[0]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindClusterIP, Targets: webTargets(false, false)},
		flatPackets[1]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindClusterIP, Targets: webTargets(true, true), Masquerade: true},
		flatPackets[2]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindClusterIP, Targets: webTargets(true, false)},
		flatPackets[3]:  {Verdict: ruleset.VerdictForward, Service: dns, Kind: ruleset.KindClusterIP, Targets: dnsTargets(false)},
		flatPackets[4]:  {Verdict: ruleset.VerdictForward, Service: dns, Kind: ruleset.KindClusterIP, Targets: dnsTargets(true), Masquerade: true},
		flatPackets[5]:  {Verdict: ruleset.VerdictForward, Service: ext, Kind: ruleset.KindExternalIP, Targets: []ruleset.Choice{choice("198.18.64.8:8080", 2, true), choice("198.18.65.9:8080", 2, true)}, Masquerade: true},
		flatPackets[6]:  {Verdict: ruleset.VerdictFirewall, Service: web, Kind: ruleset.KindLoadBalancerIP},
		flatPackets[7]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindLoadBalancerIP, Targets: []ruleset.Choice{choice("198.18.64.2:8080", 1, false)}},
		flatPackets[8]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindNodePort, Targets: webTargets(true, true), Masquerade: true, ShortCircuit: true},
		flatPackets[9]:  {Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindNodePort, Targets: []ruleset.Choice{choice("198.18.64.2:8080", 1, false)}},
		flatPackets[10]: {Verdict: ruleset.VerdictReject, Service: empty, Kind: ruleset.KindClusterIP},
		flatPackets[11]: {Verdict: ruleset.VerdictReject},
		flatPackets[12]: {},
	}
	for _, name := range []string{"flat.nft", "flat-listed.nft", "flat-listed.json"} {
		tb := demoTable(t, name)
		for _, s := range flatPackets {
			got, path, err := tb.Evaluate(packet(t, s))
			if err != nil {
				t.Fatalf("%s: %s: %v", name, s, err)
			}
			if diff := diffOutcomes(want[s], got); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s\npath:\n%s", name, s, diff, path)
			}
		}
	}
}

// targetsMap is a data map from address . port . a draw among 2 to an
// address and a port, with two elements for 198.19.0.10:80.
const targetsMap = "add map ip t m { typeof ip daddr . th dport . numgen random mod 2 : ip daddr . th dport ; }\n" +
	"add element ip t m { 198.19.0.10 . 80 . 0 comment \"ns1/web:p80/TCP\" : 198.18.64.1 . 8080, 198.19.0.10 . 80 . 1 : 198.18.64.2 . 8080 }\n"

// TestEvaluateFlatSemantics: what the flat layout's rules rely on, one at
// a time, on small tables; each case names what it would catch.
func TestEvaluateFlatSemantics(t *testing.T) {
	pkt := func(proto v1.Protocol, src, dst string) trace.Packet {
		return trace.Packet{Protocol: proto, Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst)}
	}
	web := flatPort("web", v1.ProtocolTCP)
	spread := func(masq1, masq2 bool) trace.Outcome {
		return trace.Outcome{Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindExternalIP,
			Targets: []ruleset.Choice{choice("198.18.64.1:8080", 2, masq1), choice("198.18.64.2:8080", 2, masq2)}}
	}
	masqueradeMarked := postrouting + "add rule ip t post ct status dnat ip saddr . ip daddr { 198.18.64.1 . 198.18.64.1 } meta mark set meta mark | 0x4000\n" +
		"add rule ip t post meta mark & 0x4000 == 0 return\nadd rule ip t post masquerade\n"
	for _, tc := range []struct {
		name   string
		body   string
		packet trace.Packet
		want   trace.Outcome
	}{{
		name:   "a numgen in a map's key spreads over the map's elements, 1/N each, the Service port from the first element's comment",
		body:   preroutingNAT + targetsMap + "add rule ip t pre dnat ip to ip daddr . th dport . numgen random mod 2 map @m\n",
		packet: pkt(v1.ProtocolTCP, "198.18.9.1:1", "198.19.0.10:80"),
		want:   spread(false, false),
	}, {
		name: "a key the map lacks ends the rule, not the chain",
		body: preroutingNAT + targetsMap + "add rule ip t pre dnat ip to ip daddr . th dport . numgen random mod 2 map @m\n" +
			"add rule ip t pre dnat to 198.18.64.9:80\n",
		packet: pkt(v1.ProtocolTCP, "198.18.9.1:1", "198.19.0.11:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictForward, Targets: []ruleset.Choice{choice("198.18.64.9:80", 1, false)}},
	}, {
		name: "tcp dport in the key needs TCP: a UDP flow goes on to the next rule",
		body: preroutingNAT + targetsMap + "add rule ip t pre dnat ip to ip daddr . tcp dport . numgen random mod 2 map @m\n" +
			"add rule ip t pre dnat to 198.18.64.9:80\n",
		packet: pkt(v1.ProtocolUDP, "198.18.9.1:1", "198.19.0.10:80"),
		want:   trace.Outcome{Verdict: ruleset.VerdictForward, Targets: []ruleset.Choice{choice("198.18.64.9:80", 1, false)}},
	}, {
		name:   "ct status dnat holds after the DNAT: the hairpin target alone is masqueraded, and not the Outcome",
		body:   preroutingNAT + targetsMap + masqueradeMarked + "add rule ip t pre dnat ip to ip daddr . th dport . numgen random mod 2 map @m\n",
		packet: pkt(v1.ProtocolTCP, "198.18.64.1:1", "198.19.0.10:80"),
		want:   spread(true, false),
	}, {
		name:   "a mark the DNAT rule sets counts for the Outcome",
		body:   preroutingNAT + targetsMap + masqueradeMarked + "add rule ip t pre meta mark set meta mark | 0x4000 dnat ip to ip daddr . th dport . numgen random mod 2 map @m\n",
		packet: pkt(v1.ProtocolTCP, "198.18.9.1:1", "198.19.0.10:80"),
		want:   func() trace.Outcome { o := spread(true, true); o.Masquerade = true; return o }(),
	}, {
		name: "rules that fail before their numgen draw nothing: twenty of them stay within the bound on draws",
		body: preroutingNAT + "add map ip t big { typeof ip daddr . numgen random mod 1000 : ip daddr . th dport ; }\n" +
			strings.Repeat("add rule ip t pre ip daddr 198.19.9.9 dnat ip to ip daddr . numgen random mod 1000 map @big\n", 20),
		packet: pkt(v1.ProtocolTCP, "198.18.9.1:1", "198.19.0.10:80"),
		want:   trace.Outcome{},
	}, {
		name: "a frontend set's element names the Service port and its kind: a node port without an address",
		body: forward + "add set ip t np { typeof meta l4proto . th dport ; }\n" +
			"add element ip t np { tcp . 30080 comment \"ns1/web:p80/TCP\" }\nadd rule ip t fwd meta l4proto . th dport @np reject\n",
		packet: pkt(v1.ProtocolTCP, "198.18.9.1:1", "198.18.0.7:30080"),
		want:   trace.Outcome{Verdict: ruleset.VerdictReject, Service: web, Kind: ruleset.KindNodePort},
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

// TestEvaluateRetypedMap: a verdict map declared again as a data map keeps
// its verdict elements; a DNAT through it is an error, not a panic.
func TestEvaluateRetypedMap(t *testing.T) {
	tb := table(t, preroutingNAT+"add map ip t m { typeof ip daddr : verdict ; }\nadd element ip t m { 198.19.0.10 : drop }\n"+
		"add map ip t m { typeof ip daddr : ip daddr . th dport ; }\nadd rule ip t pre dnat ip to ip daddr map @m\n")
	p := trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.9.1:1"), Dst: netip.MustParseAddrPort("198.19.0.10:80")}
	if _, _, err := tb.Evaluate(p); err == nil || !strings.Contains(err.Error(), "no address and port") {
		t.Fatalf("error %v, want one that says the element has no address and port", err)
	}
}

// TestParseFlatErrors: what the flat layout's constructs do not allow is
// an error that names the line.
func TestParseFlatErrors(t *testing.T) {
	head := "add table ip t\nadd chain ip t c { type nat hook prerouting priority dstnat ; }\n"
	for _, tc := range []struct{ name, text, want string }{
		{"dnat to a key without a map", head + "add rule ip t c dnat ip to ip daddr . th dport\n", "line 3"},
		{"dnat through a verdict map", head + "add map ip t m { type ipv4_addr : verdict ; }\nadd rule ip t c dnat ip to ip daddr map @m\n", "line 4"},
		{"dnat through a map to a port alone", head + "add map ip t m { typeof ip daddr : th dport ; }\nadd rule ip t c dnat ip to ip daddr map @m\n", "address and a port"},
		{"typeof of an unknown expression", head + "add set ip t s { typeof ip dscp ; }\n", "line 3"},
		{"a data map's value of too few fields", head + "add map ip t m { typeof ip daddr : ip daddr . th dport ; }\nadd element ip t m { 198.19.0.1 : 198.18.64.1 }\n", "line 4"},
		{"a range as a data map's value", head + "add map ip t m { typeof ip daddr : ip daddr . th dport ; }\nadd element ip t m { 198.19.0.1 : 198.18.64.0/24 . 80 }\n", "line 4"},
		{"a data map used as a set", head + "add map ip t m { typeof ip daddr : ip daddr . th dport ; }\nadd rule ip t c ip daddr @m accept\n", "line 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nfttrace.Parse(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}
