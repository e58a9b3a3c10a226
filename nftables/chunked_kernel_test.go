//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
)

// TestKernelChunkedChanges: an incremental sync over netlink of more
// Service ports than ExecutorConfig.ChangeChunk goes in several
// transactions; afterwards every Service answers from its new endpoint,
// and the table is the full render of the new Ruleset.
func TestKernelChunkedChanges(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 1})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(t, "nft")
	client, pod0, pod1 := c.Clients[0], c.Pods[0], c.Pods[1]
	ctx := context.Background()
	cfg := config4()
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}

	now := time.Unix(1e9, 0)
	ex := executorIn(t, c.Node.NS, nftables.ExecutorConfig{Family: cfg.Family, Netlink: true, ChangeChunk: 3, Now: func() time.Time { return now }})
	w := newWorld(t, cfg)
	const services = 10
	ip := func(i int) string { return fmt.Sprintf("198.19.0.%d", 10+i) }
	for i := range services {
		name := fmt.Sprintf("svc%d", i)
		w.add(svc("ns1", name, ip(i)), slice("ns1", name, 8080, ep{ip: pod0.IPv4.String(), node: node}))
	}
	old := w.build()
	if res, err := ex.Apply(ctx, old); err != nil || !res.Full {
		t.Fatalf("first sync: %+v, %v", res, err)
	}

	// Every Service moves to pod1, two are added, one is removed: 12 ports.
	for i := range services + 2 {
		name := fmt.Sprintf("svc%d", i)
		w.add(svc("ns1", name, ip(i)), slice("ns1", name, 8080, ep{ip: pod1.IPv4.String(), node: node}))
	}
	w.Svcs.Delete("ns1", "svc0")
	rs := w.update(old)
	now = now.Add(2 * time.Second)
	res, err := ex.Apply(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if details := res; res.Full || !details.Netlink || details.Transactions < 4 {
		t.Fatalf("sync of 12 changed ports: %+v %+v; want an incremental sync over netlink in at least 4 transactions", res, details)
	}

	for i := 1; i < services+2; i++ {
		dst := netip.AddrPortFrom(netip.MustParseAddr(ip(i)), 80)
		r, err := client.TCP(dst, 2*time.Second)
		if err != nil {
			t.Errorf("%s → %s: %v", client.Label, dst, err)
			continue
		}
		if r.Identity != pod1.Label {
			t.Errorf("%s → %s reached %s, want %s", client.Label, dst, r.Identity, pod1.Label)
		}
	}

	rendered, err := nftables.RenderChanges(knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable).NewTransaction(), old, rs, nftables.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := kernelState(t, c.Node.NS, nft, knftables.IPv4Family, nftables.DefaultTable)
	if want := fullState(t, c.Node.NS, nft, rs, nftables.Options{}, rendered.Stale); got != want {
		t.Errorf("table after the chunked sync differs from a full render (-full +got):\n%s", cmp.Diff(want, got))
	}
}
