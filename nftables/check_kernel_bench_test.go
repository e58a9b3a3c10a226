//go:build linux

package nftables_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
)

// processCPU is the CPU time, user and system (the kernel's work for the
// netlink dumps included), of the test process.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKernelCheckState is the periodic check of a table loaded with
// 10,000 Services × 10 endpoints over netlink, its expected digests made
// (once per Ruleset, before the timer): its CPU time per check, and that
// time's share of one core at the default 30 s sync period.
func BenchmarkKernelCheckState(b *testing.B) {
	netns.Require(b, "nft")
	lab := netns.NewLab(b)
	ns := lab.NewNS("checkbench")
	rs, _ := benchWorld(b, 10000)
	// NetNS: nft runs in ns too, never in the host's namespace.
	ex, err := nftables.NewExecutor(nftables.ExecutorConfig{Family: config4().Family, Netlink: true, NetNS: filepath.Join("/run/netns", ns.Name)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() })
	ctx := context.Background()
	if _, err := ex.Apply(ctx, rs); err != nil {
		b.Fatal(err)
	}
	if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
		b.Fatalf("CheckState: %+v, %v", missing, err)
	}
	cpu := processCPU(b)
	for b.Loop() {
		if missing, err := ex.CheckState(ctx); missing.Found() || err != nil {
			b.Fatalf("CheckState: %+v, %v", missing, err)
		}
	}
	perCheck := (processCPU(b) - cpu) / time.Duration(b.N)
	b.ReportMetric(float64(perCheck.Milliseconds()), "cpu-ms/check")
	b.ReportMetric(100*perCheck.Seconds()/30, "%core@30s")
}
