package iptables

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/ruleset"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// scenario is one golden test: a Ruleset built from objects, rendered with
// names.
type scenario struct {
	name  string
	names Names
	cfg   func() ruleset.Config
	objs  func() []any
}

func (sc scenario) ruleset(t testing.TB) *ruleset.Ruleset {
	cfg := testConfig()
	if sc.cfg != nil {
		cfg = sc.cfg()
	}
	return build(t, cfg, sc.objs()...)
}

func (sc scenario) render(t testing.TB) []byte { return Render(sc.names, sc.ruleset(t)) }

func (sc scenario) v6() bool { return sc.cfg != nil && sc.cfg().Family == v1.IPv6Protocol }

func clusterIPWith(n int) func() []any {
	return func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10"),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(n, false)...),
		}
	}
}

// scenarios are the representative Services of the golden tests; the kernel
// test loads each rendering into a real kernel.
var scenarios = []scenario{
	{name: "clusterip-1-endpoint", objs: clusterIPWith(1)},
	{name: "clusterip-3-endpoints", objs: clusterIPWith(3)},
	{name: "clusterip-4-endpoints", objs: clusterIPWith(4)},
	{name: "no-endpoints", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, ep{ip: "198.18.64.2", node: testNode, ready: false}),
		}
	}},
	{name: "itp-local-with-local-endpoints", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", iTPLocal()),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(3, false)...),
		}
	}},
	{name: "itp-local-without-local-endpoints", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", iTPLocal()),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, ep{ip: "198.18.65.2", node: "node-b", ready: true}),
		}
	}},
	{name: "nodeport-etp-cluster", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		}
	}},
	{name: "nodeport-etp-local", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080), eTPLocal(0)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(3, false)...),
		}
	}},
	{name: "nodeport-etp-local-without-local-endpoints", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080), eTPLocal(0)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, ep{ip: "198.18.65.2", node: "node-b", ready: true}),
		}
	}},
	{name: "loadbalancer-source-ranges", objs: func() []any {
		return []any{
			service("ns1", "lb", "198.19.0.20", loadBalancer(30090, "198.19.200.1"), sourceRanges("198.18.32.0/19", "198.18.0.0/24")),
			slice("ns1", "lb", "lb-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		}
	}},
	{name: "loadbalancer-etp-local-health-check", objs: func() []any {
		return []any{
			service("ns1", "lb", "198.19.0.20", loadBalancer(30090, "198.19.200.1", "198.19.200.2"), eTPLocal(32000), sourceRanges("198.18.32.0/19")),
			slice("ns1", "lb", "lb-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		}
	}},
	{name: "external-ips", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", externalIPs("198.19.100.1", "198.19.100.2")),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
			service("ns2", "empty", "198.19.0.11", externalIPs("198.19.100.3")),
		}
	}},
	{name: "affinity", objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", clientIP(600)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(3, false)...),
		}
	}},
	{name: "ipv6", cfg: func() ruleset.Config {
		return ruleset.Config{
			Family:       v1.IPv6Protocol,
			Node:         testConfig().Node,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8:18:40::/58")},
		}
	}, objs: func() []any {
		return []any{
			service("ns1", "web", "2001:db8:19::10", nodePort(30080), clientIP(10800), externalIPs("2001:db8:19:100::1")),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(3, true)...),
			service("ns1", "empty", "2001:db8:19::11"),
		}
	}},
	{name: "masquerade-all-udp-sctp", cfg: func() ruleset.Config {
		c := testConfig()
		c.ClusterCIDRs = nil
		c.MasqueradeAll = true
		c.MasqueradeMark = 1 << 3
		return c
	}, objs: func() []any {
		return []any{
			service("kube-system", "dns", "198.19.0.53", protocol(v1.ProtocolUDP)),
			slice("kube-system", "dns", "dns-1", 53, v1.ProtocolUDP, readyEPs(2, false)...),
			service("ns1", "sctp", "198.19.0.54", protocol(v1.ProtocolSCTP)),
			slice("ns1", "sctp", "sctp-1", 9999, v1.ProtocolSCTP, readyEPs(1, false)...),
		}
	}},
	{name: "custom-prefix-multi-cidr-nodeport-addresses", names: mustNames("CNI"), cfg: func() ruleset.Config {
		c := testConfig()
		c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/19"), netip.MustParsePrefix("198.18.96.0/19")}
		c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("127.0.0.1")}
		return c
	}, objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080), eTPLocal(0)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		}
	}},
	{name: "no-nodeport-addresses", cfg: func() ruleset.Config {
		c := testConfig()
		c.NoNodePortAddresses = true
		return c
	}, objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...),
		}
	}},
	{name: "localhost-nodeports", cfg: func() ruleset.Config {
		c := testConfig()
		c.LocalhostNodePorts = true
		return c
	}, objs: func() []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...),
		}
	}},
	// Two external IPs, each claimed by two Services: their rules are
	// written for the owner alone (ruleset.Ruleset.Owner). 198.18.0.100
	// goes to b, which has endpoints, not to a, which rejects (no reject
	// rule for it); 198.18.0.101 to c, first in name order of two that
	// forward.
	{name: "contested-external-ips", objs: func() []any {
		return []any{
			service("ns1", "a", "198.19.0.20", externalIPs("198.18.0.100")),
			service("ns1", "b", "198.19.0.21", externalIPs("198.18.0.100")),
			slice("ns1", "b", "b-1", 8080, v1.ProtocolTCP, ep{ip: "198.18.64.2", node: testNode, ready: true}),
			service("ns1", "d", "198.19.0.23", externalIPs("198.18.0.101")),
			slice("ns1", "d", "d-1", 8080, v1.ProtocolTCP, ep{ip: "198.18.64.4", node: testNode, ready: true}),
			service("ns1", "c", "198.19.0.22", externalIPs("198.18.0.101")),
			slice("ns1", "c", "c-1", 8080, v1.ProtocolTCP, ep{ip: "198.18.64.3", node: testNode, ready: true}),
		}
	}},
}

func mustNames(prefix string) Names {
	n, err := NewNames(prefix)
	if err != nil {
		panic(err)
	}
	return n
}

func TestGolden(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			got := sc.render(t)
			path := filepath.Join("testdata", sc.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Render differs from %s (run with -update if intended):\n%s", path, lineDiff(string(want), string(got)))
			}
			// Every golden loads into the restore model: all jumps
			// name declared chains, nothing is left unbalanced.
			if _, err := applyRestore(newModel(), got); err != nil {
				t.Errorf("model rejects the rendering: %v", err)
			}
		})
	}
}

// lineDiff is a minimal line diff for failure messages.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  - " + wl + "\n  + " + gl + "\n")
		}
	}
	return b.String()
}

func scenarioNamed(t testing.TB, name string) scenario {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %q", name)
	return scenario{}
}

// TestPartialListsOnlyWhenLarge: a partial render carries the "-S" lines
// that keep iptables-nft linear only when it re-declares many chains.
func TestPartialListsOnlyWhenLarge(t *testing.T) {
	objs := scaleObjects(300)
	old := build(t, testConfig(), objs...)
	// One Service changes: no listing.
	oneChanged := build(t, testConfig(), append(slices.Clone(objs[:len(objs)-1]), slice("ns", "svc299", "svc299-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...))...)
	text, err := RenderPartial(Names{}, old, oneChanged, ruleset.Diff(old, oneChanged))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(text, []byte("\n-S\n")) {
		t.Error("a one-Service partial render lists the tables")
	}
	// Every Service changes (all endpoints move to another port): listing.
	var moved []any
	for _, o := range objs {
		if es, ok := o.(*discovery.EndpointSlice); ok {
			es = es.DeepCopy()
			es.Ports[0].Port = ptr(int32(9090))
			o = es
		}
		moved = append(moved, o)
	}
	allChanged := build(t, testConfig(), moved...)
	text, err = RenderPartial(Names{}, old, allChanged, ruleset.Diff(old, allChanged))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(text, []byte("\n-S\n")) != 2 {
		t.Error("a partial render rewriting 300 Services does not list the tables")
	}

	// At 10,000 Services × 10 endpoints, the cases listCostRatio was
	// measured on: partial renders rewriting 1, 300 and 1,000 Services.
	if testing.Short() {
		return
	}
	w := scaleworld.New(scalegen.Spec{Services: 10000})
	w.Incremental = true
	prev := w.Ruleset
	for version, tc := range []struct {
		rewritten int
		list      bool
	}{{1, false}, {300, false}, {1000, true}} {
		var next *ruleset.Ruleset
		for i := range tc.rewritten {
			next = w.ChangeEndpoints((i*7919)%10000, version+1)
		}
		ch := ruleset.Diff(prev, next)
		if got := len(ch.Changed); got != tc.rewritten {
			t.Fatalf("%d Services changed, want %d", got, tc.rewritten)
		}
		text, err := RenderPartial(Names{}, prev, next, ch)
		if err != nil {
			t.Fatal(err)
		}
		if listed := bytes.Contains(text, []byte("\n-S\n")); listed != tc.list {
			t.Errorf("10,000 Services, %d rewritten: listed %v, want %v", tc.rewritten, listed, tc.list)
		}
		prev = next
	}
}

// BenchmarkRender renders N Services × 10 endpoints, in full and as a
// partial render after one endpoint changed.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		objs := scaleObjects(n)
		rs := build(b, testConfig(), objs...)
		changed := slices.Clone(objs)
		changed[1] = slice("ns", "svc0", "svc0-1", 8080, v1.ProtocolTCP, readyEPs(9, false)...)
		next := build(b, testConfig(), changed...)
		ch := ruleset.Diff(rs, next)
		b.Run(fmt.Sprintf("full/%d", n), func(b *testing.B) {
			for b.Loop() {
				Render(Names{}, rs)
			}
		})
		b.Run(fmt.Sprintf("partial/%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := RenderPartial(Names{}, rs, next, ch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
