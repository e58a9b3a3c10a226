package iptrace_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// summary writes an Outcome on one line, for table tests.
func summary(o trace.Outcome) string {
	var b strings.Builder
	b.WriteString(o.Verdict.String())
	if o.Service.Name != "" {
		fmt.Fprintf(&b, " %v/%s (%s)", o.Service, o.Service.Protocol, o.Kind)
	}
	for _, c := range o.Targets {
		fmt.Fprintf(&b, " %v %s", c.Endpoint, c.Share.FloatString(3))
		if c.Masquerade {
			b.WriteString(" masq")
		}
	}
	if o.Masquerade {
		b.WriteString(" [masquerade]")
	}
	if o.ShortCircuit {
		b.WriteString(" [short-circuit]")
	}
	if o.Affinity.Enabled() {
		fmt.Fprintf(&b, " [affinity %ds]", o.Affinity.Seconds())
	}
	return b.String()
}

func parseFile(t *testing.T, name string) *iptrace.Rules {
	t.Helper()
	text, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := iptrace.Parse(text)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return rules
}

// packet reads "PROTO SRC -> DST [from pod|node|outside]", with "to node"
// at the end for a destination that is the node's.
func packet(t *testing.T, s string) trace.Packet {
	t.Helper()
	toNode := strings.HasSuffix(s, " to node")
	p, err := trace.ParsePacket(strings.TrimSuffix(s, " to node"))
	if err != nil {
		t.Fatal(err)
	}
	p.ToNode = toNode
	return p
}

// TestEvaluateKernelReadBack evaluates what iptables-save -c printed on
// this project's test machine (iptables v1.8.9, nf_tables) after the
// iptables reference proxy synced the demo manifests (node-a, then 198.18.0.1,
// no cluster CIDR, localhost node ports on) in a fresh network namespace:
// the kernel's canonical forms (-d ADDR/32, --set-xmark, 11-decimal
// probabilities, recent options reordered, REJECT --reject-with) and rule
// counters.
func TestEvaluateKernelReadBack(t *testing.T) {
	rules := parseFile(t, "testdata/demo-kernel-save.txt")
	for _, tc := range []struct{ packet, want string }{
		{"tcp 198.18.1.5:40000 -> 198.19.0.10:80 from pod", "forwarded demo/web:http/TCP (cluster IP) 198.18.1.11:8080 0.500 198.18.2.12:8080 0.500"},
		{"tcp 198.18.1.11:40000 -> 198.19.0.10:80 from pod", "forwarded demo/web:http/TCP (cluster IP) 198.18.1.11:8080 0.500 masq 198.18.2.12:8080 0.500"},
		{"tcp 198.18.1.5:40000 -> 198.19.0.20:80 from pod", "forwarded demo/shop:http/TCP (cluster IP) 198.18.1.31:8080 0.333 198.18.2.32:8080 0.333 198.18.2.33:8080 0.333"},
		{"tcp 198.18.1.5:40000 -> 198.19.0.30:80 from pod", "forwarded demo/cart:http/TCP (cluster IP) 198.18.1.41:8080 0.500 198.18.2.42:8080 0.500 [affinity 600s]"},
		{"udp 198.18.1.5:40000 -> 198.19.0.53:53 from pod", "forwarded demo/dns:dns/UDP (cluster IP) 198.18.1.21:53 1.000"},
		{"tcp 198.18.1.5:40000 -> 198.19.0.53:53 from pod", "not a Service"},
		{"tcp 198.18.1.5:40000 -> 198.19.0.40:80 from pod", "rejected demo/empty:http/TCP (cluster IP)"},
		{"tcp 198.18.200.9:40000 -> 198.18.0.1:30080 to node", "forwarded demo/shop:http/TCP (node port) 198.18.1.31:8080 1.000"},
		{"tcp 198.18.0.1:40000 -> 198.18.0.1:30080 from node to node", "forwarded demo/shop:http/TCP (node port) 198.18.1.31:8080 0.333 masq 198.18.2.32:8080 0.333 masq 198.18.2.33:8080 0.333 masq [masquerade] [short-circuit]"},
		{"tcp 127.0.0.1:40000 -> 127.0.0.1:30080 from node", "forwarded demo/shop:http/TCP (node port) 198.18.1.31:8080 0.333 masq 198.18.2.32:8080 0.333 masq 198.18.2.33:8080 0.333 masq [masquerade] [short-circuit]"},
		{"tcp 198.18.200.9:40000 -> 127.0.0.1:30081", "dropped"},
		{"tcp 198.18.200.9:40000 -> 198.18.0.1:30443 to node", "dropped demo/api:https/TCP (node port)"},
		{"tcp 198.18.200.9:40000 -> 198.19.100.1:443", "dropped demo/api:https/TCP (load-balancer IP)"},
		{"tcp 198.18.201.9:40000 -> 198.19.100.1:443", "dropped by the source-range firewall demo/api:https/TCP (load-balancer IP)"},
		{"tcp 198.18.0.1:40000 -> 198.19.100.1:443 from node", "dropped by the source-range firewall demo/api:https/TCP (load-balancer IP)"},
		{"tcp 198.18.200.9:40000 -> 198.18.0.1:30256 to node", "not a Service"},
		{"tcp 198.18.200.9:40000 -> 203.0.113.1:80", "not a Service"},
	} {
		o, path, err := rules.Evaluate(packet(t, tc.packet))
		if err != nil {
			t.Errorf("%s: %v", tc.packet, err)
			continue
		}
		if got := summary(o); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s\npath:\n%s", tc.packet, got, tc.want, path)
		}
	}
}

// TestShares: the shares are the exact products of the decimals written:
// the kernel's 0.33333333349 and 0.50000000000 give 0.33333333349 and
// 0.333333333255 twice, within 1e-9 of 1/3 but not equal to it.
func TestShares(t *testing.T) {
	rules := parseFile(t, "testdata/demo-kernel-save.txt")
	o, _, err := rules.Evaluate(packet(t, "tcp 198.18.1.5:40000 -> 198.19.0.20:80 from pod"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range o.Targets {
		got = append(got, c.Share.FloatString(12))
	}
	want := []string{"0.333333333490", "0.333333333255", "0.333333333255"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("shares (-want +got):\n%s", d)
	}
}
