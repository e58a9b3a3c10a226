//go:build linux

package nftables_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/internal/netnsrun"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
)

// nftCounters matches the counters of `nft list ruleset`, which traffic
// changes.
var nftCounters = regexp.MustCompile(`packets \d+ bytes \d+`)

// hostRuleset reads, without changing anything, the host namespace's
// nftables ruleset, without counters.
func hostRuleset(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "ruleset").Output()
	if err != nil {
		t.Fatalf("reading the host's ruleset: %v", err)
	}
	return nftCounters.ReplaceAllString(string(out), "counter")
}

// TestExecutorNetNS syncs over nft and netlink, checks and cleans up the
// table of a namespace from the test process, which stays in its own
// namespace: the table appears in the target namespace only, and the
// host's ruleset is as it was.
func TestExecutorNetNS(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	target := lab.NewNS("nftnetns")
	hostBefore := hostRuleset(t)
	selfBefore, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}

	cfg := config4()
	ex, err := nftables.NewExecutor(nftables.ExecutorConfig{Family: cfg.Family, Netlink: true, NetNS: filepath.Join("/run/netns", target.Name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	ctx := context.Background()
	w := newWorld(t, cfg)
	w.add(svc("ns1", "web", "198.19.0.10"), slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: "node-a"}))
	if res, err := ex.Apply(ctx, w.build()); err != nil || !res.Full {
		t.Fatalf("first Sync: full %v, %v; want a full sync", res.Full, err)
	}
	// An incremental sync goes over the netlink socket, which must be in
	// the target namespace too.
	w.add(svc("ns1", "db", "198.19.0.11"), slice("ns1", "db", 5432, ep{ip: "198.18.65.2", node: "node-a"}))
	res, err := ex.Apply(ctx, w.build())
	if details := res; err != nil || res.Full || !details.Netlink {
		t.Fatalf("second Sync: %+v %+v, %v; want an incremental sync over netlink", res, details, err)
	}
	listing, err := target.Run(ctx, "nft", "list", "table", "ip", nftables.DefaultTable)
	if err != nil || !strings.Contains(listing, "198.19.0.10") || !strings.Contains(listing, "198.19.0.11") {
		t.Fatalf("the target namespace's table lacks the Services: %v\n%s", err, listing)
	}
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		t.Errorf("CheckState in the target namespace: %+v, %v; want nothing missing", missing, err)
	}
	if diff := cmp.Diff(hostBefore, hostRuleset(t)); diff != "" {
		t.Errorf("the host's ruleset changed after Sync (-before +after):\n%s", diff)
	}
	if err := ex.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := target.Run(ctx, "nft", "list", "tables"); err != nil || strings.Contains(out, nftables.DefaultTable) {
		t.Errorf("after Cleanup the target namespace still lists %q (%v)", out, err)
	}
	if diff := cmp.Diff(hostBefore, hostRuleset(t)); diff != "" {
		t.Errorf("the host's ruleset changed after Cleanup (-before +after):\n%s", diff)
	}
	if self, err := os.Readlink("/proc/self/ns/net"); err != nil || self != selfBefore {
		t.Errorf("the test process moved from %s to %s (%v)", selfBefore, self, err)
	}
}

// TestCleanupNetNS runs the package's Cleanup in a namespace that holds
// both layouts' tables in both families: it deletes the named table (the
// kube-proxy layout's by default) in ip and ip6 and nothing else, a
// missing table is not an error, and a bad name is refused before nft
// runs. The host's ruleset is as it was.
func TestCleanupNetNS(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	target := lab.NewNS("nftcleanup")
	hostBefore := hostRuleset(t)
	ns, err := netnsrun.Open(filepath.Join("/run/netns", target.Name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	ctx := context.Background()
	for _, f := range []string{"ip", "ip6"} {
		for _, table := range []string{nftables.DefaultTable, "svcproxy-flat"} {
			if out, err := target.Run(ctx, "nft", "add", "table", f, table); err != nil {
				t.Fatalf("adding table %s %s: %v\n%s", f, table, err, out)
			}
		}
	}
	tables := func() string {
		t.Helper()
		out, err := target.Run(ctx, "nft", "list", "tables")
		if err != nil {
			t.Fatalf("listing the tables: %v\n%s", err, out)
		}
		return strings.Join(strings.Fields(out), " ")
	}
	for _, step := range []struct {
		name, table string
		want        string
	}{
		{"the default table", "", "table ip svcproxy-flat table ip6 svcproxy-flat"},
		{"the default table again, missing", "", "table ip svcproxy-flat table ip6 svcproxy-flat"},
		{"the flat layout's table", "svcproxy-flat", ""},
	} {
		if err := ns.Do(func() error { return nftables.Cleanup(ctx, step.table) }); err != nil {
			t.Fatalf("%s: Cleanup: %v", step.name, err)
		}
		if got := tables(); got != step.want {
			t.Errorf("%s: tables %q after Cleanup, want %q", step.name, got, step.want)
		}
	}
	if err := ns.Do(func() error { return nftables.Cleanup(ctx, "bad name") }); err == nil {
		t.Error("Cleanup of a table named \"bad name\": no error")
	}
	if diff := cmp.Diff(hostBefore, hostRuleset(t)); diff != "" {
		t.Errorf("the host's ruleset changed (-before +after):\n%s", diff)
	}
}
