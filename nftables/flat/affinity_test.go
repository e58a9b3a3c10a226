package flat_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"sigs.k8s.io/knftables"
)

// TestFlatAffinityChanges: with ClientIP affinity, a Service change is
// element changes only as long as no affinity class (group, protocol,
// timeout) appears or goes, whatever the number of Services with affinity:
// another Service with the same timeout adds elements; an endpoint replaced
// in an affinity Service replaces its elements; a new timeout adds a set
// and rewrites the affinity chains; the last affinity Service gone takes
// the affinity maps, sets and chains with it.
func TestFlatAffinityChanges(t *testing.T) {
	w := newWorld(t, config4())
	w.add(svc("ns1", "a", "198.19.0.10", affinity(600)), slice("ns1", "a", 8080, ep{ip: "198.18.64.2", node: node}))
	prev := w.build()
	st, res := flat.Render(knftables.NewFake(knftables.IPv4Family, flat.DefaultTable).NewTransaction(), prev, flat.Options{})
	if len(res.Warnings) > 0 {
		t.Fatalf("warnings: %v", res.Warnings)
	}
	for _, c := range []struct {
		name         string
		objs         []any
		remove       string
		elementsOnly bool
		lines        []string // of the transaction, each a prefix
	}{{
		name:         "a second Service with the same timeout",
		objs:         []any{svc("ns1", "b", "198.19.0.11", affinity(600)), slice("ns1", "b", 8080, ep{ip: "198.18.64.3", node: node})},
		elementsOnly: true,
		lines: []string{
			`add element ip svcproxy-flat cluster-tcp-affinity { 198.19.0.11 . tcp . 80 comment "ns1/b:p80/TCP" }`,
			`add element ip svcproxy-flat affinity-targets-internal { 198.19.0.11 . tcp . 80 . 198.18.64.3 . 8080 comment "ns1/b:p80/TCP" }`,
			`add element ip svcproxy-flat affinity-targets-external { 198.19.0.11 . tcp . 80 . 198.18.64.3 . 8080 comment "ns1/b:p80/TCP" }`,
			`add element ip svcproxy-flat affinity-600s { 198.19.0.11 . tcp . 80 comment "ns1/b:p80/TCP" }`,
		},
	}, {
		name:         "an endpoint replaced",
		objs:         []any{slice("ns1", "a", 8080, ep{ip: "198.18.64.4", node: node})},
		elementsOnly: true,
		lines: []string{
			`delete element ip svcproxy-flat affinity-targets-internal { 198.19.0.10 . tcp . 80 . 198.18.64.2 . 8080 }`,
			`add element ip svcproxy-flat affinity-targets-internal { 198.19.0.10 . tcp . 80 . 198.18.64.4 . 8080 comment "ns1/a:p80/TCP" }`,
		},
	}, {
		name: "a new timeout",
		objs: []any{svc("ns1", "c", "198.19.0.12", affinity(60)), slice("ns1", "c", 8080, ep{ip: "198.18.64.5", node: node})},
		lines: []string{
			"add set ip svcproxy-flat affinity-60s ",
			"flush chain ip svcproxy-flat affinity-record",
			"add rule ip svcproxy-flat affinity-record meta l4proto tcp ct original ip daddr . meta l4proto . ct original proto-dst @affinity-60s update @affinity-tcp { ip saddr . ct original ip daddr . meta l4proto . ct original proto-dst timeout 60s : ip daddr . tcp dport } return",
		},
	}, {
		name:   "the last affinity Service gone",
		remove: "*",
		lines: []string{
			"flush chain ip svcproxy-flat endpoint-check",
			"delete chain ip svcproxy-flat affinity-record",
			"delete map ip svcproxy-flat affinity-tcp",
			"delete set ip svcproxy-flat affinity-60s",
			"delete set ip svcproxy-flat affinity-600s",
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			if c.remove == "*" {
				for _, name := range []string{"a", "b", "c"} {
					w.Svcs.Delete("ns1", name)
				}
			}
			w.add(c.objs...)
			next := w.update(prev)
			tx := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable).NewTransaction()
			ch, err := flat.RenderChanges(tx, st, prev, next)
			if err != nil {
				t.Fatal(err)
			}
			prev = next
			if ch.ElementsOnly != c.elementsOnly {
				t.Errorf("elements only %v, want %v:\n%s", ch.ElementsOnly, c.elementsOnly, tx)
			}
			var missing []string
			for _, l := range c.lines {
				if !strings.Contains(tx.String(), l) {
					missing = append(missing, l)
				}
			}
			if diff := cmp.Diff([]string(nil), missing); diff != "" {
				t.Errorf("lines missing from the transaction (-want +got):\n%s\ntransaction:\n%s", diff, tx)
			}
		})
	}
}

// TestFlatAffinityIPv6: an IPv6 table renders ClientIP affinity for a
// port whose endpoints listen on one port (the port comes from its own
// map), and serves a port whose endpoints listen on different ports
// without it, named in a warning.
func TestFlatAffinityIPv6(t *testing.T) {
	w := newWorld(t, config6())
	other := slice("ns1", "b", 9090, ep{ip: "2001:db8:18:40::5", node: node})
	other.Name = "b-2"
	w.add(svc("ns1", "a", "2001:db8:19::10", affinity(600)), slice("ns1", "a", 8080, ep{ip: "2001:db8:18:40::2", node: node}, ep{ip: "2001:db8:18:40::3", node: node}),
		svc("ns1", "b", "2001:db8:19::11", affinity(600)), slice("ns1", "b", 8080, ep{ip: "2001:db8:18:40::4", node: node}), other)
	_, script, res := flat.Script(w.build(), flat.Options{})
	if len(res.Warnings) != 1 || res.Warnings[0].Name != "b" || !strings.Contains(res.Warnings[0].Reason, "different ports") {
		t.Errorf("warnings %v, want one about b's affinity", res.Warnings)
	}
	for _, want := range []string{
		`add element ip6 svcproxy-flat affinity-ports-tcp { 2001:db8:19::10 . 80 comment "ns1/a:p80/TCP" : 8080 }`,
		`add element ip6 svcproxy-flat cluster-tcp-affinity { 2001:db8:19::10 . tcp . 80 comment "ns1/a:p80/TCP" }`,
		"dnat ip6 to jhash ip6 saddr . ip6 daddr . th dport mod 4294967295 seed 0x5eed map @affinity-tcp : ip6 daddr . th dport map @affinity-ports-tcp",
		"update @affinity-tcp { jhash ip6 saddr . ct original ip6 daddr . ct original proto-dst mod 4294967295 seed 0x5eed timeout 600s : ip6 daddr }",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("no %q in\n%s", want, script)
		}
	}
	for _, line := range scriptLines(script, "add element ") {
		set := strings.Fields(line)[4]
		if strings.Contains(set, "affinity") && strings.Contains(line, `"ns1/b:`) {
			t.Errorf("b, whose endpoints listen on different ports, has affinity elements: %s", line)
		}
	}
}
