package flat_test

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

// TestExecutorFlat syncs the flat layout through knftables' Fake, step by
// step: what each Sync does (full or not, transactions) and what the table
// then holds.
func TestExecutorFlat(t *testing.T) {
	cfg := config4()
	var fake *knftables.Fake
	ex, err := flat.NewExecutor(flat.ExecutorConfig{Family: cfg.Family,
		NewInterface: func(f knftables.Family, table string) (knftables.Interface, error) {
			if table != flat.DefaultTable {
				t.Errorf("the Executor opened table %q, want %q", table, flat.DefaultTable)
			}
			fake = knftables.NewFake(f, table)
			return fake, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w := newWorld(t, cfg)
	one := slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node})
	other := slice("ns1", "web", 8080, ep{ip: "198.18.64.3", node: node})
	two := slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.3", node: node})
	steps := []struct {
		name     string
		change   func()
		full     bool
		tx       int
		contains []string // lines of the Fake's dump
		lacks    []string
	}{
		{name: "first sync", change: func() { w.add(svc("ns1", "web", "198.19.0.10"), one) }, full: true, tx: 1,
			contains: []string{"add element ip svcproxy-flat cluster-1-tcp { 198.19.0.10 . tcp . 80 comment \"ns1/web:p80/TCP\" }",
				"add element ip svcproxy-flat cluster-1-tcp-targets { 198.19.0.10 . tcp . 80 . 0 comment \"ns1/web:p80/TCP\" : 198.18.64.2 . 8080 }"}},
		{name: "nothing changed", change: func() {}, tx: 0},
		{name: "endpoint replaced: elements only", change: func() { w.add(other) }, tx: 1,
			contains: []string{": 198.18.64.3 . 8080 }"}, lacks: []string{": 198.18.64.2 . 8080 }"}},
		{name: "a second endpoint: a new count", change: func() { w.add(two) }, tx: 1,
			contains: []string{"cluster-2-tcp-targets { 198.19.0.10 . tcp . 80 . 1 ", "add map ip svcproxy-flat cluster-2-tcp-targets"},
			lacks:    []string{"add map ip svcproxy-flat cluster-1-tcp-targets"}},
		{name: "full sync requested", change: ex.RequestFullSync, full: true, tx: 1,
			contains: []string{"cluster-2-tcp-targets { 198.19.0.10 . tcp . 80 . 0 "}},
	}
	var last *ruleset.Ruleset
	for _, step := range steps {
		step.change()
		rs := w.build()
		res, err := ex.Apply(ctx, rs)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		d := res
		if res.Full != step.full || d.Transactions != step.tx || res.NextSync != 0 || d.Netlink {
			t.Errorf("%s: full %v, %d transactions, NextSync %v, netlink %v; want full %v, %d transactions, no NextSync, no netlink",
				step.name, res.Full, d.Transactions, res.NextSync, d.Netlink, step.full, step.tx)
		}
		dump := fake.Dump()
		for _, line := range step.contains {
			if !strings.Contains(dump, line) {
				t.Errorf("%s: the table lacks %q:\n%s", step.name, line, dump)
			}
		}
		for _, line := range step.lacks {
			if strings.Contains(dump, line) {
				t.Errorf("%s: the table still holds %q:\n%s", step.name, line, dump)
			}
		}
		if _, want, _ := flat.Script(rs, flat.Options{}); !sameElements(dump, want) {
			t.Errorf("%s: the table's elements differ from Script's:\n%s\nwant\n%s", step.name, dump, want)
		}
		last = rs
	}
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		t.Errorf("CheckState: %+v, %v; want nothing missing", missing, err)
	}
	for _, tc := range []struct {
		gone knftables.Object
		want svcproxy.Drift
	}{
		{&knftables.Chain{Name: "masquerading"}, svcproxy.Drift{Kind: svcproxy.DriftChain, What: "chain masquerading"}},
		{&knftables.Set{Name: "no-endpoint-reject"}, svcproxy.Drift{Kind: svcproxy.DriftSet, What: "set no-endpoint-reject"}},
	} {
		tx := fake.NewTransaction()
		tx.Delete(tc.gone)
		if err := fake.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if missing, err := ex.CheckState(ctx); missing != tc.want || err != nil {
			t.Errorf("CheckState without %+v: %+v, %v; want %+v", tc.gone, missing, err, tc.want)
		}
		ex.RequestFullSync()
		if _, err := ex.Apply(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	if err := ex.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if fake.Table != nil {
		t.Errorf("after Cleanup the table is still there:\n%s", fake.Dump())
	}
}

// sameElements reports whether a Fake's dump and a Script hold the
// same elements, one per set and key.
func sameElements(dump, script string) bool {
	elements := func(s string, perLine bool) map[string]bool {
		out := map[string]bool{}
		for _, line := range strings.Split(s, "\n") {
			body, ok := strings.CutPrefix(line, "add element ")
			if !ok {
				continue
			}
			head, list, _ := strings.Cut(body, " { ")
			list = strings.TrimSuffix(list, " }")
			items := []string{list}
			if !perLine {
				items = strings.Split(list, ", ")
			}
			for _, it := range items {
				out[head+" "+it] = true
			}
		}
		return out
	}
	a, b := elements(dump, true), elements(script, false)
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
