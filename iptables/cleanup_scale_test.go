//go:build linux

package iptables

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/ruleset"
)

// cleanupWays are the ways TestKernelCleanupScale deletes our chains once
// the jumps to them are gone: Executor.deleteChains with several chunk
// sizes, and one restore that flushes and deletes them all, with and
// without "-S" lines (the latter, Cleanup's way before chunks, is last as
// it takes minutes from N = 10,000).
var cleanupWays = []struct {
	key, name string
	delete    func(ctx context.Context, e *Executor, filter, nat []string) error
}{
	{"once-S", "one restore, -S", func(ctx context.Context, e *Executor, filter, nat []string) error {
		return e.runner.Run(ctx, e.restoreCmd(renderDeleteOnce(filter, nat, true), nil))
	}},
	{"500", "chunks of 500", chunked(500)},
	{"2000", "chunks of 2000", chunked(2000)},
	{"5000", "chunks of 5000", chunked(5000)},
	{"once", "one restore, no -S", func(ctx context.Context, e *Executor, filter, nat []string) error {
		return e.runner.Run(ctx, e.restoreCmd(renderDeleteOnce(filter, nat, false), nil))
	}},
}

func chunked(chunk int) func(ctx context.Context, e *Executor, filter, nat []string) error {
	return func(ctx context.Context, e *Executor, filter, nat []string) error {
		return e.deleteChains(ctx, filter, nat, chunk)
	}
}

// renderDeleteOnce is restore input that flushes (":NAME" lines) and then
// deletes the chains, each table led by "-S" when list.
func renderDeleteOnce(filter, nat []string, list bool) []byte {
	var b strings.Builder
	for _, t := range []struct {
		name   string
		chains []string
	}{{"filter", filter}, {"nat", nat}} {
		if len(t.chains) == 0 {
			continue
		}
		b.WriteString("*" + t.name + "\n")
		if list {
			b.WriteString("-S\n")
		}
		for _, c := range t.chains {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, c := range t.chains {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}

// TestKernelCleanupScale measures Cleanup of a scalegen cluster of N
// Services × 10 endpoints, for the N listed in SVCPROXY_IPT_CLEANUP_SCALE
// (e.g. "1000,3000"); it is skipped otherwise. For each N it loads the
// rules with a full sync into a namespace of its own, with a foreign chain
// beside ours, and times Executor.Cleanup; it also times, each in a freshly
// loaded namespace, the listing, the removal of the jumps and each of the
// cleanupWays whose key SVCPROXY_IPT_CLEANUP_WAYS lists (e.g.
// "once,2000"; "all" for all). Every run must leave none of our chains and the foreign
// chain as it was. SVCPROXY_IPT_CLEANUP_TIMEOUT (a duration, 10m by
// default) bounds each step.
func TestKernelCleanupScale(t *testing.T) {
	spec := os.Getenv("SVCPROXY_IPT_CLEANUP_SCALE")
	if spec == "" {
		t.Skip("set SVCPROXY_IPT_CLEANUP_SCALE=1000,3000 to measure Cleanup at scale")
	}
	netns.Require(t, kernelTools...)
	timeout := 10 * time.Minute
	if v := os.Getenv("SVCPROXY_IPT_CLEANUP_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		timeout = d
	}
	lab := netns.NewLab(t)
	for i, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		w := scaleworld.New(scalegen.Spec{Services: n})
		ns := lab.NewNS(fmt.Sprintf("clean%d", i))
		e := loadForCleanup(t, ns, w.Ruleset, n, timeout)
		timedStep(t, n, "Executor.Cleanup", timeout, func(ctx context.Context) error { return e.Cleanup(ctx) })
		checkCleanedUp(t, ns, n, "Executor.Cleanup")
		ways := strings.Split(os.Getenv("SVCPROXY_IPT_CLEANUP_WAYS"), ",")
		for k, way := range cleanupWays {
			if !slices.Contains(ways, way.key) && !slices.Contains(ways, "all") {
				continue
			}
			ns := lab.NewNS(fmt.Sprintf("way%dx%d", i, k))
			e := loadForCleanup(t, ns, w.Ruleset, n, timeout)
			var owned map[string][]string
			timedStep(t, n, "list owned chains", timeout, func(ctx context.Context) (err error) {
				owned, err = e.ownedChains(ctx)
				return err
			})
			timedStep(t, n, "remove jumps", timeout, func(ctx context.Context) error { return e.removeJumps(ctx, owned) })
			timedStep(t, n, way.name, timeout, func(ctx context.Context) error {
				return way.delete(ctx, e, owned["filter"], owned["nat"])
			})
			checkCleanedUp(t, ns, n, way.name)
		}
	}
}

// TestKernelCleanupChunks cleans up, deleting three chains per restore,
// rules whose chains jump to one another (load-balancer source ranges:
// KUBE-FW- to KUBE-EXT- to KUBE-SVC- to KUBE-SEP- to KUBE-MARK-MASQ) beside
// a foreign chain: none of ours is left, and the foreign chain and the jump
// to it are as they were.
func TestKernelCleanupChunks(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ns := lab.NewNS("chunks")
	rs := scenarioNamed(t, "loadbalancer-source-ranges").ruleset(t)
	e := loadForCleanup(t, ns, rs, len(rs.Services()), time.Minute)
	e.deleteChunk = 3
	if owned := readSaved(t, ns, false, DefaultNames()); len(owned.chains["nat"]) <= 2*e.deleteChunk {
		t.Fatalf("only %d nat chains of ours: too few to cut into chunks", len(owned.chains["nat"]))
	}
	timedStep(t, len(rs.Services()), "Executor.Cleanup", time.Minute, func(ctx context.Context) error { return e.Cleanup(ctx) })
	checkCleanedUp(t, ns, len(rs.Services()), "Executor.Cleanup")
}

// foreignChain is a chain of someone else's, in nat, that Cleanup must
// leave with its rule.
const foreignChain = "OTHER-CHAIN"

// loadForCleanup adds foreignChain, with a jump to it from nat PREROUTING,
// to ns and syncs rs into it.
func loadForCleanup(t *testing.T, ns *netns.NS, rs *ruleset.Ruleset, n int, timeout time.Duration) *Executor {
	t.Helper()
	ns.MustRun("iptables", "-w", "-t", "nat", "-N", foreignChain)
	ns.MustRun("iptables", "-w", "-t", "nat", "-A", foreignChain, "-d", "198.18.0.1/32", "-j", "RETURN")
	ns.MustRun("iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-j", foreignChain)
	e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, Runner: nsRunner(ns)})
	if err != nil {
		t.Fatal(err)
	}
	timedStep(t, n, "load: full sync", timeout, func(ctx context.Context) error {
		_, err := e.Sync(ctx, rs)
		return err
	})
	return e
}

// timedStep runs f with a timeout and logs how long it took.
func timedStep(t *testing.T, n int, what string, timeout time.Duration, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if err := f(ctx); err != nil {
		t.Fatalf("N=%d %s: %v", n, what, err)
	}
	t.Logf("N=%d: %-40s %v", n, what, time.Since(start).Round(time.Millisecond))
}

// checkCleanedUp fails the test when ns has chains or jumps of ours left,
// or when foreignChain or the jump to it changed.
func checkCleanedUp(t *testing.T, ns *netns.NS, n int, what string) {
	t.Helper()
	if st := readSaved(t, ns, false, DefaultNames()); len(st.chains) != 0 || len(st.jumps) != 0 {
		t.Errorf("N=%d %s: left %d tables with chains of ours, jumps %v", n, what, len(st.chains), st.jumps)
	}
	got := ns.MustRun("iptables", "-w", "-t", "nat", "-S", foreignChain)
	want := "-N " + foreignChain + "\n-A " + foreignChain + " -d 198.18.0.1/32 -j RETURN\n"
	if got != want {
		t.Errorf("N=%d %s: the foreign chain is now %q, want %q", n, what, got, want)
	}
	if pre := ns.MustRun("iptables", "-w", "-t", "nat", "-S", "PREROUTING"); !strings.Contains(pre, "-A PREROUTING -j "+foreignChain+"\n") {
		t.Errorf("N=%d %s: the jump to the foreign chain is gone: %q", n, what, pre)
	}
}
