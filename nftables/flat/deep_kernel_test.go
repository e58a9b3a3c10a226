//go:build linux

package flat_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

// firstElement matches the first element of a set or map in nft's listing
// (its key, without a comment or a map's value).
var firstElement = regexp.MustCompile(`elements = \{ ([^,}:]*?)(?: comment "[^"]*")?(?: :[^,}]*)?\s*[,}\n]`)

// TestKernelFlatDeepCheck: over netlink, CheckState finds what the cheap
// check does not read, each broken behind the Executor's back: a target
// group's chain flushed, an element of a targets map deleted, an element
// of a frontend set deleted, a whole map flushed, and, their numbers
// kept, an element of a targets map pointed at another address and a rule
// of a group chain replaced; then a base chain and the whole table
// deleted; each of its kind; a full sync repairs each.
// And an incremental sync of the Service port brings back its element
// deleted behind the Executor's back, and a rule replaced in a group chain
// that an incremental sync rewrote is found.
func TestKernelFlatDeepCheck(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("flatdeep")
	ctx := context.Background()
	cfg := config4()
	ex, err := flat.NewExecutor(flat.ExecutorConfig{Family: cfg.Family, Netlink: true, NetNS: filepath.Join("/run/netns", ns.Name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	w := newWorld(t, cfg)
	w.add(svc("ns1", "web", "198.19.0.10"), slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.3", node: node}))
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
	first := func(kind, name string) string {
		t.Helper()
		out, err := ns.Run(ctx, "nft", "list", kind, "ip", flat.DefaultTable, name)
		if err != nil {
			t.Fatalf("nft list %s %s: %v", kind, name, err)
		}
		m := firstElement.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no element in %s %s:\n%s", kind, name, out)
		}
		return strings.TrimSpace(m[1])
	}
	for _, tt := range []struct {
		name    string
		change  func() []string
		missing string
		kind    svcproxy.DriftKind
	}{
		{"group chain flushed", func() []string { return []string{"flush", "chain", "ip", flat.DefaultTable, "cluster"} }, "chain cluster has 0 rules", svcproxy.DriftRule},
		{"targets map element deleted", func() []string {
			return []string{"delete", "element", "ip", flat.DefaultTable, "cluster-2-tcp-targets", "{ " + first("map", "cluster-2-tcp-targets") + " }"}
		}, "map cluster-2-tcp-targets has 1 elements, want 2", svcproxy.DriftElement},
		{"frontend set element deleted", func() []string {
			return []string{"delete", "element", "ip", flat.DefaultTable, "cluster-2-tcp", "{ " + first("set", "cluster-2-tcp") + " }"}
		}, "set cluster-2-tcp has 0 elements, want 1", svcproxy.DriftElement},
		{"targets map flushed", func() []string { return []string{"flush", "map", "ip", flat.DefaultTable, "cluster-2-tcp-targets"} }, "map cluster-2-tcp-targets has 0 elements, want 2", svcproxy.DriftElement},
		{"targets map element pointed elsewhere", func() []string {
			element := "{ 198.19.0.10 . tcp . 80 . 0 }"
			return []string{"delete", "element", "ip", flat.DefaultTable, "cluster-2-tcp-targets", element, ";",
				"add", "element", "ip", flat.DefaultTable, "cluster-2-tcp-targets", "{ 198.19.0.10 . tcp . 80 . 0 : 198.18.64.9 . 8080 }"}
		}, "map cluster-2-tcp-targets has elements other than those written (2 elements", svcproxy.DriftElement},
		{"group chain rule replaced", func() []string {
			return []string{"replace", "rule", "ip", flat.DefaultTable, "cluster", "handle", lastHandle(t, ns, "cluster"), "counter", "drop"}
		}, "chain cluster has rules other than those written", svcproxy.DriftRule},
		{"base chain deleted", func() []string { return []string{"delete", "chain", "ip", flat.DefaultTable, "nat-output"} }, "chain nat-output is missing", svcproxy.DriftChain},
		{"table deleted", func() []string { return []string{"delete", "table", "ip", flat.DefaultTable} }, "table " + flat.DefaultTable + " is missing", svcproxy.DriftTable},
	} {
		change := tt.change()
		if out, err := ns.Run(ctx, "nft", change...); err != nil {
			t.Fatalf("%s: nft %v: %v\n%s", tt.name, change, err, out)
		}
		if missing, err := ex.CheckState(ctx); err != nil || !strings.HasPrefix(missing.What, tt.missing) || missing.Kind != tt.kind {
			t.Errorf("%s: CheckState %+v, %v; want %q… of kind %q", tt.name, missing, err, tt.missing, tt.kind)
		}
		sync()
	}

	change := []string{"delete", "element", "ip", flat.DefaultTable, "cluster-2-tcp", "{ " + first("set", "cluster-2-tcp") + " }"}
	if out, err := ns.Run(ctx, "nft", change...); err != nil {
		t.Fatalf("nft %v: %v\n%s", change, err, out)
	}
	w.add(slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.4", node: node}))
	if res, err := ex.Apply(ctx, w.build()); err != nil || res.Full {
		t.Fatalf("incremental sync: %+v, %v", res, err)
	}
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		t.Errorf("after the incremental sync of the changed Service port: %+v, %v; want its element back", missing, err)
	}

	// A third endpoint: a target group of 3 appears, the group chain is
	// rewritten through nft; a rule of it replaced then is found.
	w.add(slice("ns1", "web", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.4", node: node}, ep{ip: "198.18.64.5", node: node}))
	if res, err := ex.Apply(ctx, w.build()); err != nil || res.Full || res.Netlink {
		t.Fatalf("incremental sync rewriting the group chain: %+v, %v", res, err)
	}
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		t.Fatalf("after the group chain's rewrite: %+v, %v", missing, err)
	}
	replace := []string{"replace", "rule", "ip", flat.DefaultTable, "cluster", "handle", lastHandle(t, ns, "cluster"), "counter", "drop"}
	if out, err := ns.Run(ctx, "nft", replace...); err != nil {
		t.Fatalf("nft %v: %v\n%s", replace, err, out)
	}
	if missing, err := ex.CheckState(ctx); err != nil || !strings.HasPrefix(missing.What, "chain cluster has rules other than those written") {
		t.Errorf("a rule of the group chain an incremental sync rewrote, replaced: %+v, %v", missing, err)
	}
}

// lastHandle is the handle of the last rule of chain of the flat table in
// ns.
func lastHandle(t *testing.T, ns *netns.NS, chain string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), "nft", "-a", "list", "chain", "ip", flat.DefaultTable, chain)
	if err != nil {
		t.Fatalf("nft -a list chain %s: %v\n%s", chain, err, out)
	}
	m := regexp.MustCompile(`# handle (\d+)\n(?s:.*)# handle (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rule handle in chain %s:\n%s", chain, out)
	}
	return m[2]
}
