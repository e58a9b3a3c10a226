package trace_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

var (
	podCIDR = netip.MustParsePrefix("198.18.64.0/18")
	nodeIP  = netip.MustParseAddr("198.18.0.1")
)

// cluster builds the Ruleset of node-a for testdata/cluster.yaml with cfg's
// changes; any warning or skipped object fails the test.
func cluster(t *testing.T, mods ...func(*ruleset.Config)) *ruleset.Ruleset {
	t.Helper()
	data, err := os.ReadFile("testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	parsed, warnings, err := manifests.Parse(data)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("testdata/cluster.yaml: %v %v", err, warnings)
	}
	cfg := ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}, ClusterCIDRs: []netip.Prefix{podCIDR}}
	for _, m := range mods {
		m(&cfg)
	}
	var objs []any
	for _, s := range parsed.Services {
		objs = append(objs, s)
	}
	for _, es := range parsed.EndpointSlices {
		objs = append(objs, es)
	}
	return fixture.Ruleset(t, cfg, objs...)
}

// summary writes an Outcome on one line, for table tests.
func summary(o trace.Outcome) string {
	if o.Verdict != ruleset.VerdictForward {
		if o.Service.Name == "" {
			return o.Verdict.String()
		}
		return fmt.Sprintf("%s %s %s", o.Service.Name, o.Kind, o.Verdict)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s ->", o.Service.Name, o.Kind)
	for _, c := range o.Targets {
		fmt.Fprintf(&b, " %v %s", c.Endpoint, c.Share.RatString())
		if c.Masquerade {
			b.WriteString(" masq")
		}
	}
	if o.ShortCircuit {
		b.WriteString(" (short-circuit)")
	}
	if o.Affinity.Enabled() {
		fmt.Fprintf(&b, " affinity %ds", o.Affinity.Seconds())
	}
	return b.String()
}

// Packets from a pod on node-a, from the node, and from outside.
func fromPod(dst string) trace.Packet {
	return trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.64.100:40000"), Dst: netip.MustParseAddrPort(dst)}
}

func fromNode(dst string) trace.Packet {
	p := fromPod(dst)
	p.Src, p.FromNode = netip.AddrPortFrom(nodeIP, 40000), true
	p.ToNode = p.Dst.Addr() == nodeIP
	return p
}

// fromNodeAt is a packet the node sends from src, one of its addresses.
func fromNodeAt(src, dst string) trace.Packet {
	p := fromNode(dst)
	p.Src = netip.AddrPortFrom(netip.MustParseAddr(src), 40000)
	return p
}

func fromOutside(src, dst string) trace.Packet {
	p := fromPod(dst)
	p.Src = netip.MustParseAddrPort(src)
	p.ToNode = p.Dst.Addr() == nodeIP
	return p
}

func udp(p trace.Packet) trace.Packet {
	p.Protocol = v1.ProtocolUDP
	return p
}

func TestTrace(t *testing.T) {
	rs := cluster(t)
	const out = "203.0.113.9:40000"
	tests := []struct {
		name   string
		packet trace.Packet
		want   string
	}{
		{"cluster IP from a pod", fromPod("198.19.0.10:80"), "web cluster IP -> 198.18.64.2:8080 1/2 198.18.65.2:8080 1/2"},
		{"cluster IP from the node is masqueraded", fromNode("198.19.0.10:80"), "web cluster IP -> 198.18.64.2:8080 1/2 masq 198.18.65.2:8080 1/2 masq"},
		{"cluster IP from outside the pod CIDR is masqueraded", fromOutside(out, "198.19.0.10:80"), "web cluster IP -> 198.18.64.2:8080 1/2 masq 198.18.65.2:8080 1/2 masq"},
		{"hairpin: a pod reaching its own Service", fromOutside("198.18.64.2:40000", "198.19.0.10:80"), "web cluster IP -> 198.18.64.2:8080 1/2 masq 198.18.65.2:8080 1/2"},
		{"other port of a cluster IP", fromPod("198.19.0.10:81"), "not a Service"},
		{"other protocol of a cluster IP", udp(fromPod("198.19.0.10:80")), "not a Service"},
		{"no endpoints: cluster IP", fromPod("198.19.0.11:80"), "empty cluster IP rejected"},
		{"no endpoints: node port", fromOutside(out, "198.18.0.1:30011"), "empty node port rejected"},
		{"eTP Local, none here: from outside", fromOutside(out, "198.19.128.12:80"), "lb-elsewhere load-balancer IP dropped"},
		{"eTP Local, none here: node port from outside", fromOutside(out, "198.18.0.1:30012"), "lb-elsewhere node port dropped"},
		{"eTP Local, none here: from a pod", fromPod("198.19.128.12:80"), "lb-elsewhere load-balancer IP -> 198.18.65.12:8080 1 (short-circuit)"},
		{"eTP Local, none here: from the node", fromNode("198.19.128.12:80"), "lb-elsewhere load-balancer IP -> 198.18.65.12:8080 1 masq (short-circuit)"},
		{"eTP Local, none here: node port from the node", fromNode("198.18.0.1:30012"), "lb-elsewhere node port -> 198.18.65.12:8080 1 masq (short-circuit)"},
		{"eTP Local: from outside, local endpoint only, source kept", fromOutside(out, "198.19.128.13:80"), "lb-here load-balancer IP -> 198.18.64.13:8080 1 affinity 10800s"},
		{"eTP Local: from a pod elsewhere, every endpoint", fromOutside("198.18.65.100:40000", "198.19.128.13:80"), "lb-here load-balancer IP -> 198.18.64.13:8080 1/2 198.18.65.13:8080 1/2 (short-circuit) affinity 10800s"},
		{"eTP Local: from the node with a pod address, as a pod: not masqueraded", fromNodeAt("198.18.64.1", "198.19.128.13:80"), "lb-here load-balancer IP -> 198.18.64.13:8080 1/2 198.18.65.13:8080 1/2 (short-circuit) affinity 10800s"},
		{"eTP Cluster: external IP masqueraded", fromOutside(out, "198.19.100.14:80"), "guarded external IP -> 198.18.65.14:8080 1 masq"},
		{"source range: allowed", fromOutside("198.18.200.7:40000", "198.19.128.14:80"), "guarded load-balancer IP -> 198.18.65.14:8080 1 masq"},
		{"source range: refused", fromOutside(out, "198.19.128.14:80"), "guarded load-balancer IP dropped by the source-range firewall"},
		{"source range: not on the external IP", fromOutside(out, "198.19.100.14:80"), "guarded external IP -> 198.18.65.14:8080 1 masq"},
		{"source range: not on the node port", fromOutside(out, "198.18.0.1:30014"), "guarded node port -> 198.18.65.14:8080 1 masq"},
		{"node port on an address that is not the node's", fromOutside(out, "198.18.0.2:30014"), "not a Service"},
		{"node port on localhost: off by default", fromNode("127.0.0.1:30014"), "not a Service"},
		{"iTP Local, none here", udp(fromPod("198.19.0.15:53")), "node-local cluster IP dropped"},
		{"not a Service address", fromPod("198.19.0.99:80"), "not a Service"},
		{"other family", trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("[2001:db8::1]:40000"), Dst: netip.MustParseAddrPort("[2001:db8::10]:80")}, "not a Service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summary(trace.Trace(rs, tt.packet, trace.Options{})); got != tt.want {
				t.Errorf("Trace(%v)\n got %s\nwant %s", tt.packet, got, tt.want)
			}
		})
	}
}

func TestTraceConfig(t *testing.T) {
	tests := []struct {
		name   string
		mods   func(*ruleset.Config)
		packet trace.Packet
		opts   trace.Options
		want   string
	}{
		{"masquerade-all", func(c *ruleset.Config) { c.MasqueradeAll = true }, fromPod("198.19.0.10:80"),
			trace.Options{}, "web cluster IP -> 198.18.64.2:8080 1/2 masq 198.18.65.2:8080 1/2 masq"},
		{"no cluster CIDRs: the node's own traffic keeps its source", func(c *ruleset.Config) { c.ClusterCIDRs = nil }, fromNode("198.19.0.10:80"),
			trace.Options{}, "web cluster IP -> 198.18.64.2:8080 1/2 198.18.65.2:8080 1/2"},
		{"no cluster CIDRs: a pod's traffic to an eTP Local IP is outside traffic", func(c *ruleset.Config) { c.ClusterCIDRs = nil }, fromPod("198.19.128.12:80"),
			trace.Options{}, "lb-elsewhere load-balancer IP dropped"},
		{"localhost node ports", func(c *ruleset.Config) { c.LocalhostNodePorts = true }, fromNode("127.0.0.1:30014"),
			trace.Options{}, "guarded node port -> 198.18.65.14:8080 1 masq"},
		{"node port addresses: listed", func(c *ruleset.Config) { c.NodePortAddresses = []netip.Addr{nodeIP} }, fromOutside("203.0.113.9:1", "198.18.0.1:30014"),
			trace.Options{}, "guarded node port -> 198.18.65.14:8080 1 masq"},
		{"node port addresses: another node address", func(c *ruleset.Config) { c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.3")} }, fromOutside("203.0.113.9:1", "198.18.0.1:30014"),
			trace.Options{}, "not a Service"},
		{"unknown port of a cluster IP, rejected", nil, fromPod("198.19.0.10:81"),
			trace.Options{RejectUnknownPorts: true}, "rejected"},
		{"unallocated address of the Service CIDR, dropped", func(c *ruleset.Config) { c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")} },
			fromPod("198.19.0.99:80"), trace.Options{DropUnallocated: true}, "dropped"},
		{"unallocated address of the Service CIDR, left alone without DropUnallocated", func(c *ruleset.Config) { c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")} },
			fromPod("198.19.0.99:80"), trace.Options{}, "not a Service"},
		{"no endpoints, source range refused: rejected", nil, fromOutside("203.0.113.9:1", "198.19.128.16:80"),
			trace.Options{}, "shut load-balancer IP rejected"},
		{"no endpoints, source range refused: firewalled first", nil, fromOutside("203.0.113.9:1", "198.19.128.16:80"),
			trace.Options{FirewallFirst: true}, "shut load-balancer IP dropped by the source-range firewall"},
		{"no endpoints, source range allowed: rejected also when firewalled first", nil, fromOutside("198.18.200.7:1", "198.19.128.16:80"),
			trace.Options{FirewallFirst: true}, "shut load-balancer IP rejected"},
		{"no endpoints: the node's own flow to an external IP rejected", nil, fromNode("198.19.100.16:80"),
			trace.Options{}, "shut external IP rejected"},
		{"no endpoints: the node's own flow to an external IP left alone when rejects are for arriving flows", nil, fromNode("198.19.100.16:80"),
			trace.IPTablesMode, "not a Service"},
		{"no endpoints: an arriving flow to an external IP still rejected", nil, fromOutside("203.0.113.9:1", "198.19.100.16:80"),
			trace.IPTablesMode, "shut external IP rejected"},
		{"no endpoints: node port on an unlisted node address left alone", func(c *ruleset.Config) { c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.3")} },
			fromOutside("203.0.113.9:1", "198.18.0.1:30011"), trace.Options{}, "not a Service"},
		{"no endpoints: node port rejected on every node address", func(c *ruleset.Config) { c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.3")} },
			fromOutside("203.0.113.9:1", "198.18.0.1:30011"), trace.Options{NodePortRejectsOnAllAddresses: true}, "empty node port rejected"},
		{"no endpoints: node port rejected on IPv4 loopback", nil, fromNode("127.0.0.1:30011"),
			trace.Options{NodePortRejectsOnAllAddresses: true}, "empty node port rejected"},
		{"localnet guard: an outside source to 127.0.0.1 dropped", func(c *ruleset.Config) { c.LocalhostNodePorts = true }, fromOutside("203.0.113.9:1", "127.0.0.1:22"),
			trace.Options{LocalnetGuard: true}, "dropped"},
		{"localnet guard: a served node port on 127.0.0.1 forwarded", func(c *ruleset.Config) { c.LocalhostNodePorts = true }, fromOutside("203.0.113.9:1", "127.0.0.1:30014"),
			trace.Options{LocalnetGuard: true}, "guarded node port -> 198.18.65.14:8080 1 masq"},
		{"hairpin of an endpoint on this node: masqueraded in both modes", nil, fromOutside("198.18.64.2:40000", "198.19.0.10:80"),
			trace.Options{HairpinLocalOnly: true}, "web cluster IP -> 198.18.64.2:8080 1/2 masq 198.18.65.2:8080 1/2"},
		{"hairpin of an endpoint elsewhere: masqueraded as iptables does", nil, fromOutside("198.18.65.2:40000", "198.19.0.10:80"),
			trace.IPTablesMode, "web cluster IP -> 198.18.64.2:8080 1/2 198.18.65.2:8080 1/2 masq"},
		{"hairpin of an endpoint elsewhere: not masqueraded as nftables does", nil, fromOutside("198.18.65.2:40000", "198.19.0.10:80"),
			trace.NFTablesMode, "web cluster IP -> 198.18.64.2:8080 1/2 198.18.65.2:8080 1/2"},
		{"localnet guard: off without localhost node ports", nil, fromOutside("203.0.113.9:1", "127.0.0.1:22"),
			trace.Options{LocalnetGuard: true}, "not a Service"},
		{"localnet guard: a loopback source passes", func(c *ruleset.Config) { c.LocalhostNodePorts = true }, fromOutside("127.0.0.2:1", "127.0.0.1:22"),
			trace.Options{LocalnetGuard: true}, "not a Service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mods []func(*ruleset.Config)
			if tt.mods != nil {
				mods = append(mods, tt.mods)
			}
			rs := cluster(t, mods...)
			if got := summary(trace.Trace(rs, tt.packet, tt.opts)); got != tt.want {
				t.Errorf("Trace(%v)\n got %s\nwant %s", tt.packet, got, tt.want)
			}
		})
	}
}

func TestParsePacket(t *testing.T) {
	tests := []struct {
		in   string
		want string // the Packet's String, or the error
	}{
		{"tcp 198.18.0.5:40000 -> 198.19.0.10:80 from pod", "tcp 198.18.0.5:40000 -> 198.19.0.10:80 arriving"},
		{"UDP 198.18.0.1:53 -> 198.19.0.10:53 from node", "udp 198.18.0.1:53 -> 198.19.0.10:53 from the node"},
		{"sctp [2001:db8::1]:9 -> [2001:db8:19::10]:80", "sctp [2001:db8::1]:9 -> [2001:db8:19::10]:80 arriving"},
		{"icmp 198.18.0.5:1 -> 198.19.0.10:80", `packet "icmp 198.18.0.5:1 -> 198.19.0.10:80": protocol "icmp" is not tcp, udp or sctp`},
		{"tcp 198.18.0.5 -> 198.19.0.10:80", `packet "tcp 198.18.0.5 -> 198.19.0.10:80": source: not an ip:port`},
		{"tcp 198.18.0.5:1 198.19.0.10:80", `packet "tcp 198.18.0.5:1 198.19.0.10:80": want "PROTO SRC -> DST [from pod|node|outside]"`},
		{"tcp 198.18.0.5:1 -> 198.19.0.10:80 from mars", `packet "tcp 198.18.0.5:1 -> 198.19.0.10:80 from mars": "mars" is not pod, node or outside`},
		{"", `packet "": want "PROTO SRC -> DST [from pod|node|outside]"`},
	}
	for _, tt := range tests {
		p, err := trace.ParsePacket(tt.in)
		got := p.String()
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ParsePacket(%q)\n got %s\nwant %s", tt.in, got, tt.want)
		}
	}
}
