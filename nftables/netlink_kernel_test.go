//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestNetlinkMatchesNFT: an Executor that applies incremental syncs over
// netlink leaves the kernel with the same table as one that applies them
// with nft: `nft list table` prints the same (table name aside), after
// every step. The steps take every golden case from an empty table and
// back, then random sequences of changes with full resyncs of the loaded
// table among them; every incremental sync must go over netlink, and so
// must the later chunks of first syncs and resyncs.
func TestNetlinkMatchesNFT(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("nl")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()
	now := time.Unix(1e9, 0)

	type pair struct {
		netlink, cli *nftables.Executor
		family       knftables.Family
	}
	newPair := func(cfg ruleset.Config, opts nftables.Options) pair {
		t.Helper()
		newExecutor := func(table string, nl bool) *nftables.Executor {
			o := opts
			o.Table = table
			return executorIn(t, ns, nftables.ExecutorConfig{
				Family: cfg.Family, Options: o, Netlink: nl, Now: func() time.Time { return now },
				// First syncs in several transactions, the later ones
				// over netlink.
				FirstSyncChunk: 3,
			})
		}
		return pair{netlink: newExecutor("vianetlink", true), cli: newExecutor("vianft", false), family: nftables.Family(cfg.Family)}
	}
	listing := func(f knftables.Family, table string) string {
		t.Helper()
		out, err := ns.Run(ctx, nft, "list", "table", string(f), table)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Replace(out, "table "+string(f)+" "+table+" {", "table T {", 1)
	}
	steps, netlinkSyncs := 0, 0
	// sync syncs both executors to rs and compares their tables: the nft
	// listing exactly, or (sameText false: after a resync, which keeps
	// elements that a full sync through nft adds again, in another order)
	// as kernelState, with elements sorted.
	sync := func(p pair, rs *ruleset.Ruleset, what string, sameText bool) {
		t.Helper()
		now = now.Add(700 * time.Millisecond)
		nlRes, err := p.netlink.Apply(ctx, rs)
		if err != nil {
			t.Fatalf("%s: netlink executor: %v", what, err)
		}
		cliRes, err := p.cli.Apply(ctx, rs)
		if err != nil {
			t.Fatalf("%s: nft executor: %v", what, err)
		}
		nl, cli := nlRes, cliRes
		if nlRes.Full != cliRes.Full || !nlRes.Full && nl.Operations != cli.Operations {
			t.Fatalf("%s: netlink sync %+v %+v, nft sync %+v %+v", what, nlRes, nl, cliRes, cli)
		}
		if !nlRes.Full && nl.Operations > 0 {
			if !nl.Netlink || nl.NotNetlink != nil {
				t.Fatalf("%s: incremental sync not over netlink: %v", what, nl.NotNetlink)
			}
			netlinkSyncs++
		}
		if cli.Netlink {
			t.Fatalf("%s: the nft executor used netlink", what)
		}
		if nlRes.Full && !cliRes.Full || nlRes.Full && !nl.Netlink && rs.Len() > 3 {
			t.Fatalf("%s: full sync of %d Service ports with nothing over netlink", what, rs.Len())
		}
		want, got := listing(p.family, "vianft"), listing(p.family, "vianetlink")
		if diff := cmp.Diff(want, got); sameText && diff != "" {
			t.Fatalf("%s: `nft list table` differs (-nft +netlink):\n%s", what, diff)
		}
		if want, got := kernelState(t, ns, nft, p.family, "vianft"), kernelState(t, ns, nft, p.family, "vianetlink"); want != got {
			t.Fatalf("%s: `nft -j list table` differs (-nft +netlink):\n%s", what, cmp.Diff(want, got))
		}
		steps++
	}

	for _, c := range goldenCases {
		rs := c.ruleset(t)
		p := newPair(rs.Config(), c.opts)
		empty := newWorld(t, rs.Config()).build()
		// The tables of the previous case are there: a full resync.
		sync(p, empty, c.name+": empty table", false)
		sync(p, rs, c.name+": every Service added", true)
		sync(p, empty, c.name+": every Service removed", true)
		sync(p, empty, c.name+": stale chains deleted", true)
		sync(p, rs, c.name+": added again", true)
	}
	for seed := range 12 {
		cfg, opts, pools := genConfigExample(seed)
		p := newPair(cfg, opts)
		w := newWorld(t, cfg)
		rs := w.build()
		sync(p, rs, fmt.Sprintf("seed %d: first sync", seed), true)
		for step := range 10 {
			for _, c := range genChanges(pools).Example(seed*100 + step) {
				c.apply(w)
			}
			rs = w.update(rs)
			if step%5 == 4 {
				// A full sync of the loaded table: one nft transaction,
				// or a chunked resync over netlink.
				p.netlink.RequestFullSync()
				p.cli.RequestFullSync()
				sync(p, rs, fmt.Sprintf("seed %d step %d, full resync", seed, step), false)
				continue
			}
			sync(p, rs, fmt.Sprintf("seed %d step %d", seed, step), true)
		}
	}
	if netlinkSyncs < steps/2 {
		t.Errorf("only %d of %d syncs went over netlink", netlinkSyncs, steps)
	}
	t.Logf("%d steps, %d incremental syncs over netlink, each leaving the same table as nft", steps, netlinkSyncs)
}

// TestNetlinkRefusedFallsBackToFullSync: when the kernel refuses an
// incremental transaction sent over netlink (here: someone deleted the
// table), the same Sync falls back to a full sync through nft, which puts
// the whole table back.
func TestNetlinkRefusedFallsBackToFullSync(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("nl")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()

	ex := executorIn(t, ns, nftables.ExecutorConfig{Family: config4().Family, Netlink: true})
	w := newWorld(t, config4())
	w.add(svc("ns1", "web", "198.19.0.10"), slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}))
	rs := w.build()
	if res, err := ex.Apply(ctx, rs); err != nil || !res.Full {
		t.Fatalf("first sync: %+v, %v", res, err)
	}
	if _, err := ns.Run(ctx, nft, "delete", "table", "ip", nftables.DefaultTable); err != nil {
		t.Fatal(err)
	}
	w.add(slice("ns1", "web", 8080, ep{ip: "198.18.64.3", node: node}))
	rs = w.update(rs)
	res, err := ex.Apply(ctx, rs)
	if err != nil || !res.Full || res.Fallback == nil || !strings.Contains(res.Fallback.Error(), "refused") {
		t.Fatalf("sync after the table was deleted: %+v, %v; want a full sync after the kernel refused the incremental one", res, err)
	}
	if got, want := kernelState(t, ns, nft, knftables.IPv4Family, nftables.DefaultTable), fullState(t, ns, nft, rs, nftables.Options{}, nil); got != want {
		t.Errorf("table after the fallback differs from a full render (-full +got):\n%s", cmp.Diff(want, got))
	}
}

// TestListNamesMatchesNFT: the Executor's netlink listing of a table's
// chains, sets and maps (which a full sync starts from) names what nft's
// does, anonymous sets aside, in both families.
func TestListNamesMatchesNFT(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("nl")
	ns.ToolOnPath(t, "nft")
	ctx := context.Background()
	for _, c := range goldenCases {
		rs := c.ruleset(t)
		f := nftables.Family(rs.Config().Family)
		i, err := nftables.Open(f, tableName(c.opts))
		if err != nil {
			t.Fatal(err)
		}
		existing, err := i.ListAll(ctx)
		if err != nil && !knftables.IsNotFound(err) {
			t.Fatal(err)
		}
		tx := i.NewTransaction()
		if _, err := nftables.Render(tx, rs, c.opts, existing); err != nil {
			t.Fatal(err)
		}
		if err := i.Run(ctx, tx); err != nil {
			t.Fatal(err)
		}
		want, err := i.ListAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		delete(want, "table")
		for kind, names := range want {
			want[kind] = slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "__") })
			slices.Sort(want[kind])
		}
		var got nftnl.Names
		if err := ns.Do(func() error {
			conn, err := nftnl.Dial()
			if err != nil {
				return err
			}
			defer conn.Close()
			family := nftnl.IPv4
			if f == knftables.IPv6Family {
				family = nftnl.IPv6
			}
			got, err = conn.ListNames(family, tableName(c.opts))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for kind := range got {
			slices.Sort(got[kind])
		}
		if diff := cmp.Diff(want, map[string][]string(got)); diff != "" {
			t.Errorf("%s: names (-nft +netlink):\n%s", c.name, diff)
		}
	}
}

// TestKernelCheckState: CheckState finds nothing missing after a sync, and
// names and classifies what was flushed or deleted behind the Executor's
// back: a fixed chain's rules, every chain's rules, a base chain, the
// whole table; with and without netlink (without, it sees objects by
// name, not flushed rules).
func TestKernelCheckState(t *testing.T) {
	netns.Require(t, "nft")
	for _, netlink := range []bool{true, false} {
		t.Run(fmt.Sprint("netlink=", netlink), func(t *testing.T) {
			lab := netns.NewLab(t)
			ns := lab.NewNS("check")
			nft := ns.ToolOnPath(t, "nft")
			ctx := context.Background()
			ex := executorIn(t, ns, nftables.ExecutorConfig{Family: config4().Family, Netlink: netlink})
			if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
				t.Fatalf("before any sync: %+v, %v", missing, err)
			}
			w := newWorld(t, config4())
			w.add(svc("ns1", "web", "198.19.0.10", affinity(60)), slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}))
			sync := func() {
				t.Helper()
				ex.RequestFullSync()
				if _, err := ex.Apply(ctx, w.build()); err != nil {
					t.Fatal(err)
				}
				if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
					t.Fatalf("after a full sync: %+v, %v", missing, err)
				}
			}
			sync()
			for _, tt := range []struct {
				change  []string
				missing string
				kind    svcproxy.DriftKind
			}{
				{[]string{"flush", "chain", "ip", nftables.DefaultTable, "services"}, "the rules of chain services", svcproxy.DriftRule},
				{[]string{"flush", "table", "ip", nftables.DefaultTable}, "the rules of chain ", svcproxy.DriftRule},
				{[]string{"delete", "chain", "ip", nftables.DefaultTable, "nat-output"}, "chain nat-output", svcproxy.DriftChain},
				{[]string{"delete", "table", "ip", nftables.DefaultTable}, "table " + nftables.DefaultTable, svcproxy.DriftTable},
			} {
				if _, err := ns.Run(ctx, nft, tt.change...); err != nil {
					t.Fatalf("nft %v: %v", tt.change, err)
				}
				missing, err := ex.CheckState(ctx)
				switch want := tt.missing; {
				case !netlink && strings.HasPrefix(want, "the rules of"):
					// nft's listing names objects, not rules.
					if missing.Found() || err != nil {
						t.Errorf("after nft %v without netlink: %+v, %v; want nothing seen", tt.change, missing, err)
					}
				case err != nil || !strings.HasPrefix(missing.What, want) || missing.Kind != tt.kind:
					t.Errorf("after nft %v: %+v, %v; want %q… of kind %q", tt.change, missing, err, want, tt.kind)
				}
				sync()
			}
		})
	}
}

// TestKernelDeepCheck: over netlink, CheckState finds what the cheap check
// does not read, each broken behind the Executor's back: a Service port's
// chain flushed, its map element deleted, the
// whole map flushed, an endpoint chain (of a ClientIP-affinity Service)
// flushed, and, their numbers kept, its map element pointed at another
// Service's chain and a rule of its chain replaced, each of its kind; a
// full sync repairs each.
// And an incremental sync of the Service port brings back its element
// deleted behind the Executor's back, and a rule replaced in a chain that
// sync rewrote is found too.
func TestKernelDeepCheck(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("deep")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()
	ex := executorIn(t, ns, nftables.ExecutorConfig{Family: config4().Family, Netlink: true})
	w := newWorld(t, config4())
	// ClientIP affinity, for endpoint chains (kube-proxy 1.37's layout has
	// them for affinity only).
	w.add(svc("ns1", "web", "198.19.0.10", affinity(60)), slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.3", node: node}))
	w.add(svc("ns1", "api", "198.19.0.11"), slice("ns1", "api", 8080, ep{ip: "198.18.64.5", node: node}))
	web := servicemap.PortName{Namespace: "ns1", Name: "web", Port: "p80", Protocol: v1.ProtocolTCP}
	api := servicemap.PortName{Namespace: "ns1", Name: "api", Port: "p80", Protocol: v1.ProtocolTCP}
	service := "service-" + nftables.ServiceChainBase(web)
	endpoint := "endpoint-" + nftables.EndpointChainBase(web, netip.MustParseAddrPort("198.18.64.2:8080"))
	element := "{ 198.19.0.10 . tcp . 80 }"
	// check runs CheckState until it finds something, at most as many
	// times as it takes to read every chain.
	check := func() (svcproxy.Drift, error) {
		for range 2 {
			if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
				return missing, err
			}
		}
		return svcproxy.Drift{}, nil
	}
	sync := func(full bool) {
		t.Helper()
		if full {
			ex.RequestFullSync()
		}
		if _, err := ex.Apply(ctx, w.build()); err != nil {
			t.Fatal(err)
		}
		if missing, err := check(); missing.Found() || err != nil {
			t.Fatalf("after a sync: %+v, %v", missing, err)
		}
	}
	sync(true)
	table := []string{"ip", nftables.DefaultTable}
	for _, tt := range []struct {
		change  func() []string
		missing string
		kind    svcproxy.DriftKind
	}{
		{func() []string { return slices.Concat([]string{"flush", "chain"}, table, []string{service}) }, "chain " + service + " has 0 rules, want ", svcproxy.DriftRule},
		{func() []string { return slices.Concat([]string{"flush", "chain"}, table, []string{endpoint}) }, "chain " + endpoint + " has 0 rules, want ", svcproxy.DriftRule},
		{func() []string {
			return slices.Concat([]string{"delete", "element"}, table, []string{"service-ips", element})
		}, "map service-ips has 1 elements, want 2", svcproxy.DriftElement},
		{func() []string { return slices.Concat([]string{"flush", "map"}, table, []string{"service-ips"}) }, "map service-ips has 0 elements, want 2", svcproxy.DriftElement},
		{func() []string { return slices.Concat([]string{"flush", "set"}, table, []string{"cluster-ips"}) }, "set cluster-ips has 0 elements, want 2", svcproxy.DriftElement},
		// One transaction: the element now leads to the other Service.
		{func() []string {
			return slices.Concat([]string{"delete", "element"}, table, []string{"service-ips", element, ";", "add", "element"}, table,
				[]string{"service-ips", "{ 198.19.0.10 . tcp . 80 : goto service-" + nftables.ServiceChainBase(api) + " }"})
		}, "map service-ips has elements other than those written (2 elements", svcproxy.DriftElement},
		{func() []string { return replaceRule(t, ns, nft, service) }, "chain " + service + " has rules other than those written", svcproxy.DriftRule},
	} {
		change := tt.change()
		if out, err := ns.Run(ctx, nft, change...); err != nil {
			t.Fatalf("nft %v: %v\n%s", change, err, out)
		}
		if missing, err := check(); err != nil || !strings.HasPrefix(missing.What, tt.missing) || missing.Kind != tt.kind {
			t.Errorf("after nft %v: %+v, %v; want %q… of kind %q", change, missing, err, tt.missing, tt.kind)
		}
		sync(true)
	}

	// The element deleted, then its Service port changes: the incremental
	// sync adds it again.
	if _, err := ns.Run(ctx, nft, slices.Concat([]string{"delete", "element"}, table, []string{"service-ips", element})...); err != nil {
		t.Fatal(err)
	}
	w.add(slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.4", node: node}))
	res, err := ex.Apply(ctx, w.build())
	if err != nil || res.Full {
		t.Fatalf("incremental sync: %+v, %v", res, err)
	}
	if missing, err := check(); missing.Found() || err != nil {
		t.Errorf("after the incremental sync of the changed Service port: %+v, %v; want its element back", missing, err)
	}
	if _, err := ns.Run(ctx, nft, replaceRule(t, ns, nft, service)...); err != nil {
		t.Fatal(err)
	}
	if missing, err := check(); err != nil || !strings.HasPrefix(missing.What, "chain "+service+" has rules other than those written") {
		t.Errorf("a rule replaced after the incremental sync that wrote its chain: %+v, %v", missing, err)
	}
}

// replaceRule is the nft command that replaces the first rule of chain
// of the kube-proxy table in ns with a rule that drops, the number of
// rules kept.
func replaceRule(t *testing.T, ns *netns.NS, nft, chain string) []string {
	t.Helper()
	out, err := ns.Run(context.Background(), nft, "-a", "list", "chain", "ip", nftables.DefaultTable, chain)
	if err != nil {
		t.Fatalf("nft -a list chain %s: %v\n%s", chain, err, out)
	}
	m := regexp.MustCompile(`# handle (\d+)\n(?s:.*)# handle (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rule handle in chain %s:\n%s", chain, out)
	}
	return []string{"replace", "rule", "ip", nftables.DefaultTable, chain, "handle", m[2], "counter", "drop"}
}
