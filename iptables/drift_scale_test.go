//go:build linux

package iptables

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// cpuTime is the CPU time, user and system, of this process and of the
// children it has waited for.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			t.Fatal(err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// TestKernelDriftCheckCost measures CheckState, its deep check forced, on
// tables loaded with N Services × 10 endpoints (SVCPROXY_DRIFT_SCALE, e.g.
// "10000"; skipped otherwise): the CPU time of one check (the test process
// and the iptables tools it runs), and its share of one core at the
// default 30 s sync period once the check spaces itself (deepCheckShare).
// It also checks that a flushed Service chain is found.
func TestKernelDriftCheckCost(t *testing.T) {
	spec := os.Getenv("SVCPROXY_DRIFT_SCALE")
	if spec == "" {
		t.Skip("set SVCPROXY_DRIFT_SCALE=10000 to measure the drift check at scale")
	}
	netns.Require(t, kernelTools...)
	n, err := strconv.Atoi(spec)
	if err != nil {
		t.Fatal(err)
	}
	lab := netns.NewLab(t)
	ns := lab.NewNS("iptdrift")
	ctx := context.Background()
	objs := scaleObjects(n)
	rs := build(t, testConfig(), objs...)
	e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, Runner: nsRunner(ns)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.Sync(ctx, rs); err != nil {
		t.Fatal(err)
	}
	t.Logf("N=%d: full sync %v", n, time.Since(start).Round(time.Millisecond))
	const period = 30 * time.Second
	for i := range 3 {
		e.deepDue = time.Time{}
		cpu0, wall0 := cpuTime(t), time.Now()
		missing, err := e.CheckState(ctx)
		cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
		if err != nil || missing.Found() {
			t.Fatalf("CheckState: %+v, %v", missing, err)
		}
		every := max(period, time.Duration(float64(e.lastDeepCost)/deepCheckShare))
		every = (every + period - 1) / period * period // the check runs at a sync period
		t.Logf("N=%d: check %d (the first renders the expected digest): wall %v, CPU %v, cost as the check counts it %v; deep check every %v: %.1f %% of one core",
			n, i+1, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), e.lastDeepCost.Round(time.Millisecond), every, 100*cpu.Seconds()/every.Seconds())
	}
	for _, args := range [][]string{nil, {"-t", "filter"}} {
		cpu0, wall0 := cpuTime(t), time.Now()
		var sink countingWriter
		if err := nsRunner(ns).Run(ctx, Command{Name: "iptables-save", Args: args, Stdout: &sink}); err != nil {
			t.Fatal(err)
		}
		t.Logf("N=%d: iptables-save %v alone: %d bytes, wall %v, CPU %v", n, args, sink, time.Since(wall0).Round(time.Millisecond), (cpuTime(t) - cpu0).Round(time.Millisecond))
	}
	chain := ""
	for _, s := range rs.Services()[:1] {
		chain = e.names.ServiceChain(s.Name)
	}
	if err := nsRunner(ns).Run(ctx, Command{Name: "iptables", Args: []string{"-w", "-t", "nat", "-F", chain}}); err != nil {
		t.Fatal(err)
	}
	e.deepDue = time.Time{}
	if missing, err := e.CheckState(ctx); err != nil || !strings.Contains(missing.What, chain) {
		t.Errorf("CheckState after %s was flushed: %+v, %v", chain, missing, err)
	}
}

// countingWriter counts the bytes written to it.
type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}
