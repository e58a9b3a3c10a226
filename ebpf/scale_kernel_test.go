//go:build linux && scale

package ebpf_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
)

// TestScale measures, for generated clusters of N Services × 10 endpoints
// (SVCPROXY_SCALE_N, default 1000,10000,100000), the executor against the
// kernel: the first sync (wall and the process's CPU time, from a
// collected heap), one Service changed (its endpoints), added and
// removed (Render, Changes and the element writes: median and p99 of 100
// each), the maps' memory per endpoint (their memlock, as fdinfo reports
// the kernel's use), and connect() of a UDP socket in the cgroup to the
// last UDP Service against connect() to a pod directly (medians of 20,000).
//
//	go test -tags scale ./ebpf -run Scale -v
func TestScale(t *testing.T) {
	sizes := []int{1000, 10000, 100000}
	if env := os.Getenv("SVCPROXY_SCALE_N"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	l := newLab(t, 1)
	for _, ns := range []string{"0.0.0.0/0", "::/0"} {
		l.c.Node.AddRoute(netip.MustParsePrefix(ns), netip.Addr{}, "svc0")
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) { scaleOne(t, l, n) })
	}
}

func scaleOne(t *testing.T, l *lab, n int) {
	parent := l.t
	l.t = t // the client's failures are this subtest's
	defer func() { l.t = parent }()
	ctx := context.Background()
	w := scaleworld.New(spec(n))
	w.Incremental = true
	dp := ebpf.NewDataplane(ebpf.Config{Cgroup: l.cgroup})
	defer func() {
		if err := dp.Cleanup(); err != nil {
			t.Error(err)
		}
	}()
	family := w.Spec.Family()
	e := dp.Executor(family)
	// The first sync starts from a collected heap, as go test -bench
	// starts each benchmark: the generator's garbage is not the sync's.
	runtime.GC()
	cpu0 := cpuTime()
	start := time.Now()
	res, err := e.Apply(ctx, w.Ruleset)
	first, cpu := time.Since(start), cpuTime()-cpu0
	if err != nil {
		t.Fatal(err)
	}
	d := res
	t.Logf("N=%d %s: first sync %v, CPU %v (%d elements)", n, family, first.Round(time.Millisecond), cpu.Round(time.Millisecond), d.Puts)
	version := 0
	for _, change := range []string{"endpoints", "udp-endpoints", "add", "remove"} {
		var times []time.Duration
		for range 100 {
			switch change {
			case "endpoints": // a TCP ClusterIP Service (index mod 100 = 50)
				version++
				w.ChangeEndpoints(n/2+50, version)
			case "udp-endpoints": // a UDP one (mod 100 = 0): its old endpoint's sockets are sought
				version++
				w.ChangeEndpoints(n/2, version)
			case "add":
				w.AddService()
			case "remove":
				w.RemoveAdded()
			}
			start := time.Now()
			res, err := e.Sync(ctx, w.Ruleset)
			times = append(times, time.Since(start))
			if err != nil || res.Full {
				t.Fatalf("%s: full %v, %v", change, res.Full, err)
			}
		}
		slices.Sort(times)
		t.Logf("N=%d one Service %s: median %v, p99 %v", n, change, times[50].Round(time.Microsecond), times[98].Round(time.Microsecond))
	}
	var memlock uint64
	prog, err := cebpf.NewProgramFromID(attachedPrograms(t, l.cgroup)[0])
	if err != nil {
		t.Fatal(err)
	}
	info, _ := prog.Info()
	prog.Close()
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := cebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		mi, _ := m.Info()
		if b, ok := mi.Memlock(); ok && (mi.Name == "svcp_services" || mi.Name == "svcp_backends" || mi.Name == "svcp_clus_addrs") {
			memlock += b
		}
		m.Close()
	}
	t.Logf("N=%d maps: %d bytes, %.0f bytes per endpoint (services, backends, cluster addresses)", n, memlock, float64(memlock)/float64(10*n))

	// The last UDP Service: connect() of a UDP socket sends nothing, so it
	// times the translation alone.
	var last netip.AddrPort
	for i := n - 1; i >= 0; i-- {
		if f, proto := w.Spec.Frontend(i); proto == v1.ProtocolUDP {
			last = f
			break
		}
	}
	network := "udp4"
	if family == v1.IPv6Protocol {
		network = "udp6"
	}
	direct := netip.AddrPortFrom(l.c.Pods[0].IP(family == v1.IPv6Protocol), 8080)
	a := l.run(request{Op: "connectbench", Network: network, Dst: last.String(), Direct: direct.String(), Count: 20000})[0]
	if a.Errno != "" {
		t.Fatalf("connect: %s", a.Errno)
	}
	var svcNs, podNs int64
	fmt.Sscan(a.Identity, &svcNs, &podNs)
	t.Logf("N=%d connect(): last Service %d ns, a pod directly %d ns, difference %d ns", n, svcNs, podNs, svcNs-podNs)
}

// cpuTime is the process's CPU time, user and system, on every thread.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
