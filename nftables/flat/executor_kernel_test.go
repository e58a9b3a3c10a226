//go:build linux

package flat_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

// TestKernelExecutorFlat syncs the flat layout with the Executor over
// netlink into a node's namespace, in both IP families, and sends real
// connections after each step: the first sync (definitions through nft,
// elements over netlink), an element-only change (over netlink), a new
// endpoint count (through nft), a repair found by CheckState and made by a
// requested full sync (the definitions in one nft transaction, the
// elements in one over netlink), and Cleanup.
func TestKernelExecutorFlat(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 1})
	c.StartEcho(8080)
	for _, v6 := range []bool{false, true} {
		executorFlatFamily(t, c, v6)
	}
}

// executorFlatFamily is TestKernelExecutorFlat in one IP family.
func executorFlatFamily(t *testing.T, c *netns.Cluster, v6 bool) {
	client, pod0, pod1 := c.Clients[0], c.Pods[0], c.Pods[1]
	cfg, svcIP := config4(), "198.19.0.10"
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
	if v6 {
		cfg, svcIP = config6(), "2001:db8:19::10"
		cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR6}
	}
	ex, err := flat.NewExecutor(flat.ExecutorConfig{Family: cfg.Family, Netlink: true,
		NetNS: filepath.Join("/run/netns", c.Node.Name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	ctx := context.Background()
	ip := func(h *netns.Host) string { return h.IP(v6).String() }
	web := netip.AddrPortFrom(netip.MustParseAddr(svcIP), 80)
	w := newWorld(t, cfg)
	sync := func(what string, full, netlink bool, minTx, maxTx int) {
		t.Helper()
		res, err := ex.Apply(ctx, w.build())
		d := res
		if err != nil || res.Full != full || d.Netlink != netlink || d.Transactions < minTx || d.Transactions > maxTx {
			t.Fatalf("%s: %+v %+v, %v; want full %v, netlink %v, %d to %d transactions", what, res, d, err, full, netlink, minTx, maxTx)
		}
		w.CheckWarnings(what, res.Warnings)
	}

	w.add(svc("ns1", "web", svcIP), slice("ns1", "web", 8080, ep{ip: ip(pod0), node: node}))
	sync("first sync", true, true, 2, 2)
	reachMasqueraded(t, client, v6, web, pod0)

	w.add(slice("ns1", "web", 8080, ep{ip: ip(pod1), node: node}))
	sync("endpoint replaced", false, true, 1, 1)
	reachMasqueraded(t, client, v6, web, pod1)

	w.add(slice("ns1", "web", 8080, ep{ip: ip(pod0), node: node}, ep{ip: ip(pod1), node: node}))
	sync("a second endpoint", false, false, 1, 1)
	reachMasqueraded(t, client, v6, web, pod0, pod1)

	family := string(kfamily(cfg.Family))
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		t.Fatalf("CheckState: %+v, %v; want nothing missing", missing, err)
	}
	if out, err := c.Node.Run(ctx, "nft", "flush", "chain", family, flat.DefaultTable, "masquerading"); err != nil {
		t.Fatalf("flushing chain masquerading: %v\n%s", err, out)
	}
	if missing, err := ex.CheckState(ctx); missing != (svcproxy.Drift{Kind: svcproxy.DriftRule, What: "the rules of chain masquerading"}) || err != nil {
		t.Fatalf("CheckState after a flush: %+v, %v", missing, err)
	}
	ex.RequestFullSync()
	sync("requested full sync (Resync: definitions through nft, elements over netlink)", true, true, 2, 2)
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		t.Errorf("CheckState after the full sync: %+v, %v; want nothing missing", missing, err)
	}
	reachMasqueraded(t, client, v6, web, pod0, pod1)

	// What an earlier Ruleset left in the table: a set of another endpoint
	// count, a map, and chains that use the set, the second jumping to the
	// first (which the kernel lists first). A full sync of the loaded table
	// deletes them.
	table := family + " " + flat.DefaultTable
	leftovers := "add set " + table + " cluster-7-tcp { type inet_service ; }\n" +
		"add map " + table + " stale-map { type inet_service : inet_service ; elements = { 1 : 2 } ; }\n" +
		"add chain " + table + " stale-a\nadd chain " + table + " stale-b\n" +
		"add rule " + table + " stale-b jump stale-a\nadd rule " + table + " stale-a th dport @cluster-7-tcp accept\n"
	path := filepath.Join(t.TempDir(), "leftovers.nft")
	if err := os.WriteFile(path, []byte(leftovers), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Node.Run(ctx, "nft", "-f", path); err != nil {
		t.Fatalf("adding leftovers: %v\n%s", err, out)
	}
	ex.RequestFullSync()
	sync("full sync of a table with leftovers", true, true, 2, 2)
	out, err := c.Node.Run(ctx, "nft", "list", "table", family, flat.DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cluster-7-tcp", "stale-map", "stale-a", "stale-b"} {
		if strings.Contains(out, name) {
			t.Errorf("after a full sync the table still has %s:\n%s", name, out)
		}
	}
	reachMasqueraded(t, client, v6, web, pod0, pod1)

	if err := ex.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Node.Run(ctx, "nft", "list", "tables"); err != nil || strings.Contains(out, flat.DefaultTable) {
		t.Errorf("after Cleanup the node lists %q (%v)", out, err)
	}
}
