package flat_test

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

// scriptLines are the lines of s that start with prefix.
func scriptLines(s, prefix string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// TestFlatRules: the rules of the target groups and of node ports follow
// the Config: who is masqueraded, where node ports are served.
func TestFlatRules(t *testing.T) {
	const cluster3 = "meta l4proto tcp ip daddr . meta l4proto . th dport @cluster-3-tcp "
	const dnat3 = "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 3 map @cluster-3-tcp-targets"
	for _, c := range []struct {
		name       string
		cfg        func(*ruleset.Config)
		cluster    []string
		nodePortTo string
	}{{
		name: "pod networks known",
		cfg:  func(*ruleset.Config) {},
		cluster: []string{
			cluster3 + "ip saddr != @cluster-cidrs meta mark set meta mark | 0x00004000 " + dnat3,
			cluster3 + dnat3,
		},
		nodePortTo: "fib daddr type local ip daddr != 127.0.0.0/8 jump nodeports",
	}, {
		name:       "masquerade all",
		cfg:        func(c *ruleset.Config) { c.MasqueradeAll = true },
		cluster:    []string{cluster3 + "meta mark set meta mark | 0x00004000 " + dnat3},
		nodePortTo: "fib daddr type local ip daddr != 127.0.0.0/8 jump nodeports",
	}, {
		name:       "no pod networks, localhost node ports",
		cfg:        func(c *ruleset.Config) { c.ClusterCIDRs, c.LocalhostNodePorts = nil, true },
		cluster:    []string{cluster3 + dnat3},
		nodePortTo: "fib daddr type local jump nodeports",
	}, {
		name:       "node port addresses",
		cfg:        func(c *ruleset.Config) { c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.1")} },
		cluster:    []string{cluster3 + "ip saddr != @cluster-cidrs meta mark set meta mark | 0x00004000 " + dnat3, cluster3 + dnat3},
		nodePortTo: "ip daddr @nodeport-ips jump nodeports",
	}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config4()
			c.cfg(&cfg)
			w := newWorld(t, cfg)
			w.add(svc("ns1", "web", "198.19.0.10", nodePort(30080)),
				slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.3", node: node}, ep{ip: "198.18.65.2", node: "node-b"}))
			_, script, res := flat.Script(w.build(), flat.Options{})
			if len(res.Warnings) > 0 {
				t.Errorf("warnings: %v", res.Warnings)
			}
			var got []string
			for _, l := range scriptLines(script, "add rule ip svcproxy-flat cluster ") {
				got = append(got, strings.TrimPrefix(l, "add rule ip svcproxy-flat cluster "))
			}
			if diff := cmp.Diff(c.cluster, got); diff != "" {
				t.Errorf("cluster chain (-want +got):\n%s", diff)
			}
			if want := "add rule ip svcproxy-flat services " + c.nodePortTo; !strings.Contains(script, want+"\n") {
				t.Errorf("no %q in\n%s", want, script)
			}
		})
	}
}

// TestFlatProtocols: each protocol has its own set and targets map per
// group and count, the map's value typed by that protocol's port, and its
// own rule that matches the protocol explicitly; a port's elements go to
// the set and map of its protocol.
func TestFlatProtocols(t *testing.T) {
	sctp := func(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolSCTP }
	w := newWorld(t, config4())
	w.add(
		svc("ns1", "t", "198.19.0.10", externalIPs("198.19.200.10")),
		slice("ns1", "t", 8080, ep{ip: "198.18.64.2", node: node}),
		svc("ns1", "u", "198.19.0.11", udp, externalIPs("198.19.200.11")),
		sliceProto("ns1", "u", v1.ProtocolUDP, 53, ep{ip: "198.18.64.3", node: node}),
		svc("ns1", "s", "198.19.0.12", sctp, externalIPs("198.19.200.12")),
		sliceProto("ns1", "s", v1.ProtocolSCTP, 9, ep{ip: "198.18.64.4", node: node}),
	)
	_, script, res := flat.Script(w.build(), flat.Options{})
	if len(res.Warnings) > 0 {
		t.Errorf("warnings: %v", res.Warnings)
	}
	const key = "ip daddr . meta l4proto . th dport"
	for _, c := range []struct{ proto, name, addr, target string }{
		{"tcp", "t", "198.19.200.10", "198.18.64.2 . 8080"},
		{"udp", "u", "198.19.200.11", "198.18.64.3 . 53"},
		{"sctp", "s", "198.19.200.12", "198.18.64.4 . 9"},
	} {
		set, comment := "external-1-"+c.proto, `comment "ns1/`+c.name+`:p80/`+strings.ToUpper(c.proto)+`"`
		for _, want := range []string{
			"add map ip svcproxy-flat " + set + "-targets { typeof " + key + " . numgen random mod 1 : ip daddr . " + c.proto + " dport ; }",
			"add rule ip svcproxy-flat external meta l4proto " + c.proto + " " + key + " @" + set +
				" meta mark set meta mark | 0x00004000 dnat ip to " + key + " . numgen random mod 1 map @" + set + "-targets",
			"add element ip svcproxy-flat " + set + " { " + c.addr + " . " + c.proto + " . 80 " + comment + " }",
			"add element ip svcproxy-flat " + set + "-targets { " + c.addr + " . " + c.proto + " . 80 . 0 " + comment + " : " + c.target + " }",
		} {
			if !strings.Contains(script, want+"\n") {
				t.Errorf("%s: no %q in\n%s", c.proto, want, script)
			}
		}
	}
	if got := len(scriptLines(script, "add rule ip svcproxy-flat external ")); got != 3 {
		t.Errorf("%d rules in the external chain, want 3 (one per protocol)", got)
	}
}

// TestFlatElements: a Service port's frontends go to the sets of their
// route, its targets to the map of their count in the Ruleset's order,
// every element named by the port; frontends in their sorted order (node
// ports first).
func TestFlatElements(t *testing.T) {
	cfg := config4()
	w := newWorld(t, cfg)
	w.add(
		svc("ns1", "web", "198.19.0.10", nodePort(30080), loadBalancer("198.19.128.1"), sourceRanges("198.18.32.0/24"), externalLocal),
		slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
		svc("ns1", "empty", "198.19.0.11"),
	)
	_, script, res := flat.Script(w.build(), flat.Options{})
	warnings.None(t, res.Warnings)
	const web, empty = `comment "ns1/web:p80/TCP"`, `comment "ns1/empty:p80/TCP"`
	want := []string{
		"add element ip svcproxy-flat cluster-cidrs { 198.18.64.0/18 }",
		"add element ip svcproxy-flat cluster-ips { 198.19.0.11 " + empty + ", 198.19.0.10 " + web + " }",
		"add element ip svcproxy-flat no-endpoint-reject { 198.19.0.11 . tcp . 80 " + empty + " }",
		"add element ip svcproxy-flat nodeport-local-1-tcp { tcp . 30080 " + web + " }",
		"add element ip svcproxy-flat nodeport-local-1-tcp-targets { tcp . 30080 . 0 " + web + " : 198.18.64.2 . 8080 }",
		"add element ip svcproxy-flat nodeport-shortcircuit-2-tcp { tcp . 30080 " + web + " }",
		"add element ip svcproxy-flat nodeport-shortcircuit-2-tcp-targets { tcp . 30080 . 0 " + web + " : 198.18.64.2 . 8080, tcp . 30080 . 1 " + web + " : 198.18.65.2 . 8080 }",
		"add element ip svcproxy-flat cluster-2-tcp { 198.19.0.10 . tcp . 80 " + web + " }",
		"add element ip svcproxy-flat cluster-2-tcp-targets { 198.19.0.10 . tcp . 80 . 0 " + web + " : 198.18.64.2 . 8080, 198.19.0.10 . tcp . 80 . 1 " + web + " : 198.18.65.2 . 8080 }",
		"add element ip svcproxy-flat local-1-tcp { 198.19.128.1 . tcp . 80 " + web + " }",
		"add element ip svcproxy-flat local-1-tcp-targets { 198.19.128.1 . tcp . 80 . 0 " + web + " : 198.18.64.2 . 8080 }",
		"add element ip svcproxy-flat shortcircuit-2-tcp { 198.19.128.1 . tcp . 80 " + web + " }",
		"add element ip svcproxy-flat shortcircuit-2-tcp-targets { 198.19.128.1 . tcp . 80 . 0 " + web + " : 198.18.64.2 . 8080, 198.19.128.1 . tcp . 80 . 1 " + web + " : 198.18.65.2 . 8080 }",
		"add element ip svcproxy-flat firewall { 198.19.128.1 . tcp . 80 " + web + " }",
		"add element ip svcproxy-flat firewall-allow { 198.19.128.1 . tcp . 80 . 198.18.32.0/24 " + web + " }",
		// Only this node's endpoints: 198.18.65.2 runs on node-b.
		"add element ip svcproxy-flat hairpin { 198.18.64.2 . 198.18.64.2 . tcp . 8080 }",
	}
	if diff := cmp.Diff(want, scriptLines(script, "add element ")); diff != "" {
		t.Errorf("elements (-want +got):\n%s", diff)
	}
}

// TestFlatChangesTouchElementsOnly: a change that keeps every endpoint
// count in use writes elements only, and only those of the changed port
// (all of them: the unchanged ones again, so that one deleted behind the
// Executor's back comes back);
// a change that brings a new count writes that count's set, map and the
// rules of its group.
func TestFlatChangesTouchElementsOnly(t *testing.T) {
	w := newWorld(t, config4())
	w.add(svc("ns1", "a", "198.19.0.10"), slice("ns1", "a", 8080, ep{ip: "198.18.64.2", node: node}),
		svc("ns1", "b", "198.19.0.11"), slice("ns1", "b", 8080, ep{ip: "198.18.64.3", node: node}))
	old := w.build()
	st, res := flat.Render(knftables.NewFake(knftables.IPv4Family, flat.DefaultTable).NewTransaction(), old, flat.Options{})
	warnings.None(t, res.Warnings)

	w.add(slice("ns1", "a", 8080, ep{ip: "198.18.65.2", node: "node-b"}))
	next := w.update(old)
	tx := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable).NewTransaction()
	ch, err := flat.RenderChanges(tx, st, old, next)
	if err != nil {
		t.Fatal(err)
	}
	c := `comment "ns1/a:p80/TCP"`
	want := []string{
		"delete element ip svcproxy-flat cluster-1-tcp-targets { 198.19.0.10 . tcp . 80 . 0 }",
		"delete element ip svcproxy-flat hairpin { 198.18.64.2 . 198.18.64.2 . tcp . 8080 }",
		"add element ip svcproxy-flat cluster-ips { 198.19.0.10 " + c + " }",
		"add element ip svcproxy-flat cluster-1-tcp { 198.19.0.10 . tcp . 80 " + c + " }",
		"add element ip svcproxy-flat cluster-1-tcp-targets { 198.19.0.10 . tcp . 80 . 0 " + c + " : 198.18.65.2 . 8080 }",
		// No hairpin element for 198.18.65.2, which runs on node-b.
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(tx.String()), "\n")); diff != "" || !ch.ElementsOnly {
		t.Errorf("elements only %v; transaction (-want +got):\n%s", ch.ElementsOnly, diff)
	}

	w.add(slice("ns1", "b", 8080, ep{ip: "198.18.64.3", node: node}, ep{ip: "198.18.64.4", node: node}))
	third := w.update(next)
	tx = knftables.NewFake(knftables.IPv4Family, flat.DefaultTable).NewTransaction()
	if ch, err = flat.RenderChanges(tx, st, next, third); err != nil || ch.ElementsOnly {
		t.Fatalf("a new endpoint count: elements only %v, %v", ch.ElementsOnly, err)
	}
	for _, line := range []string{"add set ip svcproxy-flat cluster-2-tcp ", "add map ip svcproxy-flat cluster-2-tcp-targets ", "flush chain ip svcproxy-flat cluster\n"} {
		if !strings.Contains(tx.String(), line) {
			t.Errorf("no %q in\n%s", line, tx)
		}
	}
	if strings.Contains(tx.String(), "delete set ip svcproxy-flat cluster-1-tcp ") {
		t.Errorf("cluster-1-tcp deleted while Service a still uses it:\n%s", tx)
	}
}

// TestFlatLongNamesFitComments: the longest names Kubernetes allows make
// element comments that nft would refuse (over 128 bytes): they are cut to
// 128, keeping the namespace and the Service's name.
func TestFlatLongNamesFitComments(t *testing.T) {
	ns, name := strings.Repeat("n", 63), strings.Repeat("s", 63)
	w := newWorld(t, config4())
	w.add(svc(ns, name, "198.19.0.10"), slice(ns, name, 8080, ep{ip: "198.18.64.2", node: node}))
	_, script, res := flat.Script(w.build(), flat.Options{})
	warnings.None(t, res.Warnings)
	comments := regexp.MustCompile(`comment "([^"]*)"`).FindAllStringSubmatch(strings.Join(scriptLines(script, "add element "), "\n"), -1)
	if len(comments) == 0 {
		t.Fatalf("no element comments:\n%s", script)
	}
	for _, c := range comments {
		if len(c[1]) > knftables.CommentLengthMax || !strings.HasPrefix(c[1], ns+"/"+name) {
			t.Errorf("comment %q: %d bytes, want at most %d starting with the namespace and name", c[1], len(c[1]), knftables.CommentLengthMax)
		}
	}
}
