package nftables_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
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
	st, res := nftables.RenderFlat(knftables.NewFake(knftables.IPv4Family, nftables.DefaultFlatTable).NewTransaction(), prev, nftables.Options{})
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
					w.svcs.Delete("ns1", name)
				}
			}
			w.add(c.objs...)
			next := w.update(prev)
			tx := knftables.NewFake(knftables.IPv4Family, nftables.DefaultFlatTable).NewTransaction()
			ch, err := nftables.RenderFlatChanges(tx, st, prev, next)
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

// TestFlatAffinityIPv6Warns: an IPv6 table serves a Service port with
// ClientIP affinity without it, names the port in a warning, and holds no
// affinity map, set or chain.
func TestFlatAffinityIPv6Warns(t *testing.T) {
	w := newWorld(t, config6())
	w.add(svc("ns1", "a", "2001:db8:19::10", affinity(600)), slice("ns1", "a", 8080, ep{ip: "2001:db8:18:40::2", node: node}))
	_, script, res := nftables.FlatScript(w.build(), nftables.Options{})
	if len(res.Warnings) != 1 || res.Warnings[0].Name != "a" || !strings.Contains(res.Warnings[0].Reason, "ClientIP session affinity") {
		t.Errorf("warnings %v, want one about a's affinity", res.Warnings)
	}
	if strings.Contains(script, "affinity") {
		t.Errorf("an IPv6 table with affinity structures:\n%s", script)
	}
}
