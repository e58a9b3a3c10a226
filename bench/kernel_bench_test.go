//go:build scale && linux

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/cgroup"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

// BenchmarkScaleKernel measures, in one run, the ebpf executor (package
// ebpf: cgroup programs on a child cgroup the benchmark makes) and the
// nftables flat layout (package nftables/flat: its definitions through
// nft, its elements over netlink, in a network namespace the benchmark
// makes) against the kernel, for generated clusters of N Services × 10
// endpoints at each SVCPROXY_SCALE_N (default 10000,100000; IPv6 above
// scalegen.MaxServices), on the same generated cluster:
//
//	services=N/B/first-sync   one first sync into empty maps or no table
//	                          (the eBPF programs loaded and attached, the
//	                          flat table's definitions through nft), from
//	                          a collected heap: ns/op is its wall time,
//	                          cpu-ms/op the process's CPU time (its
//	                          threads and the kernel's work for them);
//	                          for ebpf, map-B/endpoint the memlock of the
//	                          services, backends and cluster-address maps
//	                          per endpoint
//	services=N/B/change       one op is SVCPROXY_SCALE_REPS (default 100)
//	services=N/B/add          incremental syncs after one Service's
//	services=N/B/remove       endpoints changed, one Service added, one
//	                          removed (Render or RenderChanges and the
//	                          kernel writes): ns/op is the mean of one,
//	                          median-µs and p99-µs its median and p99
//
// Run it once per sub-benchmark (root; needs nft and cgroup v2):
//
//	SVCPROXY_E2E=required go test -tags scale -run '^$' -bench ScaleKernel -benchtime 1x -timeout 30m ./bench/
func BenchmarkScaleKernel(b *testing.B) {
	netns.Require(b, "nft")
	reps := 100
	if v := env("SVCPROXY_SCALE_REPS", ""); v != "" {
		if _, err := fmt.Sscan(v, &reps); err != nil || reps < 1 {
			b.Fatalf("SVCPROXY_SCALE_REPS=%q", v)
		}
	}
	b.Logf("%s", machine())
	for _, f := range strings.Split(env("SVCPROXY_SCALE_N", "10000,100000"), ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 2 || n > scalegen.MaxServices6-100 {
			b.Fatalf("SVCPROXY_SCALE_N: bad count %q", f)
		}
		w := scaleworld.New(scalegen.Spec{Services: n, IPv6: n > scalegen.MaxServices})
		w.Incremental = true
		b.Run(fmt.Sprintf("services=%d/ebpf", n), func(b *testing.B) { benchEBPF(b, w, n, reps) })
		b.Run(fmt.Sprintf("services=%d/flat", n), func(b *testing.B) { benchFlat(b, w, n, reps) })
	}
}

// changeKinds are the incremental syncs each backend is timed on.
var changeKinds = []string{"change", "add", "remove"}

// change makes one change of kind to w: the endpoints of a TCP ClusterIP
// Service (index mod 100 = 50; every call another version), a Service
// added, the last added removed.
func change(w *scaleworld.World, n int, kind string, version int) {
	switch kind {
	case "change":
		w.ChangeEndpoints(n/2+50, version)
	case "add":
		w.AddService()
	case "remove":
		w.RemoveAdded()
	}
}

// reportSyncs reports the mean of times as ns/op (one op is then one
// sync), and their median and p99, in µs. The syncs are timed with
// time.Now alone: B.StartTimer reads the memory statistics, which stops
// the world.
func reportSyncs(b *testing.B, times []time.Duration) {
	var total time.Duration
	for _, d := range times {
		total += d
	}
	b.ReportMetric(float64(total)/float64(len(times)), "ns/op")
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2])/1e3, "median-µs")
	b.ReportMetric(float64(times[(len(times)*99)/100])/1e3, "p99-µs")
}

// firstSync times sync from a collected heap and returns its wall and
// CPU time.
func firstSync(b *testing.B, sync func() error) (wall, cpu time.Duration) {
	runtime.GC()
	cpu0 := cpuTime()
	start := time.Now()
	err := sync()
	wall, cpu = time.Since(start), cpuTime()-cpu0
	if err != nil {
		b.Fatal(err)
	}
	return wall, cpu
}

// reportFirstSyncs reports the mean wall time of first syncs as ns/op and
// their mean CPU time.
func reportFirstSyncs(b *testing.B, wall, cpu time.Duration) {
	b.ReportMetric(float64(wall)/float64(b.N), "ns/op")
	b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
}

func benchEBPF(b *testing.B, w *scaleworld.World, n, reps int) {
	cg := childCgroup(b)
	family := w.Spec.Family()
	dp := ebpf.NewDataplane(ebpf.Config{Cgroup: cg})
	b.Cleanup(func() {
		if err := dp.Cleanup(); err != nil {
			b.Error(err)
		}
	})
	ctx := context.Background()
	b.Run("first-sync", func(b *testing.B) {
		b.StopTimer()
		var wall, cpu time.Duration
		for range b.N {
			if err := dp.Cleanup(); err != nil {
				b.Fatal(err)
			}
			e := dp.Executor(family)
			dw, dc := firstSync(b, func() error { _, err := e.Sync(ctx, w.Ruleset); return err })
			wall, cpu = wall+dw, cpu+dc
		}
		reportFirstSyncs(b, wall, cpu)
		b.ReportMetric(float64(mapMemory(b, cg))/float64(10*n), "map-B/endpoint")
	})
	e := dp.Executor(family)
	if _, err := e.Sync(ctx, w.Ruleset); err != nil {
		b.Fatal(err)
	}
	for _, kind := range changeKinds {
		b.Run(kind, func(b *testing.B) {
			var times []time.Duration
			b.StopTimer()
			for i := range b.N * reps {
				change(w, n, kind, i+1)
				start := time.Now()
				res, err := e.Sync(ctx, w.Ruleset)
				times = append(times, time.Since(start))
				if err != nil || res.Full {
					b.Fatalf("%s: full %v, %v", kind, res.Full, err)
				}
			}
			reportSyncs(b, times)
		})
	}
}

// childCgroup makes a child cgroup of the cgroup v2 tree, removed when b
// ends.
func childCgroup(b *testing.B) string {
	b.Helper()
	return cgroup.New(b, "svcp-bench")
}

// mapMemory is the memlock the kernel reports for the services, backends
// and cluster-address maps of the programs attached to cgroup.
func mapMemory(b *testing.B, cgroup string) uint64 {
	f, err := os.Open(cgroup)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: cebpf.AttachCGroupInet4Connect})
	if err != nil || len(res.Programs) == 0 {
		b.Fatalf("programs on %s: %v", cgroup, err)
	}
	prog, err := cebpf.NewProgramFromID(res.Programs[0].ID)
	if err != nil {
		b.Fatal(err)
	}
	info, err := prog.Info()
	prog.Close()
	if err != nil {
		b.Fatal(err)
	}
	ids, _ := info.MapIDs()
	var total uint64
	for _, id := range ids {
		m, err := cebpf.NewMapFromID(id)
		if err != nil {
			b.Fatal(err)
		}
		mi, err := m.Info()
		m.Close()
		if err != nil {
			b.Fatal(err)
		}
		if mem, ok := mi.Memlock(); ok && (mi.Name == "svcp_services" || mi.Name == "svcp_backends" || mi.Name == "svcp_clus_addrs") {
			total += mem
		}
	}
	return total
}

// flatNode is a namespace with the flat layout loaded.
type flatNode struct {
	ns    *netns.NS
	nl    *flat.Netlink
	state *flat.State
	fake  *knftables.Fake
}

// newFlatNode makes a namespace of b's lab with a netlink connection in
// it; on cleanup its ruleset is flushed before the namespace goes, so
// that the kernel's teardown of a large table does not run into the next
// measurement.
func newFlatNode(b *testing.B, lab *netns.Lab, label string, ipv6 bool) *flatNode {
	fam := knftables.IPv4Family
	if ipv6 {
		fam = knftables.IPv6Family
	}
	node := &flatNode{ns: lab.NewNS(label), fake: knftables.NewFake(fam, flat.DefaultTable)}
	if err := node.ns.Do(func() error {
		var err error
		node.nl, err = flat.DialNetlink()
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		node.nl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := node.ns.Run(ctx, "nft", "flush", "ruleset"); err != nil {
			b.Logf("flushing %s's ruleset: %v", label, err)
		}
		time.Sleep(500 * time.Millisecond)
	})
	return node
}

// nft runs an nft script in the node's namespace.
func (f *flatNode) nft(b *testing.B, script string) error {
	path := filepath.Join(b.TempDir(), "flat.nft")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err := f.ns.Run(ctx, "nft", "-f", path)
	return err
}

// firstSync is the flat layout's first sync of rs: FirstSync, its
// definitions through nft, its elements over netlink.
func (f *flatNode) firstSync(b *testing.B, rs *ruleset.Ruleset) error {
	var load flat.Load
	f.state, load, _ = flat.FirstSync(rs, flat.Options{})
	if err := f.nft(b, load.Definitions); err != nil {
		return err
	}
	_, err := f.nl.Load(load)
	return err
}

// sync is an incremental sync from prev to next: over netlink when it
// touches only elements, through nft otherwise.
func (f *flatNode) sync(b *testing.B, prev, next *ruleset.Ruleset) error {
	tx := f.fake.NewTransaction()
	ch, err := flat.RenderChanges(tx, f.state, prev, next)
	if err != nil {
		return err
	}
	if !ch.ElementsOnly {
		return f.nft(b, tx.String())
	}
	return f.nl.Apply(ch)
}

func benchFlat(b *testing.B, w *scaleworld.World, n, reps int) {
	lab := netns.NewLab(b)
	ipv6 := w.Spec.IPv6
	b.Run("first-sync", func(b *testing.B) {
		b.StopTimer()
		var wall, cpu time.Duration
		for i := range b.N {
			node := newFlatNode(b, lab, fmt.Sprintf("first%d", i), ipv6)
			dw, dc := firstSync(b, func() error { return node.firstSync(b, w.Ruleset) })
			wall, cpu = wall+dw, cpu+dc
		}
		reportFirstSyncs(b, wall, cpu)
	})
	node := newFlatNode(b, lab, "node", ipv6)
	if err := node.firstSync(b, w.Ruleset); err != nil {
		b.Fatal(err)
	}
	for _, kind := range changeKinds {
		b.Run(kind, func(b *testing.B) {
			var times []time.Duration
			b.StopTimer()
			for i := range b.N * reps {
				prev := w.Ruleset
				change(w, n, kind, i+1)
				start := time.Now()
				err := node.sync(b, prev, w.Ruleset)
				times = append(times, time.Since(start))
				if err != nil {
					b.Fatalf("%s: %v", kind, err)
				}
			}
			reportSyncs(b, times)
		})
	}
}
