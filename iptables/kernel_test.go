//go:build linux

package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
)

// The kernel tests run only inside network namespaces they create (through
// internal/testkit/netns); every iptables command goes through `ip netns exec`, so
// the host namespace's firewall is never touched. They skip without root
// or the tools, and fail instead when SVCPROXY_E2E=required.

var kernelTools = []string{"iptables", "ip6tables", "iptables-restore", "ip6tables-restore", "iptables-save", "ip6tables-save"}

func nsRunner(ns *netns.NS) Runner {
	return ExecRunner{Prefix: []string{"ip", "netns", "exec", ns.Name}}
}

// savedState is what iptables-save shows of the chains names owns: the
// number of rules of each, by table, and the rules of the built-in chains
// that jump to one of them.
type savedState struct {
	chains map[string]map[string]int
	jumps  []string
}

func readSaved(t *testing.T, ns *netns.NS, v6 bool, names Names) savedState {
	t.Helper()
	save := "iptables-save"
	if v6 {
		save = "ip6tables-save"
	}
	out, err := ns.Run(context.Background(), save)
	if err != nil {
		t.Fatal(err)
	}
	st := savedState{chains: map[string]map[string]int{}}
	table := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			if c := strings.Fields(line[1:])[0]; names.Owns(c) {
				if st.chains[table] == nil {
					st.chains[table] = map[string]int{}
				}
				st.chains[table][c] += 0
			}
		case strings.HasPrefix(line, "-A "):
			c := strings.Fields(line)[1]
			if names.Owns(c) {
				st.chains[table][c]++
			} else if f := strings.Fields(line); names.Owns(f[len(f)-1]) {
				st.jumps = append(st.jumps, table+" "+line)
			}
		}
	}
	return st
}

// modelCounts is savedState.chains as the model of the Executor's full
// restore of rs (Render and the Canary chains) predicts it.
func modelCounts(t *testing.T, names Names, rs *ruleset.Ruleset) map[string]map[string]int {
	m, err := applyRestore(newModel(), renderFull(names, rs, renderOptions{canary: true}))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]map[string]int{}
	for table, chains := range m {
		counts[table] = map[string]int{}
		for c, rules := range chains {
			counts[table][c] = len(rules)
		}
	}
	return counts
}

// TestKernelAcceptsRenderings: in a fresh namespace, iptables-restore
// --test accepts every golden rendering (ip6tables-restore the IPv6 ones);
// then an Executor syncs the scenarios one after the other (full or partial
// syncs as the Configs allow, never falling back) and iptables-save shows
// exactly the chains and rule counts the restore model predicts, with the
// twelve jumps; Cleanup leaves nothing of ours.
func TestKernelAcceptsRenderings(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ctx := context.Background()
	for _, v6 := range []bool{false, true} {
		ns := lab.NewNS(map[bool]string{false: "ipt4", true: "ipt6"}[v6])
		restore := map[bool]string{false: "iptables-restore", true: "ip6tables-restore"}[v6]
		groups := map[Names][]scenario{}
		for _, sc := range scenarios {
			if sc.v6() == v6 {
				groups[sc.names] = append(groups[sc.names], sc)
			}
		}
		for _, names := range slices.SortedFunc(maps.Keys(groups), func(a, b Names) int { return strings.Compare(a.Prefix(), b.Prefix()) }) {
			family := v1.IPv4Protocol
			if v6 {
				family = v1.IPv6Protocol
			}
			e, err := NewExecutor(ExecutorConfig{Family: family, Names: names, Runner: nsRunner(ns)})
			if err != nil {
				t.Fatal(err)
			}
			for _, sc := range groups[names] {
				golden, err := os.ReadFile(filepath.Join("testdata", sc.name+".golden"))
				if err != nil {
					t.Fatal(err)
				}
				cmd := ns.Command(ctx, restore, "--noflush", "--test")
				cmd.Stdin = bytes.NewReader(golden)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %s --test rejects the golden rendering: %v\n%s", sc.name, restore, err, out)
					continue
				}
				rs := sc.ruleset(t)
				start := time.Now()
				res, err := e.Apply(ctx, rs)
				if err != nil {
					t.Fatalf("%s: Sync: %v", sc.name, err)
				}
				if res.Fallback != FallbackNone {
					t.Errorf("%s: fell back to a full sync on an untouched kernel: %s: %s", sc.name, res.Fallback, res.FallbackDetail)
				}
				t.Logf("%s: %s sync in %v", sc.name, map[bool]string{true: "full", false: "partial"}[res.Full], time.Since(start).Round(time.Millisecond))
				st := readSaved(t, ns, v6, names)
				if d := cmp.Diff(modelCounts(t, names, rs), st.chains); d != "" {
					t.Errorf("%s: rules per chain in the kernel (-model +kernel):\n%s", sc.name, d)
				}
				if len(st.jumps) != len(jumps) {
					t.Errorf("%s: %d jumps from built-in chains, want %d:\n%s", sc.name, len(st.jumps), len(jumps), strings.Join(st.jumps, "\n"))
				}
				e.deepDue = time.Time{} // the deep check reads the tables as iptables-save prints them
				if missing, err := e.CheckState(ctx); missing.Found() || err != nil {
					t.Errorf("%s: CheckState after the sync: %+v, %v; want nothing", sc.name, missing, err)
				}
			}
			if err := e.Cleanup(ctx); err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			if st := readSaved(t, ns, v6, names); len(st.chains["nat"])+len(st.chains["filter"]) > 0 || len(st.jumps) > 0 {
				t.Errorf("after Cleanup: %v, jumps %v", st.chains, st.jumps)
			}
		}
	}
}

// TestKernelTraffic sends real connections through the rules: from the
// node (nat OUTPUT) and from a client namespace (PREROUTING, FORWARD) to a
// cluster IP reaching pods in other namespaces, to a NodePort, to a Service
// without endpoints (rejected), with ClientIP affinity, with
// externalTrafficPolicy Local (local endpoint only, client address kept),
// across a partial sync, and nothing after Cleanup.
func TestKernelTraffic(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "IPv4", true: "IPv6"}[v6], func(t *testing.T) {
			netns.Require(t, kernelTools...)
			testKernelTraffic(t, v6)
		})
	}
}

func testKernelTraffic(t *testing.T, v6 bool) {
	ctx := context.Background()
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, RemotePods: 1, Clients: 1})
	c.StartEcho(8080)
	client := c.Clients[0]

	family, podCIDR := v1.IPv4Protocol, netns.PodCIDR4
	svcIP := func(i int) string { return fmt.Sprintf("198.19.0.%d", 10+i) }
	if v6 {
		family, podCIDR = v1.IPv6Protocol, netns.PodCIDR6
		svcIP = func(i int) string { return fmt.Sprintf("2001:db8:19::%x", 0x10+i) }
	}
	// pod0 and pod1 run on this node ("node-a"), pod2 on the remote one.
	podEPs := func(pods ...int) []ep {
		var eps []ep
		for _, i := range pods {
			node := testNode
			if i >= 2 {
				node = "node-b"
			}
			eps = append(eps, ep{ip: c.Pods[i].IP(v6).String(), node: node, ready: true})
		}
		return eps
	}
	cfg := ruleset.Config{Family: family, Node: topology.Node{Name: testNode}, ClusterCIDRs: []netip.Prefix{podCIDR}}
	objects := func(webPods ...int) []any {
		return []any{
			service("ns1", "web", svcIP(0), nodePort(30080)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, podEPs(webPods...)...),
			service("ns1", "empty", svcIP(1)),
			service("ns1", "sticky", svcIP(2), clientIP(300)),
			slice("ns1", "sticky", "sticky-1", 8080, v1.ProtocolTCP, podEPs(0, 1, 2)...),
			service("ns1", "local", svcIP(3), nodePort(30081), eTPLocal(0)),
			slice("ns1", "local", "local-1", 8080, v1.ProtocolTCP, podEPs(0, 2)...),
		}
	}
	e, err := NewExecutor(ExecutorConfig{Family: family, Runner: nsRunner(c.Node.NS)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.Apply(ctx, build(t, cfg, objects(0, 1, 2)...)); err != nil {
		t.Fatal(err)
	}
	t.Logf("full sync in %v", time.Since(start).Round(time.Millisecond))

	const timeout = 2 * time.Second
	web := netip.AddrPortFrom(netip.MustParseAddr(svcIP(0)), 80)
	pods := map[string]bool{"pod0": true, "pod1": true, "pod2": true}

	// From the node itself (nat OUTPUT).
	r, err := c.Node.TCP(web, timeout)
	if err != nil || !pods[r.Identity] {
		t.Fatalf("node → %v: %+v, %v", web, r, err)
	}
	// From a client through the node: spread over the pods, and
	// masqueraded (the client is outside the pod CIDR).
	seen := map[string]int{}
	for range 30 {
		r, err := client.TCP(web, timeout)
		if err != nil {
			t.Fatalf("client → %v: %v", web, err)
		}
		seen[r.Identity]++
		if r.Source.Addr() == client.IP(v6) {
			t.Errorf("client → %v: source %v not masqueraded", web, r.Source)
		}
	}
	if len(seen) < 2 {
		t.Errorf("30 connections to %v all reached %v", web, seen)
	}
	// NodePort on the node's address.
	np := netip.AddrPortFrom(c.Node.IP(v6), 30080)
	if r, err := client.TCP(np, timeout); err != nil || !pods[r.Identity] {
		t.Errorf("client → node port %v: %+v, %v", np, r, err)
	}
	// No endpoints: rejected at once.
	empty := netip.AddrPortFrom(netip.MustParseAddr(svcIP(1)), 80)
	if _, err := client.TCP(empty, timeout); !errors.Is(err, netns.ErrRefused) {
		t.Errorf("client → %v (no endpoints): %v, want refused", empty, err)
	}
	// ClientIP affinity: one pod for every connection.
	sticky := netip.AddrPortFrom(netip.MustParseAddr(svcIP(2)), 80)
	stuck := map[string]int{}
	for range 10 {
		r, err := client.TCP(sticky, timeout)
		if err != nil {
			t.Fatalf("client → %v: %v", sticky, err)
		}
		stuck[r.Identity]++
	}
	if len(stuck) != 1 {
		t.Errorf("affinity: connections reached %v", stuck)
	}
	// externalTrafficPolicy Local: node-port traffic from outside goes to
	// the local endpoint only, with the client's address kept.
	localNP := netip.AddrPortFrom(c.Node.IP(v6), 30081)
	for range 10 {
		r, err := client.TCP(localNP, timeout)
		if err != nil || r.Identity != "pod0" || r.Source.Addr() != client.IP(v6) {
			t.Fatalf("client → %v (eTP Local): %+v, %v; want pod0 seeing the client's address", localNP, r, err)
		}
	}

	// A partial sync: web keeps only the remote pod.
	start = time.Now()
	res, err := e.Apply(ctx, build(t, cfg, objects(2)...))
	if err != nil || res.Full {
		t.Fatalf("second Sync: %+v, %v; want a partial sync", res, err)
	}
	t.Logf("partial sync in %v", time.Since(start).Round(time.Millisecond))
	for range 10 {
		if r, err := client.TCP(web, timeout); err != nil || r.Identity != "pod2" {
			t.Fatalf("client → %v after the partial sync: %+v, %v; want pod2", web, r, err)
		}
	}

	if err := e.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := client.TCP(web, 500*time.Millisecond); err == nil {
		t.Errorf("client → %v after Cleanup reached %+v", web, r)
	}
	if st := readSaved(t, c.Node.NS, v6, DefaultNames()); len(st.chains["nat"])+len(st.chains["filter"]) > 0 || len(st.jumps) > 0 {
		t.Errorf("after Cleanup: %v, jumps %v", st.chains, st.jumps)
	}
}
