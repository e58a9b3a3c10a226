package iptrace_test

import (
	"math/big"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// TestWalk: jumps, gotos, RETURN, marks and the order of the hooks, each on
// a small rule set of its own.
func TestWalk(t *testing.T) {
	const dnat = "-A SEP -m comment --comment ns/a:p -p tcp -j DNAT --to-destination 198.18.1.1:8080\n"
	for _, tc := range []struct{ name, rules, packet, want string }{
		{
			name:   "RETURN goes back to the caller",
			rules:  "*nat\n:A - [0:0]\n:SEP - [0:0]\n-A PREROUTING -j A\n-A PREROUTING -p tcp -m comment --comment \"ns/a:p cluster IP\" -j SEP\n-A A -j RETURN\n-A A -j DROP\n" + dnat + "COMMIT\n",
			packet: "tcp 198.18.1.5:1 -> 198.19.0.1:80", want: "forwarded ns/a:p/TCP (cluster IP) 198.18.1.1:8080 1.000",
		},
		{
			name:   "a goto's RETURN returns past the chain that jumped",
			rules:  "*nat\n:A - [0:0]\n:B - [0:0]\n:SEP - [0:0]\n-A PREROUTING -j A\n-A PREROUTING -j SEP\n-A A -g B\n-A A -j DROP\n-A B -j RETURN\n" + dnat + "COMMIT\n",
			packet: "tcp 198.18.1.5:1 -> 198.19.0.1:80", want: "forwarded ns/a:p/TCP (FrontendKind(0)) 198.18.1.1:8080 1.000",
		},
		{
			name:   "RETURN in a built-in chain applies its policy",
			rules:  "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -j RETURN\n-A FORWARD -j ACCEPT\nCOMMIT\n",
			packet: "tcp 198.18.1.5:1 -> 198.19.0.1:80", want: "dropped",
		},
		{
			name:   "marks: --set-mark, --and-mark, a mark match",
			rules:  "*nat\n:SEP - [0:0]\n-A PREROUTING -j MARK --set-mark 0x4001\n-A PREROUTING -j MARK --and-mark 0x4000\n-A PREROUTING -m mark --mark 0x4000 -j SEP\n" + dnat + "-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE\nCOMMIT\n",
			packet: "tcp 198.18.1.5:1 -> 198.19.0.1:80", want: "forwarded ns/a:p/TCP (FrontendKind(0)) 198.18.1.1:8080 1.000 masq [masquerade]",
		},
		{
			name:   "a mark set in the endpoint's chain is no decision to masquerade",
			rules:  "*nat\n:SEP - [0:0]\n-A PREROUTING -j SEP\n-A SEP -j MARK --or-mark 0x4000\n" + dnat + "-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE\nCOMMIT\n",
			packet: "tcp 198.18.1.5:1 -> 198.19.0.1:80", want: "forwarded ns/a:p/TCP (FrontendKind(0)) 198.18.1.1:8080 1.000 masq",
		},
		{
			name:   "from the node to itself: output, then input",
			rules:  "*filter\n-A INPUT -p tcp -m comment --comment \"ns/a:p has no endpoints\" -m addrtype --dst-type LOCAL --dport 30080 -j REJECT\nCOMMIT\n",
			packet: "tcp 198.18.0.1:1 -> 198.18.0.1:30080 from node to node", want: "rejected ns/a:p/TCP (node port)",
		},
		{
			name:   "a translated destination is not the node's",
			rules:  "*nat\n:SEP - [0:0]\n-A OUTPUT -j SEP\n" + dnat + "COMMIT\n*filter\n-A INPUT -j DROP\n-A OUTPUT -m addrtype --dst-type LOCAL -j DROP\nCOMMIT\n",
			packet: "tcp 198.18.0.1:1 -> 198.18.0.1:30080 from node to node", want: "forwarded ns/a:p/TCP (FrontendKind(0)) 198.18.1.1:8080 1.000",
		},
		{
			name:   "--src-type LOCAL is the node's own traffic",
			rules:  "*filter\n-A FORWARD -m addrtype --src-type LOCAL -j DROP\n-A OUTPUT -m addrtype ! --src-type LOCAL -j DROP\nCOMMIT\n",
			packet: "tcp 198.18.0.1:1 -> 198.19.0.1:80 from node", want: "not a Service",
		},
	} {
		rules, err := iptrace.Parse([]byte(tc.rules))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		o, path, err := rules.Evaluate(packet(t, tc.packet))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := summary(o); got != tc.want {
			t.Errorf("%s: got %q, want %q\npath:\n%s", tc.name, got, tc.want, path)
		}
	}
}

// TestWalkErrors: what an Outcome cannot say is an error.
func TestWalkErrors(t *testing.T) {
	for _, tc := range []struct{ name, rules, want string }{
		{"a flow split between a DNAT and a drop", "*nat\n-A PREROUTING -m statistic --mode random --probability 0.5 -j DNAT --to-destination 198.18.1.1:80\n-A PREROUTING -j DROP\nCOMMIT\n", "the flow splits: forwarded"},
		{"a DNAT to another family", "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination [2001:db8::1]:80\nCOMMIT\n", "another family"},
	} {
		rules, err := iptrace.Parse([]byte(tc.rules))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if _, _, err := rules.Evaluate(packet(t, "tcp 198.18.1.5:1 -> 198.19.0.1:80")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestPath: the steps of every branch, each once, with the share of flows
// that take it.
func TestPath(t *testing.T) {
	rules := parseFile(t, "testdata/demo-kernel-save.txt")
	_, path, err := rules.Evaluate(packet(t, "tcp 198.18.1.5:40000 -> 198.19.0.10:80 from pod"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"nat PREROUTING 1 -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
		"nat PREROUTING 1 -A KUBE-SERVICES -d 198.19.0.10/32 -p tcp -m comment --comment \"demo/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XRY76EGRC3BSCIIJ",
		"nat PREROUTING 1/2 -A KUBE-SVC-XRY76EGRC3BSCIIJ -m comment --comment \"demo/web:http -> 198.18.1.11:8080\" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-Y3DDE2PFL35OXC4K",
		"nat PREROUTING 1/2 -A KUBE-SEP-Y3DDE2PFL35OXC4K -p tcp -m comment --comment \"demo/web:http\" -m tcp -j DNAT --to-destination 198.18.1.11:8080",
		"filter FORWARD 1 -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL",
		"filter FORWARD 1 -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD",
		"filter FORWARD 1 -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
		"filter FORWARD 1 -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES",
		"filter FORWARD 1 :FORWARD ACCEPT",
		"nat POSTROUTING 1 -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
		"nat POSTROUTING 1 -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
		"nat POSTROUTING 1 :POSTROUTING ACCEPT",
		"nat PREROUTING 1/2 -A KUBE-SVC-XRY76EGRC3BSCIIJ -m comment --comment \"demo/web:http -> 198.18.2.12:8080\" -j KUBE-SEP-3RCI2EW5533LCIO4",
		"nat PREROUTING 1/2 -A KUBE-SEP-3RCI2EW5533LCIO4 -p tcp -m comment --comment \"demo/web:http\" -m tcp -j DNAT --to-destination 198.18.2.12:8080",
	}
	var got []string
	for _, s := range path {
		got = append(got, s.Hook+" "+s.Share.RatString()+" "+s.Rule)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("path (-want +got):\n%s", d)
	}
}

// TestAgree: which differences Agree reports, and which it lets pass.
func TestAgree(t *testing.T) {
	web := servicemap.PortName{Namespace: "ns", Name: "web", Port: "http", Protocol: v1.ProtocolTCP}
	ep := func(s string, share *big.Rat, masq bool) ruleset.Choice {
		return ruleset.Choice{Target: ruleset.Target{Endpoint: netip.MustParseAddrPort(s)}, Share: share, Masquerade: masq}
	}
	aff, _ := affinity.ClientIP(600)
	half, third := big.NewRat(1, 2), big.NewRat(1, 3)
	kernelThird, _ := new(big.Rat).SetString("0.33333333349")
	spec := trace.Outcome{Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindExternalIP, Affinity: aff,
		Targets: []ruleset.Choice{ep("198.18.1.1:80", third, false), ep("198.18.1.2:80", third, false), ep("198.18.1.3:80", third, false)}}
	with := func(f func(*trace.Outcome)) trace.Outcome {
		o := spec
		o.Targets = append([]ruleset.Choice(nil), spec.Targets...)
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name string
		got  trace.Outcome
		want string // "" when Agree passes
	}{
		{"equal", spec, ""},
		{"targets in another order, Local unset", with(func(o *trace.Outcome) {
			o.Targets[0], o.Targets[2] = o.Targets[2], o.Targets[0]
			o.Targets[1].Local = true
		}), ""},
		{"a share within 1e-9", with(func(o *trace.Outcome) { o.Targets[0].Share = kernelThird }), ""},
		{"a zero Kind for an external IP", with(func(o *trace.Outcome) { o.Kind = 0 }), ""},
		{"another kind", with(func(o *trace.Outcome) { o.Kind = ruleset.KindNodePort }), "frontend kind node port, want external IP"},
		{"a wrong share", with(func(o *trace.Outcome) { o.Targets[0].Share = half }), "share 0.500000000000, want 0.333333333333"},
		{"a target masqueraded", with(func(o *trace.Outcome) { o.Targets[1].Masquerade = true }), "target 198.18.1.2:80: masquerade true, want false"},
		{"a target missing", with(func(o *trace.Outcome) { o.Targets = o.Targets[:2] }), "2 targets"},
		{"another endpoint", with(func(o *trace.Outcome) { o.Targets[2] = ep("198.18.1.9:80", third, false) }), "targets ["},
		{"another Service", with(func(o *trace.Outcome) { o.Service.Name = "api" }), "Service port ns/api:http, want ns/web:http"},
		{"no affinity", with(func(o *trace.Outcome) { o.Affinity = affinity.Policy{} }), "affinity None, want ClientIP(600s)"},
		{"masqueraded", with(func(o *trace.Outcome) { o.Masquerade = true }), "masquerade true, want false"},
		{"short-circuited", with(func(o *trace.Outcome) { o.ShortCircuit = true }), "short-circuit true, want false"},
		{"dropped", trace.Outcome{Verdict: ruleset.VerdictDrop}, "result dropped, want forwarded"},
	} {
		err := iptrace.Agree(spec, tc.got)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
