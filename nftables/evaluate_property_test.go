package nftables_test

import (
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	svcaffinity "github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// evalAddrs are the addresses of the evaluation tests besides the pools: the
// node's own (the NodePortAddresses when they are set), another address of
// the node, a client outside the cluster inside one of the pools' source
// ranges and one outside all of them, an unallocated address inside the
// narrow ServiceCIDR, an address that is nothing, and the loopback.
type evalAddrs struct {
	node, node2, clientIn, clientOut, unallocated, other, loopback string
	narrowCIDR, wideCIDR                                           string
}

var (
	evalAddrs4 = evalAddrs{"198.18.0.1", "198.18.0.2", "198.18.32.7", "198.18.9.9", "198.19.0.9", "198.18.5.5", "127.0.0.1", "198.19.0.0/24", "198.19.0.0/16"}
	evalAddrs6 = evalAddrs{"2001:db8:18::1", "2001:db8:18::2", "2001:db8:18:20::7", "2001:db8:18:9::9", "2001:db8:19::9", "2001:db8:18:5::5", "::1", "2001:db8:19::/116", "2001:db8:19::/64"}
)

// genEvalConfig is genConfig with the Config's other settings drawn too:
// the node (node-a or node-b), ServiceCIDRs (none; the cluster IPs only;
// also the load-balancer IPs), LocalhostNodePorts and the masquerade mark.
func genEvalConfig(t *rapid.T) (ruleset.Config, nftables.Options, pools, evalAddrs) {
	cfg, opts, p := genConfig(t)
	a := evalAddrs4
	if cfg.Family == v1.IPv6Protocol {
		a = evalAddrs6
	}
	cfg.Node.Name = rapid.SampledFrom([]string{node, "node-b"}).Draw(t, "node")
	switch rapid.IntRange(0, 2).Draw(t, "serviceCIDRs") {
	case 1:
		cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(a.narrowCIDR)}
	case 2:
		cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(a.wideCIDR)}
	}
	cfg.LocalhostNodePorts = rapid.Bool().Draw(t, "localhostNodePorts")
	if rapid.IntRange(0, 3).Draw(t, "mark") == 0 {
		cfg.MasqueradeMark = 1 << 3
	}
	return cfg, opts, p, a
}

// genCluster draws a cluster: each Service of the universe is there or
// not, and has an EndpointSlice or not, whose ports have the Service ports'
// protocols (so that most Services have endpoints).
func genCluster(t *rapid.T, cfg ruleset.Config, p pools) *ruleset.Ruleset {
	w := newWorld(t, cfg)
	for _, ns := range namespaces {
		for _, name := range names {
			if !rapid.Bool().Draw(t, "present") {
				continue
			}
			s := genService(t, p, ns, name)
			w.add(s)
			if rapid.IntRange(0, 4).Draw(t, "noSlice") == 0 {
				continue
			}
			es := genSlice(t, p, ns, name)
			for i := range min(len(es.Ports), len(s.Spec.Ports)) {
				proto := s.Spec.Ports[i].Protocol
				es.Ports[i].Protocol = &proto
			}
			w.add(es)
		}
	}
	return w.build()
}

// genPacket draws the first packet of a flow: to a cluster IP (on a
// Service port or not), a node port on a node address or the loopback, an
// external or load-balancer IP, an unallocated address of the Service
// CIDRs, or an address that is none of them; from a pod (which may be the
// endpoint it reaches: hairpin), from the node, from a client outside, or
// from a load-balancer IP.
func genPacket(t *rapid.T, p pools, a evalAddrs) trace.Packet {
	pk := trace.Packet{Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")}
	var dst string
	port := rapid.SampledFrom([]uint16{80, 81, 82}).Draw(t, "port")
	switch rapid.IntRange(0, 5).Draw(t, "to") {
	case 0:
		dst = rapid.SampledFrom(p.clusterIPs).Draw(t, "clusterIP")
	case 1:
		dst = rapid.SampledFrom([]string{a.node, a.node2, a.loopback}).Draw(t, "nodeAddr")
		port = rapid.SampledFrom([]uint16{30001, 30002, 30003, 30004}).Draw(t, "nodePort")
		pk.ToNode = true
	case 2:
		dst = rapid.SampledFrom(p.externalIPs).Draw(t, "externalIP")
	case 3:
		dst = rapid.SampledFrom(p.lbIPs).Draw(t, "lbIP")
	case 4:
		dst = a.unallocated
	default:
		dst = a.other
	}
	var src string
	switch rapid.IntRange(0, 3).Draw(t, "from") {
	case 0:
		src = rapid.SampledFrom(p.podIPs).Draw(t, "pod")
	case 1:
		src, pk.FromNode = a.node, true
	case 2:
		src = rapid.SampledFrom([]string{a.clientIn, a.clientOut}).Draw(t, "client")
	default:
		src = rapid.SampledFrom(p.lbIPs).Draw(t, "lbSource")
		pk.FromNode = rapid.Bool().Draw(t, "lbSourceFromNode")
	}
	if dst == a.loopback {
		src, pk.FromNode = rapid.SampledFrom([]string{a.loopback, a.node}).Draw(t, "loopbackSource"), true
	}
	pk.Src = netip.AddrPortFrom(netip.MustParseAddr(src), 40000)
	pk.Dst = netip.AddrPortFrom(netip.MustParseAddr(dst), port)
	return pk
}

// outcomeDiff compares outcomes as far as the rules can tell them (see
// nfttrace.Comparable).
func outcomeDiff(want, got trace.Outcome) string {
	return cmp.Diff(nfttrace.Comparable(want), nfttrace.Comparable(got), outcomeOptions...)
}

// outcomeOptions compare trace.Outcomes field by field.
var outcomeOptions = []cmp.Option{
	cmp.Comparer(func(a, b *big.Rat) bool { return a.Cmp(b) == 0 }),
	cmp.Comparer(func(a, b svcaffinity.Policy) bool { return a == b }),
	cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}),
	cmpopts.EquateEmpty(),
}

// divergence evaluates text for each packet and returns a description of
// the first whose outcome is not the tracer's for rs, or "".
func divergence(rs *ruleset.Ruleset, text string, packets []trace.Packet) (string, error) {
	return divergenceAfter(rs, text, packets, func(o trace.Outcome) trace.Outcome { return o })
}

// withoutAffinityTimeout is o with only whether affinity applies, not its
// timeout. A full sync adds the affinity sets without flushing them, to
// keep sessions; an existing set then keeps its timeout in the Fake (and in
// kernels before 6.5) when the Service's changes (see TestExecutor).
func withoutAffinityTimeout(o trace.Outcome) trace.Outcome {
	if o.Affinity.Enabled() {
		o.Affinity, _ = svcaffinity.ClientIP(1)
	}
	return o
}

// divergenceAfter is divergence comparing what normalize keeps of the
// outcomes.
func divergenceAfter(rs *ruleset.Ruleset, text string, packets []trace.Packet, normalize func(trace.Outcome) trace.Outcome) (string, error) {
	table, err := nfttrace.Parse(text)
	if err != nil {
		return "", err
	}
	for _, p := range packets {
		got, path, err := table.Evaluate(p)
		if err != nil {
			return "", err
		}
		want := trace.Trace(rs, p, trace.NFTablesMode)
		if diff := outcomeDiff(normalize(want), normalize(got)); diff != "" {
			return fmt.Sprintf("%v (to the node: %v): rules differ from the tracer (-tracer +rules):\n%s\npath:\n%s", p, p.ToNode, diff, path), nil
		}
	}
	return "", nil
}

// rendered is the transaction text of a full render of rs into a new table.
func rendered(t fataler, rs *ruleset.Ruleset, opts nftables.Options) string {
	fake := knftables.NewFake(nftables.Family(rs.Config().Family), tableName(opts))
	tx := fake.NewTransaction()
	if _, err := nftables.Render(tx, rs, opts, nil); err != nil {
		t.Fatal(err)
	}
	return tx.String()
}

// evalCase is a drawn cluster on one node, its rendered table and packets.
type evalCase struct {
	rs      *ruleset.Ruleset
	text    string
	packets []trace.Packet
}

func genEvalCase(t *rapid.T) evalCase {
	cfg, opts, p, a := genEvalConfig(t)
	rs := genCluster(t, cfg, p)
	c := evalCase{rs: rs, text: rendered(t, rs, opts)}
	for range rapid.IntRange(1, 40).Draw(t, "packets") {
		c.packets = append(c.packets, genPacket(t, p, a))
	}
	return c
}

// TestRulesDoWhatTheTracerSays: for random clusters on either node, the
// rendered table, evaluated, sends every random packet where trace.Trace
// says (with the nftables options).
func TestRulesDoWhatTheTracerSays(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genEvalCase(t)
		msg, err := divergence(c.rs, c.text, c.packets)
		if err != nil {
			t.Fatalf("%v\ntable:\n%s", err, c.text)
		}
		if msg != "" {
			t.Fatalf("%s\ntable:\n%s", msg, c.text)
		}
	})
}

// TestExecutorStateDoesWhatTheTracerSays: after random sequences of
// incremental syncs through the Executor on a knftables Fake (with
// failures that fall back to full syncs), the Fake's table, evaluated,
// sends every random packet where trace.Trace says for the last Ruleset.
func TestExecutorStateDoesWhatTheTracerSays(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p, a := genEvalConfig(t)
		now := time.Unix(1e9, 0)
		ex, fakes := flakyExecutor(t, cfg, opts, &now)
		fake := fakes[nftables.Family(cfg.Family)]
		w := newWorld(t, cfg)
		var rs *ruleset.Ruleset
		for step := range rapid.IntRange(1, 8).Draw(t, "steps") {
			mutate(t, w, p)
			if rapid.Bool().Draw(t, "update") {
				rs = w.update(rs)
			} else {
				rs = w.build()
			}
			fake.failNext = step > 0 && rapid.IntRange(0, 4).Draw(t, "fail") == 0
			now = now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(t, "ms")) * time.Millisecond)
			if _, err := ex.Sync(context.Background(), rs); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			fake.failNext = false
		}
		var packets []trace.Packet
		for range rapid.IntRange(1, 40).Draw(t, "packets") {
			packets = append(packets, genPacket(t, p, a))
		}
		dump := fake.Dump()
		msg, err := divergenceAfter(rs, dump, packets, withoutAffinityTimeout)
		if err != nil {
			t.Fatalf("%v\ntable:\n%s", err, dump)
		}
		if msg != "" {
			t.Fatalf("%s\ntable:\n%s", msg, dump)
		}
	})
}

// divergences are the nftables divergences of issue 13 that live in the
// rendered rules, reintroduced by rewriting the rendered text.
var divergences = []struct {
	name string
	// mutate rewrites the rendered transaction; it reports false when the
	// text has nothing to rewrite.
	mutate func(text string) (string, bool)
}{{
	// The endpoint checks of the output hook at priority -110, before
	// DNAT, as the table had them before kube-proxy 1.34: the rule of
	// filter-output (priority 0, after DNAT) that jumps to
	// service-endpoints-check is deleted, and the same jump is appended to
	// filter-output-pre-dnat (priority -110), after its jump to
	// firewall-check. A connection from the node to an external or
	// load-balancer IP of an externalTrafficPolicy Local Service with no
	// local endpoint then meets the Service's drop entry before the
	// short-circuit DNAT.
	name: "endpoint checks on the output hook before DNAT",
	mutate: func(text string) (string, bool) {
		for _, f := range []string{"ip", "ip6"} {
			rule := "ct state new jump service-endpoints-check\n"
			from := "add rule " + f + " kube-proxy filter-output " + rule
			if strings.Contains(text, from) {
				return strings.Replace(text, from, "", 1) + "add rule " + f + " kube-proxy filter-output-pre-dnat " + rule, true
			}
		}
		return text, false
	},
}, {
	// No drop of unallocated cluster IPs: the rule of cluster-ips-check
	// with the comment "Drop traffic to unallocated ClusterIPs" is deleted
	// (it is rendered when the Config has ServiceCIDRs).
	name: "no drop of unallocated cluster IPs",
	mutate: func(text string) (string, bool) {
		var kept []string
		found := false
		for _, line := range strings.SplitAfter(text, "\n") {
			if strings.Contains(line, `comment "Drop traffic to unallocated ClusterIPs"`) {
				found = true
				continue
			}
			kept = append(kept, line)
		}
		return strings.Join(kept, ""), found
	},
}}

// TestDivergencesAreCaught: each divergence of issue 13, reintroduced in
// the rendered rules, makes the property of TestRulesDoWhatTheTracerSays
// fail: among the first examples of its generator there is a cluster and
// a packet for which the mutated rules and the tracer disagree, and the
// rendered rules agree.
func TestDivergencesAreCaught(t *testing.T) {
	gen := rapid.Custom(genEvalCase)
	for _, d := range divergences {
		t.Run(d.name, func(t *testing.T) {
			const examples = 3000
			for seed := range examples {
				c := gen.Example(seed)
				text, ok := d.mutate(c.text)
				if !ok {
					continue
				}
				msg, err := divergence(c.rs, text, c.packets)
				if err != nil {
					t.Fatalf("example %d: %v", seed, err)
				}
				if msg == "" {
					continue
				}
				if unmutated, err := divergence(c.rs, c.text, c.packets); err != nil || unmutated != "" {
					t.Fatalf("example %d: the rendered rules fail too: %v%s", seed, err, unmutated)
				}
				t.Logf("example %d: counterexample: %s", seed, msg[:strings.Index(msg, "\npath:")])
				return
			}
			t.Fatalf("no counterexample among %d examples", examples)
		})
	}
}
