//go:build linux

package flat_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

// flatWorld is a cluster that uses every set of the flat layout: cluster
// IPs, node ports, external and load-balancer IPs with source ranges (and
// a range that lets the node through), Local policies, UDP, no endpoints,
// ClientIP affinity (two timeouts; rendered in IPv4 only).
func flatWorld(t *testing.T, v6 bool) (*world, func(i int) string) {
	cfg, p := config4(), pools4
	if v6 {
		cfg, p = config6(), pools6
	}
	cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(map[bool]string{false: "198.19.0.0/16", true: "2001:db8:19::/108"}[v6])}
	cfg.NodePortAddresses = []netip.Addr{netip.MustParseAddr(map[bool]string{false: "198.18.0.1", true: "2001:db8:18::1"}[v6])}
	w := newWorld(t, cfg)
	pod := func(i int) string { return p.podIPs[i] }
	w.add(
		svc("ns1", "web", p.clusterIPs[0], nodePort(30001), externalIPs(p.externalIPs[0]), affinity(300)),
		slice("ns1", "web", 8080, ep{ip: pod(0), node: node}, ep{ip: pod(1), node: "node-b"}, ep{ip: pod(2), node: "node-b"}),
		svc("ns1", "lb", p.clusterIPs[1], nodePort(30002), loadBalancer(p.lbIPs[0]), sourceRanges(p.sourceRanges[0], p.sourceRanges[1], p.sourceRanges[1]), externalLocal, affinity(10800)),
		slice("ns1", "lb", 8080, ep{ip: pod(0), node: node}, ep{ip: pod(3), node: "node-b"}),
		svc("ns1", "dns", p.clusterIPs[2], udp),
		sliceProto("ns1", "dns", v1.ProtocolUDP, 5353, ep{ip: pod(1), node: "node-b"}),
		svc("ns1", "empty", p.clusterIPs[3], loadBalancer(p.lbIPs[1]), sourceRanges(p.sourceRanges[2]), nodePort(30003)),
		// Nested source ranges (one is 0.0.0.0/0), one of them twice.
		svc("ns1", "wide", map[bool]string{false: "198.19.0.5", true: "2001:db8:19::5"}[v6],
			loadBalancer(map[bool]string{false: "198.19.128.3", true: "2001:db8:19::8003"}[v6]),
			sourceRanges(append(p.sourceRanges, p.sourceRanges[0])...), nodePort(30004)),
		slice("ns1", "wide", 8080, ep{ip: pod(2), node: node}),
	)
	return w, pod
}

// TestKernelFlatNetlinkMatchesNFT: a flat-layout table written by its
// definitions through nft and its elements over netlink lists (`nft -j list
// table`) exactly as the same table written by one nft -f (Script) and
// as the same table written through knftables (Render); so do they
// after an element-only change, over netlink to the first and through nft
// to the others, and after a resync of the changed table (Resync, over
// netlink) against one nft -f.
func TestKernelFlatNetlinkMatchesNFT(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("flatnl")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()
	var nl *flat.Netlink
	if err := ns.Do(func() (err error) { nl, err = flat.DialNetlink(); return err }); err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	run := func(script string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "flat.nft")
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := ns.Run(ctx, nft, "-f", path); err != nil {
			t.Fatalf("nft -f: %v\n%s\n%s", err, out, script)
		}
	}
	for _, v6 := range []bool{false, true} {
		w, pod := flatWorld(t, v6)
		rs := w.build()
		family := kfamily(rs.Config().Family)
		opts := func(table string) flat.Options { return flat.Options{Table: table} }

		stNL, load, res := flat.FirstSync(rs, opts("viant"))
		warnings.None(t, res.Warnings)
		run(load.Definitions)
		if _, err := nl.Load(load); err != nil {
			t.Fatalf("netlink load: %v", err)
		}
		stScript, script, res := flat.Script(rs, opts("script"))
		warnings.None(t, res.Warnings)
		run(script)
		tx := knftables.NewFake(family, "knft").NewTransaction()
		stKnft, res := flat.Render(tx, rs, opts("knft"))
		warnings.None(t, res.Warnings)
		run("add table " + string(family) + " knft\n" + tx.String())
		compare := func(when string) {
			t.Helper()
			want := kernelState(t, ns, nft, family, "script")
			for _, table := range []string{"viant", "knft"} {
				if diff := cmp.Diff(want, kernelState(t, ns, nft, family, table)); diff != "" {
					t.Errorf("%s %s: table %s lists otherwise than one nft -f (-nft +%s):\n%s", family, when, table, table, diff)
				}
			}
		}
		compare("after the first sync")

		w.add(slice("ns1", "web", 8080, ep{ip: pod(3), node: "node-b"}, ep{ip: pod(1), node: "node-b"}, ep{ip: pod(2), node: node}))
		w.add(slice("ns1", "lb", 8080, ep{ip: pod(1), node: node}, ep{ip: pod(2), node: "node-b"}))
		next := w.build()
		for _, c := range []struct {
			st    *flat.State
			table string
		}{{stNL, "viant"}, {stScript, "script"}, {stKnft, "knft"}} {
			tx := knftables.NewFake(family, c.table).NewTransaction()
			ch, err := flat.RenderChanges(tx, c.st, rs, next)
			if err != nil {
				t.Fatal(err)
			}
			if c.table != "viant" {
				run(tx.String())
				continue
			}
			if !ch.ElementsOnly {
				t.Fatalf("%s: endpoints replaced: not an element-only change", family)
			}
			if err := nl.Apply(ch); err != nil {
				t.Fatalf("netlink change: %v", err)
			}
		}
		compare("after an element-only change")

		// A resync of the changed tables back to rs: over netlink
		// (Resync) into viant, by one nft -f into script.
		_, resync, res := flat.Resync(rs, opts("viant"))
		warnings.None(t, res.Warnings)
		run(resync.Definitions)
		if _, err := nl.Load(resync); err != nil {
			t.Fatalf("netlink resync: %v", err)
		}
		_, script, _ = flat.Script(rs, opts("script"))
		run(script)
		if diff := cmp.Diff(kernelState(t, ns, nft, family, "script"), kernelState(t, ns, nft, family, "viant")); diff != "" {
			t.Errorf("%s after a resync: table viant lists otherwise than one nft -f (-nft +viant):\n%s", family, diff)
		}
	}
}

// TestKernelFlatNetlinkRefused: a load into a table that does not exist
// is refused, with the kernel's error, and applies nothing; the same
// socket then loads the table once its definitions are written, so that
// no answer to the refused transaction is left to be read as another's.
func TestKernelFlatNetlinkRefused(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("flatnlerr")
	nft := ns.ToolOnPath(t, "nft")
	var nl *flat.Netlink
	if err := ns.Do(func() (err error) { nl, err = flat.DialNetlink(); return err }); err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	w, _ := flatWorld(t, false)
	_, load, res := flat.FirstSync(w.build(), flat.Options{Table: "refused"})
	warnings.None(t, res.Warnings)
	_, err := nl.Load(load)
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("load into no table: %v, want ENOENT", err)
	}
	path := filepath.Join(t.TempDir(), "flat.nft")
	if err := os.WriteFile(path, []byte(load.Definitions), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := ns.Run(context.Background(), nft, "-f", path); err != nil {
		t.Fatalf("nft -f: %v\n%s", err, out)
	}
	if n, err := nl.Load(load); err != nil || n != 1 {
		t.Fatalf("load after the definitions: %d transactions, %v", n, err)
	}
	out, err := ns.Run(context.Background(), nft, "list", "set", "ip", "refused", "hairpin")
	if err != nil || !strings.Contains(string(out), "elements = {") {
		t.Errorf("hairpin set after the load: %v\n%s", err, out)
	}
}
