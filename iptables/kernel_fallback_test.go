//go:build linux

package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// TestKernelPartialSyncChecksState: after a full sync, the node's tables
// are damaged from outside (nat flushed, a jump from a built-in chain
// deleted, an unchanged Service's chain deleted), then one Service changes.
// The Sync that follows falls back to a full sync and says why, and
// traffic to the Service that did not change works again, from a client
// (PREROUTING, masqueraded in POSTROUTING) and from the node (OUTPUT). It
// runs with kube-proxy's names and with another prefix.
func TestKernelPartialSyncChecksState(t *testing.T) {
	netns.Require(t, kernelTools...)
	ctx := context.Background()
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 1})
	c.StartEcho(8080)
	cfg := ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: testNode}, ClusterCIDRs: []netip.Prefix{netns.PodCIDR4}}
	podEPs := func(pods ...int) []ep {
		var eps []ep
		for _, i := range pods {
			eps = append(eps, ep{ip: c.Pods[i].IPv4.String(), node: testNode, ready: true})
		}
		return eps
	}
	objects := func(webPods ...int) []any {
		return []any{
			service("ns1", "stable", "198.19.0.20"),
			slice("ns1", "stable", "stable-1", 8080, v1.ProtocolTCP, podEPs(0, 1)...),
			service("ns1", "web", "198.19.0.21"),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, podEPs(webPods...)...),
		}
	}
	initial, changed := build(t, cfg, objects(0, 1)...), build(t, cfg, objects(1)...)
	cni, err := NewNames("CNI")
	if err != nil {
		t.Fatal(err)
	}
	for _, names := range []Names{DefaultNames(), cni} {
		t.Run(names.Prefix(), func(t *testing.T) {
			e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, Names: names, Runner: nsRunner(c.Node.NS)})
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range damages(names) {
				t.Run(tt.name, func(t *testing.T) {
					testDamagedPartialSync(t, c, e, names, initial, changed, tt)
				})
			}
			if err := e.Cleanup(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// damage is a change to the node's tables made behind the Executor's back,
// and the fallback it must cause.
type damage struct {
	name       string
	commands   [][]string // iptables arguments, after -w
	want       FallbackReason
	wantDetail string
}

// damages are the changes TestKernelPartialSyncChecksState makes, for the
// chains of names.
func damages(names Names) []damage {
	stableChain := names.ServiceChain(servicemap.PortName{Namespace: "ns1", Name: "stable", Port: "p80", Protocol: v1.ProtocolTCP})
	return []damage{
		{"nat flushed", [][]string{{"-t", "nat", "-F"}}, FallbackStateMissing, "the jump from nat OUTPUT to " + names.Services()},
		{"jump from nat PREROUTING deleted", [][]string{jumpTo("nat", "PREROUTING").args(names, "-D")[1:]}, FallbackStateMissing, "the jump from nat PREROUTING to " + names.Services()},
		{"unchanged Service's chain deleted", [][]string{
			{"-t", "nat", "-F", names.Services()},
			{"-t", "nat", "-F", stableChain},
			{"-t", "nat", "-X", stableChain},
		}, FallbackPartialFailed, stableChain},
	}
}

// testDamagedPartialSync: a full sync of initial, the damage, then a Sync
// of changed, which must fall back to a full sync and serve the Service
// that did not change.
func testDamagedPartialSync(t *testing.T, c *netns.Cluster, e *Executor, names Names, initial, changed *ruleset.Ruleset, d damage) {
	ctx := context.Background()
	stable := netip.MustParseAddrPort("198.19.0.20:80")
	e.RequestFullSync()
	if res, err := e.Apply(ctx, initial); err != nil || !res.Full {
		t.Fatalf("full Sync: %+v, %v", res, err)
	}
	reachStable(t, c, stable)
	for _, args := range d.commands {
		c.Node.MustRun("iptables", append([]string{"-w"}, args...)...)
	}
	start := time.Now()
	res, err := e.Apply(ctx, changed)
	if err != nil {
		t.Fatalf("Sync after the change: %v", err)
	}
	t.Logf("sync after the change in %v: %+v", time.Since(start).Round(time.Millisecond), res)
	if !res.Full || res.Fallback != d.want || !strings.Contains(res.FallbackDetail, d.wantDetail) {
		t.Errorf("Sync after the change: full %v, fallback %q (%s); want a full sync, %q naming %q", res.Full, res.Fallback, res.FallbackDetail, d.want, d.wantDetail)
	}
	reachStable(t, c, stable)
	if st := readSaved(t, c.Node.NS, false, names); len(st.jumps) != len(jumps) {
		t.Errorf("%d jumps from built-in chains, want %d:\n%s", len(st.jumps), len(jumps), strings.Join(st.jumps, "\n"))
	}
}

// jumpTo returns the jump from table's built-in chain from.
func jumpTo(table, from string) jumpRule {
	for _, j := range jumps {
		if j.table == table && j.from == from {
			return j
		}
	}
	panic(fmt.Sprintf("no jump from %s %s", table, from))
}

// reachStable connects to the Service at addr a few times from the client
// (masqueraded: the client is outside the pod CIDR) and from the node.
func reachStable(t *testing.T, c *netns.Cluster, addr netip.AddrPort) {
	t.Helper()
	const timeout = 2 * time.Second
	pods := map[string]bool{"pod0": true, "pod1": true}
	client := c.Clients[0]
	for range 5 {
		r, err := client.TCP(addr, timeout)
		if err != nil || !pods[r.Identity] {
			t.Fatalf("client → %v: %+v, %v", addr, r, err)
		}
		if r.Source.Addr() == client.IPv4 {
			t.Errorf("client → %v: source %v not masqueraded", addr, r.Source)
		}
	}
	if r, err := c.Node.TCP(addr, timeout); err != nil || !pods[r.Identity] {
		t.Fatalf("node → %v: %+v, %v", addr, r, err)
	}
}
