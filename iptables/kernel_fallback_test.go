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
// (PREROUTING, masqueraded in POSTROUTING) and from the node (OUTPUT).
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
	stable := netip.MustParseAddrPort("198.19.0.20:80")
	stableChain := DefaultNames().ServiceChain(servicemap.PortName{Namespace: "ns1", Name: "stable", Port: "p80", Protocol: v1.ProtocolTCP})
	e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, Runner: nsRunner(c.Node.NS)})
	if err != nil {
		t.Fatal(err)
	}
	iptables := func(args ...string) func(t *testing.T) {
		return func(t *testing.T) { c.Node.MustRun("iptables", append([]string{"-w"}, args...)...) }
	}
	tests := []struct {
		name       string
		damage     []func(t *testing.T)
		want       FallbackReason
		wantDetail string
	}{
		{"nat flushed", []func(*testing.T){iptables("-t", "nat", "-F")}, FallbackStateMissing, "the rule of nat KUBE-PROXY-CANARY"},
		{"jump from nat PREROUTING deleted", []func(*testing.T){iptables(jumpTo("nat", "PREROUTING").args(DefaultNames(), "-D")[1:]...)}, FallbackStateMissing, "the jump from nat PREROUTING to KUBE-SERVICES"},
		{"unchanged Service's chain deleted", []func(*testing.T){
			iptables("-t", "nat", "-F", "KUBE-SERVICES"),
			iptables("-t", "nat", "-F", stableChain),
			iptables("-t", "nat", "-X", stableChain),
		}, FallbackPartialFailed, stableChain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.RequestFullSync()
			if res, err := e.Sync(ctx, initial); err != nil || !res.Full {
				t.Fatalf("full Sync: %+v, %v", res, err)
			}
			reachStable(t, c, stable)
			for _, damage := range tt.damage {
				damage(t)
			}
			start := time.Now()
			res, err := e.Sync(ctx, changed)
			if err != nil {
				t.Fatalf("Sync after the change: %v", err)
			}
			t.Logf("sync after the change in %v: %+v", time.Since(start).Round(time.Millisecond), res)
			if !res.Full || res.Fallback != tt.want || !strings.Contains(res.FallbackDetail, tt.wantDetail) {
				t.Errorf("Sync after the change: full %v, fallback %q (%s); want a full sync, %q naming %q", res.Full, res.Fallback, res.FallbackDetail, tt.want, tt.wantDetail)
			}
			reachStable(t, c, stable)
			if st := readSaved(t, c.Node.NS, false, DefaultNames()); len(st.jumps) != len(jumps) {
				t.Errorf("%d jumps from built-in chains, want %d:\n%s", len(st.jumps), len(jumps), strings.Join(st.jumps, "\n"))
			}
		})
	}
	if err := e.Cleanup(ctx); err != nil {
		t.Fatal(err)
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
