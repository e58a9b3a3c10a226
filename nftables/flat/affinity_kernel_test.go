//go:build linux

package flat_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// TestKernelFlatAffinity sends real TCP connections through the flat
// layout's ClientIP affinity (IPv4): each client stays on one endpoint of a
// cluster IP; after its endpoint is replaced (an element-only change over
// netlink, or through nft when the count of local endpoints changes), a
// client bound to it reaches it no more and is bound to a
// current endpoint, while a client bound to another endpoint keeps it; an
// external client of an external IP under externalTrafficPolicy Local
// stays on one local endpoint. The affinity map holds one entry per client
// and frontend. Turning affinity off and on again (its chains, maps and
// sets go and come back) goes through nft.
func TestKernelFlatAffinity(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3, RemotePods: 1, Clients: 2})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(t, "nft")
	local0, local1, local2, remote := c.Pods[0], c.Pods[1], c.Pods[2], c.Pods[3]
	cfg := config4()
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
	endpoints := func(hosts ...*netns.Host) []ep {
		var eps []ep
		for _, h := range hosts {
			n := node
			if h == remote {
				n = "node-b"
			}
			eps = append(eps, ep{ip: h.IPv4.String(), node: n})
		}
		return eps
	}
	w := newWorld(t, cfg)
	w.add(svc("ns1", "sticky", "198.19.0.10", externalIPs("198.19.200.10"), externalLocal, affinity(600)),
		slice("ns1", "sticky", 8080, endpoints(local0, local1, remote)...))
	rs := w.build()
	fake := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable)
	tx := fake.NewTransaction()
	st, res := flat.Render(tx, rs, flat.Options{})
	if len(res.Warnings) > 0 {
		t.Fatalf("warnings: %v", res.Warnings)
	}
	runScript(t, c.Node.NS, nft, tx.String())

	clusterIP, externalIP := netip.MustParseAddrPort("198.19.0.10:80"), netip.MustParseAddrPort("198.19.200.10:80")
	bound := map[string]string{}
	for _, client := range c.Clients {
		bound[client.Label] = stickTo(t, client, clusterIP)
	}
	if got := stickTo(t, c.Clients[0], externalIP); got != local0.Label && got != local1.Label {
		t.Errorf("%s → %s (Local) stays on %s, want a local endpoint", c.Clients[0].Label, externalIP, got)
	}
	if n := affinityEntries(t, c.Node, nft); n != 3 {
		t.Errorf("affinity map holds %d entries, want 3 (two clients of the cluster IP, one of the external IP)", n)
	}
	resyncOverNetlink(t, c.Node, nft, rs)
	if n := affinityEntries(t, c.Node, nft); n != 3 {
		t.Errorf("affinity map holds %d entries after a resync, want the 3 it held", n)
	}
	for _, client := range c.Clients {
		if got := stickTo(t, client, clusterIP); got != bound[client.Label] {
			t.Errorf("%s moved from %s to %s across a resync", client.Label, bound[client.Label], got)
		}
	}

	// Replace client 0's endpoint by local2.
	gone := bound[c.Clients[0].Label]
	kept := []*netns.Host{local2}
	for _, h := range []*netns.Host{local0, local1, remote} {
		if h.Label != gone {
			kept = append(kept, h)
		}
	}
	w.add(slice("ns1", "sticky", 8080, endpoints(kept...)...))
	next := w.update(rs)
	tx = fake.NewTransaction()
	ch, err := flat.RenderChanges(tx, st, rs, next)
	switch {
	case err != nil:
		t.Fatal(err)
	case ch.ElementsOnly:
		applyOverNetlink(t, c.Node, ch)
	default: // a remote endpoint replaced by a local one: the local count changes
		runScript(t, c.Node.NS, nft, tx.String())
	}
	if got := stickTo(t, c.Clients[0], clusterIP); got == gone {
		t.Errorf("%s reaches %s after it was removed", c.Clients[0].Label, gone)
	}
	if other := bound[c.Clients[1].Label]; other != gone {
		if got := stickTo(t, c.Clients[1], clusterIP); got != other {
			t.Errorf("%s moved from %s to %s, whose endpoint stayed", c.Clients[1].Label, other, got)
		}
	}

	toggleAffinity(t, c.Node, nft, w, st, next)
	stickTo(t, c.Clients[0], clusterIP)
	if n := affinityEntries(t, c.Node, nft); n != 1 {
		t.Errorf("affinity map holds %d entries after it came back, want 1", n)
	}
	runScript(t, c.Node.NS, nft, "delete table ip "+flat.DefaultTable+"\n")
}

// resyncOverNetlink applies a full resync of rs to the flat table that h
// holds, as the Executor does: Resync's definitions through nft, its
// elements over netlink.
func resyncOverNetlink(t *testing.T, h *netns.Host, nft string, rs *ruleset.Ruleset) {
	t.Helper()
	_, load, res := flat.Resync(rs, flat.Options{})
	warnings.None(t, res.Warnings)
	runScript(t, h.NS, nft, load.Definitions)
	if err := h.Do(func() error {
		n, err := flat.DialNetlink()
		if err != nil {
			return err
		}
		defer n.Close()
		_, err = n.Load(load)
		return err
	}); err != nil {
		t.Fatalf("resync over netlink: %v", err)
	}
}

// toggleAffinity turns the affinity of TestKernelFlatAffinity's Service
// off, then on again, from the Ruleset prev that st knows: its chains,
// maps and sets go and come back through nft, in transactions the kernel
// takes.
func toggleAffinity(t *testing.T, h *netns.Host, nft string, w *world, st *flat.State, prev *ruleset.Ruleset) {
	t.Helper()
	fake := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable)
	for _, on := range []bool{false, true} {
		mods := []func(*v1.Service){externalIPs("198.19.200.10"), externalLocal}
		if on {
			mods = append(mods, affinity(600))
		}
		w.add(svc("ns1", "sticky", "198.19.0.10", mods...))
		next := w.update(prev)
		tx := fake.NewTransaction()
		if ch, err := flat.RenderChanges(tx, st, prev, next); err != nil || ch.ElementsOnly {
			t.Fatalf("affinity on %v: err %v, elements only %v", on, err, ch.ElementsOnly)
		}
		runScript(t, h.NS, nft, tx.String())
		prev = next
	}
}

// stickTo connects 12 times from client to dst and returns the one
// endpoint they all reached; it fails the test when they reached several.
// Each connection may take a SYN retransmission: the first after its
// endpoint went is dropped.
func stickTo(t *testing.T, client *netns.Host, dst netip.AddrPort) string {
	t.Helper()
	got := map[string]int{}
	var last string
	for range 12 {
		r, err := client.TCP(dst, 4*time.Second)
		if err != nil {
			t.Fatalf("%s → %s: %v", client.Label, dst, err)
		}
		got[r.Identity]++
		last = r.Identity
	}
	if len(got) != 1 {
		t.Fatalf("%s → %s reached %v, want one endpoint", client.Label, dst, got)
	}
	return last
}

// affinityEntries counts the elements of the IPv4 affinity map of TCP.
func affinityEntries(t *testing.T, h *netns.Host, nft string) int {
	t.Helper()
	out, err := h.Run(context.Background(), nft, "-j", "list", "map", "ip", flat.DefaultTable, "affinity-tcp")
	if err != nil {
		t.Fatalf("nft list map: %v\n%s", err, out)
	}
	return countJSONElements(t, out)
}

// countJSONElements counts the elements of the one set or map that
// `nft -j list map` printed.
func countJSONElements(t *testing.T, out string) int {
	t.Helper()
	var listing struct {
		Nftables []struct {
			Map *struct {
				Elem []json.RawMessage `json:"elem"`
			} `json:"map"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil {
		t.Fatalf("nft -j list map: %v\n%s", err, out)
	}
	for _, o := range listing.Nftables {
		if o.Map != nil {
			return len(o.Map.Elem)
		}
	}
	t.Fatalf("nft -j list map printed no map:\n%s", out)
	return 0
}

// TestKernelFlatAffinityTimeout: a client's entry lasts its Service's
// timeout after its last new connection, not after its first: with a
// timeout of 2 s, four connections 1.2 s apart keep it (and the client on
// one endpoint) 4.8 s after the first; 2.5 s without one expire it.
func TestKernelFlatAffinityTimeout(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 1})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(t, "nft")
	cfg := config4()
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
	w := newWorld(t, cfg)
	w.add(svc("ns1", "sticky", "198.19.0.10", affinity(2)),
		slice("ns1", "sticky", 8080, ep{ip: c.Pods[0].IPv4.String(), node: node}, ep{ip: c.Pods[1].IPv4.String(), node: node}))
	tx := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable).NewTransaction()
	_, res := flat.Render(tx, w.build(), flat.Options{})
	warnings.None(t, res.Warnings)
	runScript(t, c.Node.NS, nft, tx.String())
	defer runScript(t, c.Node.NS, nft, "delete table ip "+flat.DefaultTable+"\n")

	dst := netip.MustParseAddrPort("198.19.0.10:80")
	first := ""
	for i := range 4 {
		r, err := c.Clients[0].TCP(dst, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = r.Identity
		} else if r.Identity != first {
			t.Fatalf("connection %d reached %s, the first %s: the entry expired 2 s after the first connection, not the last", i, r.Identity, first)
		}
		time.Sleep(1200 * time.Millisecond)
	}
	if n := affinityEntries(t, c.Node, nft); n != 1 {
		t.Fatalf("%d entries after 4.8 s of connections 1.2 s apart, want 1", n)
	}
	time.Sleep(2500 * time.Millisecond)
	if n := affinityEntries(t, c.Node, nft); n != 0 {
		t.Errorf("%d entries 3.7 s after the last connection, want 0 (timeout 2 s)", n)
	}
}

// TestKernelFlatAffinityIPv6: in an IPv6 table (a hashed client . frontend
// key, the target port from its own map) each client stays on one
// endpoint of a cluster IP and of a node port, and the map holds one entry
// per client and frontend; the evaluator sends each client of the listed
// table where the kernel does; after a client's endpoint is replaced, the
// client reaches it no more.
func TestKernelFlatAffinityIPv6(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3, Clients: 2})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(t, "nft")
	cfg := config6()
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR6}
	w := newWorld(t, cfg)
	endpoints := func(hosts ...*netns.Host) []ep {
		var eps []ep
		for _, h := range hosts {
			eps = append(eps, ep{ip: h.IPv6.String(), node: node})
		}
		return eps
	}
	w.add(svc("ns1", "sticky", "2001:db8:19::10", nodePort(30080), affinity(600)), slice("ns1", "sticky", 8080, endpoints(c.Pods[0], c.Pods[1])...))
	rs := w.build()
	fake := knftables.NewFake(knftables.IPv6Family, flat.DefaultTable)
	tx := fake.NewTransaction()
	st, res := flat.Render(tx, rs, flat.Options{})
	if len(res.Warnings) > 0 {
		t.Fatalf("warnings: %v", res.Warnings)
	}
	runScript(t, c.Node.NS, nft, tx.String())
	defer runScript(t, c.Node.NS, nft, "delete table ip6 "+flat.DefaultTable+"\n")
	clusterIP := netip.MustParseAddrPort("[2001:db8:19::10]:80")
	bound := map[string]string{}
	for _, client := range c.Clients {
		bound[client.Label] = stickTo(t, client, clusterIP)
		stickTo(t, client, netip.AddrPortFrom(c.Node.IPv6, 30080))
	}
	out, err := c.Node.Run(context.Background(), nft, "-j", "list", "map", "ip6", flat.DefaultTable, "affinity-tcp")
	if err != nil {
		t.Fatalf("nft list map: %v\n%s", err, out)
	}
	if n := countJSONElements(t, out); n != 4 {
		t.Errorf("affinity map holds %d entries, want 4 (two clients, two frontends)", n)
	}
	// The evaluator hashes the client as the kernel does: the listed table
	// sends each client to the endpoint it stuck to.
	for _, args := range [][]string{{"list"}, {"-j", "list"}} {
		listed, err := c.Node.Run(context.Background(), nft, append(args, "table", "ip6", flat.DefaultTable)...)
		if err != nil {
			t.Fatalf("nft %v: %v", args, err)
		}
		tb, err := nfttrace.Parse(listed)
		if err != nil {
			t.Fatalf("nft %v: %v", args, err)
		}
		for _, client := range c.Clients {
			pod := map[string]netip.AddrPort{}
			for _, p := range c.Pods {
				pod[p.Label] = netip.AddrPortFrom(p.IPv6, 8080)
			}
			o, path, err := tb.Evaluate(trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.AddrPortFrom(client.IPv6, 40000), Dst: clusterIP})
			if err != nil || len(o.Targets) != 1 || o.Targets[0].Endpoint != pod[bound[client.Label]] {
				t.Errorf("nft %v: %s evaluates to %v, %v; want %s only\npath:\n%s", args, client.Label, o, err, bound[client.Label], path)
			}
		}
	}

	gone := bound[c.Clients[0].Label]
	kept := []*netns.Host{c.Pods[2]}
	for _, p := range c.Pods[:2] {
		if p.Label != gone {
			kept = append(kept, p)
		}
	}
	w.add(slice("ns1", "sticky", 8080, endpoints(kept...)...))
	ch, err := flat.RenderChanges(fake.NewTransaction(), st, rs, w.update(rs))
	if err != nil || !ch.ElementsOnly {
		t.Fatalf("endpoint replaced: err %v, elements only %v", err, ch.ElementsOnly)
	}
	applyOverNetlink(t, c.Node, ch)
	if got := stickTo(t, c.Clients[0], clusterIP); got == gone {
		t.Errorf("%s reaches %s after it was removed", c.Clients[0].Label, gone)
	}
}
