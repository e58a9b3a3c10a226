//go:build scale && linux

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

// TestScaleFlat measures nftables' flat layout against kube-proxy's layout
// (the Executor over netlink, as TestScale runs it) in one run, at each
// SVCPROXY_SCALE_N (default 10000): generation (once from a collected
// heap, then again: the median, and the mean, which counts the collections
// that generations' allocations bring; with the process's CPU time, which
// tells more work from less of the machine), first sync, full resync of the
// loaded table, one Service changed, added and removed, and connect()
// latency. The flat layout's first sync writes its definitions with nft
// and its elements over netlink (FirstSync); its resync is timed two
// ways: its definitions with nft and its sets flushed and refilled over
// netlink (Resync, as the Executor does it), and one `nft -f` of the
// whole table (Script), which is also timed into no table; its
// incremental syncs go over netlink when they touch only
// elements, through nft otherwise (reported). It also reports the
// process's peak RSS and heap in use after the first sync
// (BenchmarkFlatStateHeap in nftables measures the heap that the flat
// layout's state keeps).
//
//	SVCPROXY_SCALE_N=10000 go test -tags scale ./bench/ -run ScaleFlat -v -timeout 60m
//
// SVCPROXY_SCALE_LAYOUTS picks the layouts (default "kube-proxy flat").
// SVCPROXY_SCALE_FLAT6_N lists counts (comma-separated, default none) at
// which the flat layout runs again, alone, on an IPv6 cluster
// (scalegen.Spec.IPv6), after the IPv4 sizes: IPv4's 198.19.0.0/16 holds
// at most scalegen.MaxServices Services, IPv6 up to scalegen.MaxServices6.
func TestScaleFlat(t *testing.T) {
	netns.Require(t, "nft")
	reps := envInt(t, "SVCPROXY_SCALE_REPS", 5)
	conns := envInt(t, "SVCPROXY_SCALE_CONNS", 200)
	layouts := map[string]bool{}
	for _, l := range strings.Fields(env("SVCPROXY_SCALE_LAYOUTS", "kube-proxy flat")) {
		layouts[l] = true
	}
	var rep report
	rep.notes = append(rep.notes, machine())
	start := time.Now()
	for _, n := range counts(t, "SVCPROXY_SCALE_N", "10000", scalegen.MaxServices-100) {
		if layouts["kube-proxy"] {
			floors := map[string]float64{}
			t.Run(fmt.Sprintf("kube-proxy/services=%d", n), func(t *testing.T) { runNftables(t, n, reps, conns, true, &rep, floors) })
		}
		if layouts["flat"] {
			t.Run(fmt.Sprintf("flat/services=%d", n), func(t *testing.T) { runFlat(t, n, reps, conns, false, &rep) })
		}
	}
	for _, n := range counts(t, "SVCPROXY_SCALE_FLAT6_N", "", scalegen.MaxServices6-100) {
		t.Run(fmt.Sprintf("flat-ipv6/services=%d", n), func(t *testing.T) { runFlat(t, n, reps, conns, true, &rep) })
	}
	rep.notes = append(rep.notes, fmt.Sprintf("Whole run: %v.", time.Since(start).Round(time.Second)))
	fmt.Println(rep.markdown())
}

// counts parses the comma-separated Services counts of an environment
// variable, each between 2 and limit.
func counts(t *testing.T, name, def string, limit int) []int {
	var ns []int
	for _, f := range strings.Split(env(name, def), ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > limit {
			t.Fatalf("%s: bad count %q (2 to %d)", name, f, limit)
		}
		ns = append(ns, n)
	}
	return ns
}

// flatLab is the flat layout loaded into a lab's node.
type flatLab struct {
	t     *testing.T
	c     *netns.Cluster
	state *flat.State
	fake  *knftables.Fake
	nl    *flat.Netlink
	// viaNFT counts the incremental syncs that were not element-only.
	viaNFT int
}

// script runs an nft script in the node's namespace, timed around its
// `ip netns exec` as the floors are.
func (l *flatLab) script(what, script string) time.Duration {
	path := filepath.Join(l.t.TempDir(), "flat.nft")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return timed(l.t, what, func() error {
		_, err := l.c.Node.Run(ctx, "nft", "-f", path)
		return err
	})
}

func runFlat(t *testing.T, n, reps, conns int, ipv6 bool, rep *report) {
	c := newCluster(t)
	w := worldOf(t, c, n, ipv6)
	family, kfamily, label := "ip", knftables.IPv4Family, "flat"
	if ipv6 {
		family, kfamily, label = "ip6", knftables.IPv6Family, "flat (IPv6)"
	}
	l := &flatLab{t: t, c: c, fake: knftables.NewFake(kfamily, flat.DefaultTable)}
	if err := c.Node.Do(func() error {
		var err error
		l.nl, err = flat.DialNetlink()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.nl.Close() })

	var rs *ruleset.Ruleset
	var coldBefore, coldAfter runtime.MemStats
	// The first generation starts from a collected heap, as go test -bench
	// starts each benchmark: building the world leaves garbage whose
	// collection, begun or not before the generation's allocations tip it,
	// is not the generation's. The generations again below pay their share
	// of collections; their mean says what that share costs.
	runtime.GC()
	runtime.ReadMemStats(&coldBefore)
	coldCPU := cpuTime()
	build := timed(t, "generation: snapshots + Build", func() error { rs = w.Build(); return nil })
	var load flat.Load
	var res flat.Result
	render := timed(t, "generation: FirstSync", func() error {
		l.state, load, res = flat.FirstSync(rs, flat.Options{})
		return nil
	})
	coldCPU = cpuTime() - coldCPU
	runtime.ReadMemStats(&coldAfter)
	rs = nil
	defs := l.script("flat: first sync, definitions through nft", load.Definitions)
	var loadTx int
	elements := timed(t, "flat: first sync, elements over netlink", func() (err error) { loadTx, err = l.nl.Load(load); return err })
	first := defs + elements
	load = flat.Load{}
	peakRSS, heapInUse := memory()
	// Generation again, reps times: one run lands in or out of a garbage
	// collection of the process's heap, which moves it by up to 2×.
	var builds, renders []float64
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	againCPU := cpuTime()
	for range reps {
		start := time.Now()
		again := w.Build()
		mid := time.Now()
		flat.FirstSync(again, flat.Options{})
		builds, renders = append(builds, ms(mid.Sub(start))), append(renders, ms(time.Since(mid)))
	}
	againCPU = cpuTime() - againCPU
	runtime.ReadMemStats(&after)
	lat := latencies(t, c, w, n, conns)
	var resyncNL time.Duration
	var resyncTx int
	{
		var again flat.Load
		gen := timed(t, "flat: resync, Resync", func() error {
			l.state, again, _ = flat.Resync(w.Ruleset, flat.Options{})
			return nil
		})
		resyncNL = gen + l.script("flat: resync, definitions through nft", again.Definitions)
		resyncNL += timed(t, "flat: resync, elements over netlink", func() (err error) { resyncTx, err = l.nl.Load(again); return err })
	}
	var script string
	l.state, script, _ = flat.Script(w.Ruleset, flat.Options{})
	resync := l.script("flat: full resync of the loaded table (one nft -f)", script)
	l.script("flat: table deleted", "delete table "+family+" "+flat.DefaultTable+"\n")
	whole := l.script("flat: whole table into no table (one nft -f)", script)
	lines := strings.Count(script, "\n")
	script = ""

	change, add, remove := l.changes(w, n, reps)
	for _, i := range []int{0, n - 1} {
		if _, err := c.Clients[0].TCP(netip.AddrPortFrom(w.Spec.ClusterIP(i), 80), 2*time.Second); err != nil {
			t.Errorf("Service %d after the incremental syncs: %v", i, err)
		}
	}

	row := func(what string, v float64, unit string) { rep.add(n, label+": "+what, v, unit, "", nil) }
	row("lines of the whole-table script", float64(lines), "lines")
	row("Service ports warned about (ClientIP affinity not rendered)", float64(len(res.Warnings)), "ports")
	row("generation: snapshots + Build", ms(build), "ms")
	row("generation: FirstSync", ms(render), "ms")
	row("first sync: definitions through nft", ms(defs), "ms")
	row("first sync: elements over netlink", ms(elements), "ms")
	row("first sync (definitions through nft, elements over netlink)", ms(first), "ms")
	row("netlink transactions of the first sync's elements", float64(loadTx), "tx")
	row("FirstSync / first sync", 100*float64(render)/float64(first), "%")
	row("generation (snapshots + Build + FirstSync) / first sync", 100*float64(build+render)/float64(first), "%")
	row("garbage collections begun during that generation", float64(coldAfter.NumGC-coldBefore.NumGC), "collections")
	row("CPU time of the process during that generation", ms(coldCPU), "ms")
	row(fmt.Sprintf("generation again: snapshots + Build (median of %d)", reps), median(builds), "ms")
	row(fmt.Sprintf("generation again: FirstSync (median of %d)", reps), median(renders), "ms")
	row("generation again (medians) / first sync", 100*(median(builds)+median(renders))/ms(first), "%")
	row(fmt.Sprintf("generation again (mean of %d, collections included) / first sync", reps), 100*(mean(builds)+mean(renders))/ms(first), "%")
	row(fmt.Sprintf("garbage collections begun during the %d generations again", reps), float64(after.NumGC-before.NumGC), "collections")
	row(fmt.Sprintf("CPU time of the process during the %d generations again (mean)", reps), ms(againCPU)/float64(reps), "ms")
	row("whole table into no table (one nft -f)", ms(whole), "ms")
	row("full resync of the loaded table (Resync + definitions through nft + elements over netlink)", ms(resyncNL), "ms")
	row("netlink transactions of the resync's elements", float64(resyncTx), "tx")
	row("full resync of the loaded table (one nft -f)", ms(resync), "ms")
	row(fmt.Sprintf("incremental sync, 1 Service changed (median of %d)", reps), median(change), "ms")
	row(fmt.Sprintf("incremental sync, 1 Service added (median of %d)", reps), median(add), "ms")
	row(fmt.Sprintf("incremental sync, 1 Service removed (median of %d)", reps), median(remove), "ms")
	row("incremental syncs that changed rules (through nft)", float64(l.viaNFT), "syncs")
	row("connect() to the last Service (median)", lat[0], "µs")
	row("connect() to the first Service (median)", lat[1], "µs")
	row("connect() to a pod directly (median)", lat[2], "µs")
	row("process peak RSS (after the first sync)", float64(peakRSS)/(1<<20), "MiB")
	row("process heap in use (after the first sync)", float64(heapInUse)/(1<<20), "MiB")
}

// changes makes reps incremental syncs of each kind: one Service's
// endpoints changed, one Service added, one removed; it returns their
// times in ms.
func (l *flatLab) changes(w *scaleworld.World, n, reps int) (change, add, remove []float64) {
	for r := range reps {
		prev := w.Ruleset
		w.ChangeEndpoints(n/2, 1+r%2)
		change = append(change, l.incremental("flat: 1 Service's endpoints changed", prev, w.Ruleset))
	}
	for range reps {
		prev := w.Ruleset
		w.AddService()
		add = append(add, l.incremental("flat: 1 Service added", prev, w.Ruleset))
	}
	for range reps {
		prev := w.Ruleset
		w.RemoveAdded()
		remove = append(remove, l.incremental("flat: 1 Service removed", prev, w.Ruleset))
	}
	return change, add, remove
}

// cpuTime is the CPU time the process has used so far, user and system,
// all threads (getrusage): beside a wall time, it tells a generation that
// did more work from one that got less of the machine's processors.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memory is the process's peak RSS so far and its heap in use, in bytes.
func memory() (peakRSS, heapInUse uint64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		peakRSS = uint64(ru.Maxrss) * 1024
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return peakRSS, m.HeapInuse
}

// incremental renders the changes from prev to next and applies them:
// over netlink when they touch only elements, with nft otherwise. It
// returns the time of render and apply, in ms.
func (l *flatLab) incremental(what string, prev, next *ruleset.Ruleset) float64 {
	start := time.Now()
	tx := l.fake.NewTransaction()
	ch, err := flat.RenderChanges(tx, l.state, prev, next)
	if err != nil {
		l.t.Fatalf("%s: %v", what, err)
	}
	if !ch.ElementsOnly {
		l.viaNFT++
		return ms(time.Since(start) + l.script(what+" (through nft: rules changed)", tx.String()))
	}
	if err := l.nl.Apply(ch); err != nil {
		l.t.Fatalf("%s: %v", what, err)
	}
	d := time.Since(start)
	l.t.Logf("%-45s %v", what+" (netlink)", d.Round(time.Microsecond))
	return ms(d)
}
