//go:build linux

package flat_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

// TestKernelFlat loads the flat layout with nft -f and sends real TCP
// connections and UDP datagrams through it: a cluster IP spread over its
// endpoints and masqueraded, UDP to a cluster IP, to an external IP and to
// a node port (externalTrafficPolicy Cluster: masqueraded), a node port,
// a Service without endpoints (refused), a Local
// node port without local endpoints (dropped: no answer), then an
// element-only change sent over netlink.
func TestKernelFlat(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, RemotePods: 1, Clients: 1})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(t, "nft")
	for _, v6 := range []bool{false, true} {
		flatKernelFamily(t, c, nft, v6)
	}
}

// flatKernelFamily is TestKernelFlat in one IP family.
func flatKernelFamily(t *testing.T, c *netns.Cluster, nft string, v6 bool) {
	client, pod0, pod1, pod2 := c.Clients[0], c.Pods[0], c.Pods[1], c.Pods[2]
	const quick = 2 * time.Second
	cfg, svcIP, emptyIP, dropIP, dnsIP, dnsExternalIP := config4(), "198.19.0.10", "198.19.0.11", "198.19.0.12", "198.19.0.13", "198.19.200.13"
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
	if v6 {
		cfg, svcIP, emptyIP, dropIP, dnsIP, dnsExternalIP = config6(), "2001:db8:19::10", "2001:db8:19::11", "2001:db8:19::12", "2001:db8:19::13", "2001:db8:19::200:13"
		cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR6}
	}
	ip := func(h *netns.Host) string { return h.IP(v6).String() }
	w := newWorld(t, cfg)
	w.add(
		svc("ns1", "web", svcIP, nodePort(30080)),
		slice("ns1", "web", 8080, ep{ip: ip(pod0), node: node}, ep{ip: ip(pod2), node: "node-b"}),
		svc("ns1", "empty", emptyIP),
		svc("ns1", "remote", dropIP, nodePort(30082), externalLocal),
		slice("ns1", "remote", 8080, ep{ip: ip(pod2), node: "node-b"}),
		svc("ns1", "dns", dnsIP, udp, externalIPs(dnsExternalIP), nodePort(30083)),
		sliceProto("ns1", "dns", v1.ProtocolUDP, 8080, ep{ip: ip(pod1), node: node}),
	)
	rs := w.build()
	fake := knftables.NewFake(kfamily(cfg.Family), flat.DefaultTable)
	tx := fake.NewTransaction()
	st, res := flat.Render(tx, rs, flat.Options{})
	if len(res.Warnings) > 0 {
		t.Fatalf("warnings: %v", res.Warnings)
	}
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatalf("knftables' Fake refuses the flat layout: %v", err)
	}
	runScript(t, c.Node.NS, nft, tx.String())

	web := netip.AddrPortFrom(netip.MustParseAddr(svcIP), 80)
	reach := func(dst netip.AddrPort, want ...*netns.Host) {
		t.Helper()
		reachMasqueraded(t, client, v6, dst, want...)
	}
	reach(web, pod0, pod2)
	reach(netip.AddrPortFrom(c.Node.IP(v6), 30080), pod0, pod2)
	if r, err := client.UDP(netip.AddrPortFrom(netip.MustParseAddr(dnsIP), 80), quick); err != nil || r.Identity != pod1.Label {
		t.Errorf("UDP to a cluster IP: %+v, %v; want an answer from %s", r, err, pod1.Label)
	}
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr(dnsExternalIP), 80),
		netip.AddrPortFrom(c.Node.IP(v6), 30083),
	} {
		r, err := client.UDP(dst, quick)
		if err != nil || r.Identity != pod1.Label {
			t.Errorf("UDP to %s: %+v, %v; want an answer from %s", dst, r, err, pod1.Label)
		} else if r.Source.Addr() == client.IP(v6) {
			t.Errorf("UDP to %s: source kept, want masqueraded", dst)
		}
	}
	if _, err := client.TCP(netip.AddrPortFrom(netip.MustParseAddr(emptyIP), 80), quick); !errors.Is(err, netns.ErrRefused) {
		t.Errorf("Service without endpoints: %v, want refused", err)
	}
	if _, err := client.TCP(netip.AddrPortFrom(c.Node.IP(v6), 30082), time.Second); err == nil || errors.Is(err, netns.ErrRefused) {
		t.Errorf("Local node port without local endpoints: %v, want no answer (dropped)", err)
	}

	// Same endpoint count: elements only, over netlink.
	w.add(slice("ns1", "web", 8080, ep{ip: ip(pod1), node: node}, ep{ip: ip(pod2), node: "node-b"}))
	next := w.update(rs)
	ch, err := flat.RenderChanges(fake.NewTransaction(), st, rs, next)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.ElementsOnly {
		t.Fatal("an endpoint replaced by another: not an element-only change")
	}
	applyOverNetlink(t, c.Node, ch)
	reach(web, pod1, pod2)

	// A third endpoint: a new count, rules and sets change, through nft.
	w.add(slice("ns1", "web", 8080, ep{ip: ip(pod0), node: node}, ep{ip: ip(pod1), node: node}, ep{ip: ip(pod2), node: "node-b"}))
	third := w.update(next)
	tx = fake.NewTransaction()
	if ch, err = flat.RenderChanges(tx, st, next, third); err != nil || ch.ElementsOnly {
		t.Fatalf("third endpoint: err %v, elements only %v", err, ch.ElementsOnly)
	}
	runScript(t, c.Node.NS, nft, tx.String())
	reach(web, pod0, pod1, pod2)
	runScript(t, c.Node.NS, nft, "delete table "+string(kfamily(cfg.Family))+" "+flat.DefaultTable+"\n")
}

// reachMasqueraded connects 30 times from client to dst and checks that
// the connections reach exactly the want hosts, masqueraded.
func reachMasqueraded(t *testing.T, client *netns.Host, v6 bool, dst netip.AddrPort, want ...*netns.Host) {
	t.Helper()
	got := map[string]bool{}
	for range 30 {
		r, err := client.TCP(dst, 2*time.Second)
		if err != nil {
			t.Fatalf("%s → %s: %v", client.Label, dst, err)
		}
		if r.Source.Addr() == client.IP(v6) {
			t.Errorf("%s → %s: source kept, want masqueraded", client.Label, dst)
		}
		got[r.Identity] = true
	}
	for _, h := range want {
		if !got[h.Label] {
			t.Errorf("%s → %s reached %v, want %s among them", client.Label, dst, got, h.Label)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s → %s reached %v, want %d endpoints", client.Label, dst, got, len(want))
	}
}

// applyOverNetlink sends an element-only change from inside h's namespace.
func applyOverNetlink(t *testing.T, h *netns.Host, ch flat.Changes) {
	t.Helper()
	if err := h.Do(func() error {
		n, err := flat.DialNetlink()
		if err != nil {
			return err
		}
		defer n.Close()
		return n.Apply(ch)
	}); err != nil {
		t.Fatal(err)
	}
}

// runScript runs an nft script in a namespace, for at most 5
// minutes; a failure shows the script unless it is long.
func runScript(tb testing.TB, ns *netns.NS, nft, script string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "flat.nft")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := ns.Run(ctx, nft, "-f", path); err != nil {
		if len(script) > 8<<10 {
			script = fmt.Sprintf("(a script of %d bytes)", len(script))
		}
		tb.Fatalf("nft -f: %v\n%s\n%s", err, out, script)
	}
}
