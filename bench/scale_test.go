//go:build scale && linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gnft "github.com/google/nftables"
	"github.com/google/nftables/expr"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := netns.Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "bench: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envInt(t *testing.T, key string, def int) int {
	v := env(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

// report collects the figures of one run: key "what/N" → milliseconds (or
// microseconds for latencies), as medians.
type report struct {
	rows  []row
	notes []string
}

type row struct {
	n           int
	what        string
	value       float64 // ms, or µs for latency
	unit        string
	floorName   string
	floor       float64
	floorExists bool
}

func (r *report) add(n int, what string, value float64, unit string, floorName string, floors map[string]float64) {
	f, ok := floors[fmt.Sprintf("%s/%d", floorName, n)]
	r.rows = append(r.rows, row{n: n, what: what, value: value, unit: unit, floorName: floorName, floor: f, floorExists: ok && floorName != ""})
}

func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString("| N | measurement | ours | floor (same run) | ratio |\n|---|---|---|---|---|\n")
	for _, x := range r.rows {
		floor, ratio := "—", "—"
		if x.floorExists {
			floor = fmt.Sprintf("%s %s (%s)", num(x.floor), x.unit, x.floorName)
			ratio = fmt.Sprintf("%.2f×", x.value/x.floor)
		}
		fmt.Fprintf(&b, "| %d | %s | %s %s | %s | %s |\n", x.n, x.what, num(x.value), x.unit, floor, ratio)
	}
	for _, n := range r.notes {
		b.WriteString("\n" + n + "\n")
	}
	return b.String()
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// mean is the arithmetic mean of xs (0 for none).
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TestScale is the kernel-scale benchmark (see the package documentation).
func TestScale(t *testing.T) {
	netns.Require(t, "iptables", "iptables-restore", "nft")
	var sizes []int
	for _, f := range strings.Split(env("SVCPROXY_SCALE_N", "1000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > scalegen.MaxServices-100 {
			t.Fatalf("SVCPROXY_SCALE_N: bad count %q", f)
		}
		sizes = append(sizes, n)
	}
	reps := envInt(t, "SVCPROXY_SCALE_REPS", 5)
	conns := envInt(t, "SVCPROXY_SCALE_CONNS", 200)
	resyncMax := envInt(t, "SVCPROXY_SCALE_NFT_RESYNC", 5000)

	var rep report
	floors := map[string]float64{}
	start := time.Now()
	rep.notes = append(rep.notes, machine())
	for _, n := range sizes {
		// The floors of each N run just before our figures for that N, so
		// that the load of this (shared, noisy) machine varies less between
		// the two.
		for _, which := range strings.Fields(env("SVCPROXY_SCALE_FLOORS", "restore latency")) {
			for k, v := range runFloors(t, which, []int{n}) {
				floors[k] = v
			}
		}
		t.Logf("floors: %v (%v)", floors, time.Since(start).Round(time.Second))
		t.Run(fmt.Sprintf("iptables/services=%d", n), func(t *testing.T) { runIptables(t, n, reps, conns, &rep, floors) })
		t.Run(fmt.Sprintf("nftables/services=%d", n), func(t *testing.T) {
			runNftables(t, n, reps, conns, n <= resyncMax, &rep, floors)
		})
		if chunks := env("SVCPROXY_SCALE_NFT_CHUNKS", ""); chunks != "" {
			t.Run(fmt.Sprintf("nftables-chunks/services=%d", n), func(t *testing.T) { runChunks(t, n, chunks, &rep, floors) })
		}
		if counts := env("SVCPROXY_SCALE_NFT_BULK", ""); counts != "" {
			chunks := env("SVCPROXY_SCALE_NFT_BULK_CHUNKS", "0,-1")
			t.Run(fmt.Sprintf("nftables-bulk/services=%d", n), func(t *testing.T) { runBulk(t, n, counts, chunks, n <= resyncMax, &rep, floors) })
		}
	}
	rep.notes = append(rep.notes, floorsMarkdown(floors), fmt.Sprintf("Whole run: %v.", time.Since(start).Round(time.Second)))
	out := rep.markdown()
	fmt.Println(out)
	if p := env("SVCPROXY_SCALE_OUT", ""); p != "" {
		if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func machine() string {
	ver := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return name + ": " + err.Error()
		}
		return strings.TrimSpace(string(out))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("Machine: %d CPUs, kernel %s, %s, %s, %s; load at start %s.",
		runtime.NumCPU(), ver("uname", "-r"), ver("iptables", "--version"), ver("nft", "--version"), runtime.Version(),
		strings.Join(strings.Fields(string(load))[:3], " "))
}

// world generates the cluster of n Services whose first and last Services
// are served by the lab's pods.
func world(t *testing.T, c *netns.Cluster, n int) *scaleworld.World {
	return worldOf(t, c, n, false)
}

// worldOf is world in IPv6 (scalegen.Spec.IPv6) when ipv6.
func worldOf(t *testing.T, c *netns.Cluster, n int, ipv6 bool) *scaleworld.World {
	var pods []netip.Addr
	for _, p := range c.Pods {
		pods = append(pods, p.IP(ipv6))
	}
	start := time.Now()
	w := scaleworld.New(scalegen.Spec{Services: n, ProbePods: pods, IPv6: ipv6})
	// Changes are built with Builder.Update, as the reference proxies do.
	w.Incremental = true
	t.Logf("N=%d: generated and built in %v", n, time.Since(start).Round(time.Millisecond))
	return w
}

// newCluster makes the lab: one client, a node, three pods with echo
// servers. On cleanup it flushes the node's ruleset synchronously before the
// Lab deletes the namespace, so that the kernel's teardown of a large ruleset
// does not run into the next measurement.
func newCluster(t *testing.T) *netns.Cluster {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3, Clients: 1})
	c.StartEcho(8080)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := c.Node.Run(ctx, "nft", "flush", "ruleset"); err != nil {
			t.Logf("flushing the node's ruleset: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	})
	return c
}

// timed runs f and returns its duration; it fails the test on error.
func timed(t *testing.T, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	d := time.Since(start)
	t.Logf("%-45s %v", what, d.Round(time.Millisecond))
	return d
}

func runIptables(t *testing.T, n, reps, conns int, rep *report, floors map[string]float64) {
	c := newCluster(t)
	w := world(t, c, n)
	ctx := context.Background()
	runner := iptables.ExecRunner{Prefix: []string{"ip", "netns", "exec", c.Node.Name}}
	e, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: v1.IPv4Protocol, Runner: runner})
	if err != nil {
		t.Fatal(err)
	}
	// (No e.Cleanup: newCluster flushes the node's whole ruleset.)

	var buildD, renderD time.Duration
	buildD = timed(t, "build (snapshots + Build)", func() error { w.Build(); return nil })
	var lines int
	renderD = timed(t, "render (full)", func() error {
		lines = strings.Count(string(iptables.Render(iptables.Names{}, w.Ruleset)), "\n")
		return nil
	})
	t.Logf("N=%d: %d lines of iptables-restore input", n, lines)

	sync := func(what string, wantFull bool) time.Duration {
		rs := w.Ruleset
		return timed(t, what, func() error {
			res, err := e.Apply(ctx, rs)
			if err == nil && res.Full != wantFull {
				err = fmt.Errorf("full sync %v, want %v", res.Full, wantFull)
			}
			return err
		})
	}
	full := sync("full sync, empty tables", true)
	lat := latencies(t, c, w, n, conns)
	e.RequestFullSync()
	fullLoaded := sync("full sync, loaded tables", true)
	var change, add []float64
	for r := range reps {
		w.ChangeEndpoints(n/2, 1+r%2)
		change = append(change, ms(sync("partial sync, 1 Service's endpoints changed", false)))
	}
	for range reps {
		w.AddService()
		add = append(add, ms(sync("partial sync, 1 Service added", false)))
	}
	if _, err := c.Clients[0].TCP(netip.AddrPortFrom(scalegen.ClusterIP(n-1), 80), 2*time.Second); err != nil {
		t.Errorf("last Service after the partial syncs: %v", err)
	}

	rep.add(n, "iptables: restore input of a full sync", float64(lines), "lines", "", floors)
	rep.add(n, "iptables: generation (snapshots + Build + Render)", ms(buildD+renderD), "ms", "", floors)
	rep.add(n, "iptables: full sync, empty tables", ms(full), "ms", "iptnft-flush-full", floors)
	rep.add(n, "iptables: generation / full sync", 100*float64(buildD+renderD)/float64(full), "%", "", floors)
	rep.add(n, "iptables: full sync, loaded tables", ms(fullLoaded), "ms", "iptnft-flush-full", floors)
	rep.add(n, fmt.Sprintf("iptables: partial sync, 1 Service changed (median of %d)", reps), median(change), "ms", "iptnft-noflush-partial-add1", floors)
	rep.add(n, fmt.Sprintf("iptables: partial sync, 1 Service added (median of %d)", reps), median(add), "ms", "iptnft-noflush-partial-add1", floors)
	rep.add(n, "iptables: connect() to the last Service (median)", lat[0], "µs", "lat-iptnft-last-svc", floors)
	rep.add(n, "iptables: connect() to the first Service (median)", lat[1], "µs", "lat-iptnft-first-svc", floors)
	rep.add(n, "iptables: connect() to a pod directly (median)", lat[2], "µs", "lat-iptnft-pod-direct", floors)
}

func runNftables(t *testing.T, n, reps, conns int, resync bool, rep *report, floors map[string]float64) {
	c := newCluster(t)
	w := world(t, c, n)
	ctx := context.Background()
	c.Node.ToolOnPath(t, "nft")
	e := netlinkExecutor(t, c.Node.NS, 0)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := e.Cleanup(ctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})

	buildD := timed(t, "build (snapshots + Build)", func() error { w.Build(); return nil })
	fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
	ops := 0
	renderD := timed(t, "render (RenderNew, chunks of 250)", func() error {
		txs, _, err := nftables.RenderNew(fake.NewTransaction, w.Ruleset, nftables.Options{}, nftables.DefaultNetlinkFirstSyncChunk)
		for _, tx := range txs {
			ops += tx.NumOperations()
		}
		return err
	})

	sync := func(what string, wantFull bool) time.Duration {
		rs := w.Ruleset
		return timed(t, what, func() error {
			res, err := e.Apply(ctx, rs)
			details := res
			if err == nil && res.Full != wantFull {
				err = fmt.Errorf("full sync %v (%v), want %v", res.Full, details.Fallback, wantFull)
			}
			if err == nil && !wantFull && !details.Netlink {
				err = fmt.Errorf("incremental sync not over netlink: %v", details.NotNetlink)
			}
			return err
		})
	}
	first := sync("first sync (chunks of 250, all but the first over netlink)", true)
	lat := latencies(t, c, w, n, conns)
	var resyncD time.Duration
	if resync {
		e.RequestFullSync()
		resyncD = sync("full resync of the loaded table (chunks of 250 over netlink)", true)
		if _, err := c.Clients[0].TCP(netip.AddrPortFrom(scalegen.ClusterIP(n-1), 80), 2*time.Second); err != nil {
			t.Errorf("last Service after the resync: %v", err)
		}
	}
	var change, add []float64
	for r := range reps {
		w.ChangeEndpoints(n/2, 1+r%2)
		change = append(change, ms(sync("incremental sync, 1 Service's endpoints changed", false)))
	}
	for range reps {
		w.AddService()
		add = append(add, ms(sync("incremental sync, 1 Service added", false)))
	}
	var remove []float64
	for range reps {
		w.RemoveAdded()
		remove = append(remove, ms(sync("incremental sync, 1 Service removed", false)))
	}
	if _, err := c.Clients[0].TCP(netip.AddrPortFrom(scalegen.ClusterIP(n-1), 80), 2*time.Second); err != nil {
		t.Errorf("last Service after the incremental syncs: %v", err)
	}
	// The kernel's own floor for a transaction that adds a rule to this
	// table: one chain with one "drop" rule, over netlink (and deleted
	// again). The kernel validates the table's whole jump graph, map
	// elements included, before it commits any new rule.
	var kernelFloor []float64
	if err := c.Node.Do(func() error {
		conn, err := gnft.New()
		if err != nil {
			return err
		}
		table := &gnft.Table{Family: gnft.TableFamilyIPv4, Name: nftables.DefaultTable}
		for i := range reps {
			chain := conn.AddChain(&gnft.Chain{Name: fmt.Sprintf("probe-%d", i), Table: table})
			conn.AddRule(&gnft.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
			start := time.Now()
			if err := conn.Flush(); err != nil {
				return err
			}
			kernelFloor = append(kernelFloor, ms(time.Since(start)))
			conn.FlushChain(chain)
			conn.DelChain(chain)
			if err := conn.Flush(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Errorf("kernel floor probe: %v", err)
	}

	rep.add(n, "nftables: operations of a first sync", float64(ops), "ops", "", floors)
	rep.add(n, "nftables: generation (snapshots + Build + RenderNew)", ms(buildD+renderD), "ms", "", floors)
	rep.add(n, "nftables: first sync (chunks of 250 Services, all but the first over netlink)", ms(first), "ms", "nft-full-chunked1000", floors)
	rep.add(n, "nftables: generation / first sync", 100*float64(buildD+renderD)/float64(first), "%", "", floors)
	if resync {
		rep.add(n, "nftables: full resync of the loaded table (chunks of 250 over netlink)", ms(resyncD), "ms", "nft-full-1tx", floors)
	}
	rep.add(n, fmt.Sprintf("nftables: incremental sync over netlink, 1 Service changed (median of %d)", reps), median(change), "ms", "nft-add1-E10", floors)
	rep.add(n, fmt.Sprintf("nftables: incremental sync over netlink, 1 Service added (median of %d)", reps), median(add), "ms", "nft-add1-E10", floors)
	rep.add(n, fmt.Sprintf("nftables: incremental sync over netlink, 1 Service removed (median of %d)", reps), median(remove), "ms", "", floors)
	rep.add(n, fmt.Sprintf("nftables: kernel floor, 1 chain + 1 rule over netlink into this table (median of %d)", reps), median(kernelFloor), "ms", "", floors)
	rep.add(n, "nftables: connect() to the last Service (median)", lat[0], "µs", "lat-nft-last-svc", floors)
	rep.add(n, "nftables: connect() to the first Service (median)", lat[1], "µs", "lat-nft-first-svc", floors)
	rep.add(n, "nftables: connect() to a pod directly (median)", lat[2], "µs", "lat-nft-pod-direct", floors)
}

// netlinkExecutor makes an IPv4 Executor with Netlink inside ns, so that
// its socket is there, where the nft on PATH works; firstSyncChunk 0 means
// the default. It is closed when the test ends, after the cleanups
// registered later.
func netlinkExecutor(t *testing.T, ns *netns.NS, firstSyncChunk int) *nftables.Executor {
	t.Helper()
	return netlinkExecutorConfig(t, ns, nftables.ExecutorConfig{Netlink: true, FirstSyncChunk: firstSyncChunk})
}

// netlinkExecutorConfig makes an IPv4 Executor of cfg inside ns, as
// netlinkExecutor does.
func netlinkExecutorConfig(t *testing.T, ns *netns.NS, cfg nftables.ExecutorConfig) *nftables.Executor {
	t.Helper()
	cfg.Family = v1.IPv4Protocol
	var e *nftables.Executor
	if err := ns.Do(func() error {
		var err error
		e, err = nftables.NewExecutor(cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// runChunks times first syncs over netlink of N Services with each chunk
// size of the comma-separated list, each into a fresh namespace, the list
// twice in a row (interleaved, so that the machine's drift hits every size
// alike).
func runChunks(t *testing.T, n int, list string, rep *report, floors map[string]float64) {
	var sizes []int
	for _, f := range strings.Split(list, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			t.Fatalf("SVCPROXY_SCALE_NFT_CHUNKS: bad chunk size %q", f)
		}
		sizes = append(sizes, c)
	}
	w := scaleworld.New(scalegen.Spec{Services: n})
	times := map[int][]float64{}
	for range 2 {
		for _, chunk := range sizes {
			t.Run(fmt.Sprint("chunk=", chunk), func(t *testing.T) {
				ns := netns.NewLab(t).NewNS("chunks")
				ns.ToolOnPath(t, "nft")
				e := netlinkExecutor(t, ns, chunk)
				d := timed(t, fmt.Sprintf("first sync over netlink, chunks of %d", chunk), func() error {
					_, err := e.Apply(context.Background(), w.Ruleset)
					return err
				})
				times[chunk] = append(times[chunk], ms(d))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				if _, err := ns.Run(ctx, "nft", "flush", "ruleset"); err != nil {
					t.Logf("flushing the ruleset: %v", err)
				}
			})
		}
	}
	for _, chunk := range sizes {
		rep.add(n, fmt.Sprintf("nftables: first sync over netlink, chunks of %d (median of %d)", chunk, len(times[chunk])), median(times[chunk]), "ms", "nft-full-chunked1000", floors)
	}
}

// latencies measures the median connect() time, in µs, from the client to
// the last Service, the first Service and a pod directly (no Service), as
// latencyFloors does for the floor rulesets.
func latencies(t *testing.T, c *netns.Cluster, w *scaleworld.World, n, conns int) [3]float64 {
	targets := []netip.AddrPort{
		netip.AddrPortFrom(w.Spec.ClusterIP(n-1), 80),
		netip.AddrPortFrom(w.Spec.ClusterIP(0), 80),
		netip.AddrPortFrom(c.Pods[0].IP(w.Spec.IPv6), 8080),
	}
	var res [3]float64
	for i, a := range targets {
		var samples []float64
		err := c.Clients[0].Do(func() error {
			var err error
			samples, err = connlat(a, 20, conns)
			return err
		})
		if err != nil {
			t.Fatalf("connect() to %v: %v", a, err)
		}
		res[i] = median(samples)
		t.Logf("connect() to %-22v median %.1f µs (%d samples)", a, res[i], len(samples))
	}
	return res
}

// connlat times warmup+n blocking connect(2) calls on fresh sockets (each
// closed with a reset, so that no TIME_WAIT piles up) and returns the last n
// durations in µs. It must run on a thread in the client's namespace.
func connlat(a netip.AddrPort, warmup, n int) ([]float64, error) {
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16()}
	family := syscall.AF_INET6
	if a.Addr().Is4() {
		sa, family = &syscall.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}, syscall.AF_INET
	}
	var samples []float64
	errs := 0
	for i := 0; i < warmup+n; i++ {
		fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		tv := syscall.Timeval{Sec: 1}
		syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
		t0 := time.Now()
		err = syscall.Connect(fd, sa)
		d := time.Since(t0)
		syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
		syscall.Close(fd)
		if err != nil {
			if errs++; errs > 20 {
				return nil, fmt.Errorf("too many errors, last: %w", err)
			}
			continue
		}
		if i >= warmup {
			samples = append(samples, float64(d.Nanoseconds())/1000)
		}
	}
	if len(samples) == 0 {
		return nil, errors.New("no successful connect")
	}
	return samples, nil
}
