//go:build scale && linux

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

// Limits of one floor configuration: no more repetitions once its timed
// runs add up to floorBudget (at least one runs), and no single command
// longer than floorTimeout.
const (
	floorBudget  = 2 * time.Minute
	floorTimeout = 20 * time.Minute
)

// defaultFloorOnly selects the floor configurations that the report
// compares our figures with.
const defaultFloorOnly = `^(iptnft-flush-full|iptnft-noflush-partial-add1|nft-full-1tx|nft-full-chunked1000|nft-add1-E10|lat-nft|lat-iptnft)$`

// errFloorTimeout is returned by loadTimed when a command ran out of time.
var errFloorTimeout = errors.New("timed out")

// floorSettings are the environment's settings of the floor runs (see the
// package documentation).
type floorSettings struct {
	only  *regexp.Regexp
	reps  int
	conns int
}

func floorSettingsFromEnv(t *testing.T) floorSettings {
	only, err := regexp.Compile(env("SVCPROXY_SCALE_FLOOR_ONLY", defaultFloorOnly))
	if err != nil {
		t.Fatalf("SVCPROXY_SCALE_FLOOR_ONLY: %v", err)
	}
	s := floorSettings{only: only, reps: envInt(t, "SVCPROXY_SCALE_FLOOR_REPS", 3), conns: envInt(t, "SVCPROXY_SCALE_CONNS", 200)}
	if s.reps < 1 || s.conns < 1 {
		t.Fatalf("SVCPROXY_SCALE_FLOOR_REPS and SVCPROXY_SCALE_CONNS must be at least 1")
	}
	return s
}

// runFloors measures one group of kernel floors, "restore" or "latency",
// for each of sizes, and returns the medians by "configuration/N": ms for
// the restore group, µs for the latency group ("lat-<mode>-<target>").
// A configuration whose tool is missing, or that SVCPROXY_SCALE_FLOOR_ONLY
// does not select, has no entry.
func runFloors(t *testing.T, which string, sizes []int) map[string]float64 {
	s := floorSettingsFromEnv(t)
	res := map[string]float64{}
	for _, n := range sizes {
		start := time.Now()
		switch which {
		case "restore":
			restoreFloors(t, s, n, res)
		case "latency":
			latencyFloors(t, s, n, res)
		default:
			t.Fatalf("SVCPROXY_SCALE_FLOORS: unknown floor group %q (want restore, latency)", which)
		}
		t.Logf("floors %s, N=%d: %v", which, n, time.Since(start).Round(time.Second))
	}
	return res
}

// floorLoad is a load: argv run once per file, with the file on stdin.
type floorLoad struct {
	argv  []string
	files []string
}

// floorConfig is one floor configuration of the restore group.
type floorConfig struct {
	name string
	// argv is the timed command, run once per input file.
	argv []string
	// preload, when set, is loaded untimed into one namespace before the
	// first repetition, and every repetition runs in that namespace;
	// otherwise every repetition runs in a fresh namespace.
	preload *floorLoad
	// inputs returns the files of repetition rep (0, 1, …), writing them
	// first if it needs to.
	inputs func(rep int) ([]string, error)
}

// nftArgv runs an nft script read from stdin.
var nftArgv = []string{"nft", "-f", "-"}

// restoreConfigs returns the restore group's configurations for n Services
// of 10 endpoints, with their files in dir: full loads by each tool
// (iptables-restore with and without --noflush, iptables-legacy-restore,
// nft in one transaction and in transactions of 1,000 Services), and
// one-Service additions to a loaded table (repetition r adds Service n+r).
func restoreConfigs(dir string, n int) ([]floorConfig, error) {
	rules := floorRules{Endpoints: scalegen.DefaultEndpoints}
	fullIpt, fullNft := filepath.Join(dir, "full.ipt"), filepath.Join(dir, "full.nft")
	if err := writeFile(fullIpt, func(w io.Writer) error { return rules.writeIptables(w, 0, n) }); err != nil {
		return nil, err
	}
	if err := writeFile(fullNft, func(w io.Writer) error { return rules.writeNft(w, 0, n, true) }); err != nil {
		return nil, err
	}
	chunks, err := writeNftChunks(dir, rules, n)
	if err != nil {
		return nil, err
	}
	fixed := func(files ...string) func(int) ([]string, error) {
		return func(int) ([]string, error) { return files, nil }
	}
	addIpt := func(rep int) ([]string, error) {
		f := filepath.Join(dir, fmt.Sprintf("add-%d.ipt", n+rep))
		return []string{f}, writeFile(f, func(w io.Writer) error { return rules.writeIptables(w, n+rep, n+rep+1) })
	}
	addNft := func(endpoints int) func(int) ([]string, error) {
		r := floorRules{Endpoints: endpoints}
		return func(rep int) ([]string, error) {
			f := filepath.Join(dir, fmt.Sprintf("add-%d-E%d.nft", n+rep, endpoints))
			return []string{f}, writeFile(f, func(w io.Writer) error { return r.writeNft(w, n+rep, n+rep+1, false) })
		}
	}
	iptLoaded := &floorLoad{argv: []string{"iptables-restore"}, files: []string{fullIpt}}
	legacyLoaded := &floorLoad{argv: []string{"iptables-legacy-restore"}, files: []string{fullIpt}}
	nftLoaded := &floorLoad{argv: nftArgv, files: chunks}
	return []floorConfig{
		{name: "iptnft-flush-full", argv: []string{"iptables-restore"}, inputs: fixed(fullIpt)},
		{name: "iptnft-noflush-full", argv: []string{"iptables-restore", "--noflush"}, inputs: fixed(fullIpt)},
		{name: "legacy-noflush-full", argv: []string{"iptables-legacy-restore", "--noflush"}, inputs: fixed(fullIpt)},
		{name: "iptnft-noflush-partial-add1", argv: []string{"iptables-restore", "--noflush"}, preload: iptLoaded, inputs: addIpt},
		{name: "legacy-noflush-partial-add1", argv: []string{"iptables-legacy-restore", "--noflush"}, preload: legacyLoaded, inputs: addIpt},
		{name: "nft-full-1tx", argv: nftArgv, inputs: fixed(fullNft)},
		{name: "nft-full-chunked1000", argv: nftArgv, inputs: fixed(chunks...)},
		{name: "nft-add1-E1", argv: nftArgv, preload: nftLoaded, inputs: addNft(1)},
		{name: fmt.Sprintf("nft-add1-E%d", scalegen.DefaultEndpoints), argv: nftArgv, preload: nftLoaded, inputs: addNft(scalegen.DefaultEndpoints)},
	}, nil
}

// restoreFloors times the restore group's configurations that s selects
// for n Services and records their medians in res.
func restoreFloors(t *testing.T, s floorSettings, n int, res map[string]float64) {
	configs, err := restoreConfigs(t.TempDir(), n)
	if err != nil {
		t.Fatalf("floors, N=%d: %v", n, err)
	}
	for _, c := range configs {
		if !s.only.MatchString(c.name) {
			continue
		}
		if _, err := exec.LookPath(c.argv[0]); err != nil {
			t.Logf("floor %s left out: %v", c.name, err)
			continue
		}
		samples := measureFloor(t, s, c)
		if len(samples) > 0 {
			res[fmt.Sprintf("%s/%d", c.name, n)] = median(samples)
		}
		t.Logf("floor %-30s N=%-6d ms %v", c.name, n, samples)
	}
}

// measureFloor times c's repetitions and returns their durations in ms. A
// repetition that times out ends the configuration without a sample; any
// other failure fails the test.
func measureFloor(t *testing.T, s floorSettings, c floorConfig) []float64 {
	var loaded *netns.NS
	if c.preload != nil {
		sc := newScope(t)
		defer sc.close()
		loaded = floorNS(sc)
		if _, err := loadTimed(loaded, *c.preload); err != nil {
			t.Fatalf("floor %s: preloading: %v", c.name, err)
		}
	}
	var samples []float64
	var spent time.Duration
	for rep := range s.reps {
		files, err := c.inputs(rep)
		if err != nil {
			t.Fatalf("floor %s: %v", c.name, err)
		}
		d, err := loadOnce(t, loaded, floorLoad{argv: c.argv, files: files})
		if errors.Is(err, errFloorTimeout) {
			t.Logf("floor %s: repetition %d: %v", c.name, rep+1, err)
			break
		}
		if err != nil {
			t.Errorf("floor %s: repetition %d: %v", c.name, rep+1, err)
			break
		}
		samples = append(samples, ms(d))
		if spent += d; spent > floorBudget {
			break
		}
	}
	return samples
}

// loadOnce times ld in ns, or, when ns is nil, in a fresh namespace that is
// removed before it returns.
func loadOnce(t *testing.T, ns *netns.NS, ld floorLoad) (time.Duration, error) {
	if ns == nil {
		sc := newScope(t)
		defer sc.close()
		ns = floorNS(sc)
	}
	return loadTimed(ns, ld)
}

// loadTimed runs ld in ns and returns the time its commands took, each
// measured around its `ip netns exec` as the executors' commands are. It
// returns an error wrapping errFloorTimeout when they take longer than
// floorTimeout.
func loadTimed(ns *netns.NS, ld floorLoad) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), floorTimeout)
	defer cancel()
	var total time.Duration
	for _, file := range ld.files {
		in, err := os.Open(file)
		if err != nil {
			return total, fmt.Errorf("opening the input: %w", err)
		}
		cmd := ns.Command(ctx, ld.argv[0], ld.argv[1:]...)
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stderr = in, &stderr
		start := time.Now()
		err = cmd.Run()
		total += time.Since(start)
		in.Close()
		if ctx.Err() != nil {
			return total, fmt.Errorf("%s < %s: %w after %v", strings.Join(ld.argv, " "), filepath.Base(file), errFloorTimeout, floorTimeout)
		}
		if err != nil {
			return total, fmt.Errorf("%s < %s: %w: %s", strings.Join(ld.argv, " "), filepath.Base(file), err, strings.TrimSpace(stderr.String()))
		}
	}
	return total, nil
}

// writeNftChunks writes the Services [0, n) of rules as nft scripts of
// floorChunk Services each, the first with the table's base objects, and
// returns their paths in load order.
func writeNftChunks(dir string, rules floorRules, n int) ([]string, error) {
	var files []string
	for from := 0; from < n; from += floorChunk {
		f := filepath.Join(dir, fmt.Sprintf("chunk-%03d.nft", from/floorChunk))
		if err := writeFile(f, func(w io.Writer) error { return rules.writeNft(w, from, min(from+floorChunk, n), from == 0) }); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing a floor ruleset: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing a floor ruleset: %w", err)
	}
	return nil
}

// scope is a testing.TB whose Cleanup functions run when close is called
// rather than when the test ends: a Lab made with it lives for one
// measurement, so that large rulesets do not pile up in namespaces for the
// rest of the run. Everything else is the test's. close must run (deferred)
// on the test's goroutine, so that it also runs when the test fails.
type scope struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func newScope(t testing.TB) *scope { return &scope{TB: t} }

// Cleanup registers f to run at close.
func (s *scope) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// close runs the Cleanup functions, the last registered first.
func (s *scope) close() {
	s.mu.Lock()
	fns := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for _, f := range slices.Backward(fns) {
		f()
	}
}

// floorNS makes an empty namespace, without links, in a new Lab of sc.
func floorNS(sc *scope) *netns.NS {
	ns := netns.NewLab(sc).NewNS("floor")
	sc.Cleanup(func() { emptyRulesets(sc, ns) })
	return ns
}

// emptyRulesets removes every rule of ns, synchronously, so that the
// kernel's teardown of a large ruleset when the namespace is deleted does not
// run into the next measurement.
func emptyRulesets(t testing.TB, ns *netns.NS) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmds := [][]string{{"nft", "flush", "ruleset"}}
	if _, err := exec.LookPath("iptables-legacy"); err == nil {
		cmds = append(cmds, []string{"iptables-legacy", "-t", "nat", "-F"}, []string{"iptables-legacy", "-t", "nat", "-X"})
	}
	for _, c := range cmds {
		if _, err := ns.Run(ctx, c[0], c[1:]...); err != nil {
			t.Logf("emptying %s: %v", ns.Label, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
}

// latencyModes are the latency group's modes: how the floor ruleset is
// loaded, and the tool that needs.
var latencyModes = []struct{ mode, tool string }{
	{"nft", "nft"},
	{"iptnft", "iptables-restore"},
	{"legacy", "iptables-legacy-restore"},
}

// latencyFloors measures, for each mode that s selects ("lat-<mode>"), the
// median connect() time from a client through a node holding the floor
// ruleset of n Services (3 endpoints each: the lab's pods) to the last
// Service, the first Service, and a pod directly; it records them in res
// as "lat-<mode>-last-svc/n", "…-first-svc/n" and "…-pod-direct/n" (µs).
func latencyFloors(t *testing.T, s floorSettings, n int, res map[string]float64) {
	for _, m := range latencyModes {
		name := "lat-" + m.mode
		if !s.only.MatchString(name) {
			continue
		}
		if _, err := exec.LookPath(m.tool); err != nil {
			t.Logf("floor %s left out: %v", name, err)
			continue
		}
		func() {
			sc := newScope(t)
			defer sc.close()
			c := floorCluster(sc)
			if err := loadFloorRules(t.TempDir(), c, m.mode, n); err != nil {
				t.Fatalf("floor %s: loading %d Services: %v", name, n, err)
			}
			targets := map[string]netip.AddrPort{
				"last-svc":   netip.AddrPortFrom(scalegen.ClusterIP(n-1), floorPort),
				"first-svc":  netip.AddrPortFrom(scalegen.ClusterIP(0), floorPort),
				"pod-direct": netip.AddrPortFrom(c.Pods[0].IPv4, floorTargetPort),
			}
			for _, target := range []string{"last-svc", "first-svc", "pod-direct"} {
				var samples []float64
				err := c.Clients[0].Do(func() error {
					var err error
					samples, err = connlat(targets[target], 20, s.conns)
					return err
				})
				if err != nil {
					t.Fatalf("floor %s: connect() to %v: %v", name, targets[target], err)
				}
				res[fmt.Sprintf("%s-%s/%d", name, target, n)] = median(samples)
				t.Logf("floor %s-%s N=%d: median %.1f µs (%d samples)", name, target, n, median(samples), len(samples))
			}
		}()
	}
}

// floorCluster makes the latency lab in sc: one client, a node, three pods
// with echo servers on floorTargetPort.
func floorCluster(sc *scope) *netns.Cluster {
	c := netns.NewCluster(sc, netns.ClusterSpec{Pods: 3, Clients: 1})
	c.StartEcho(floorTargetPort)
	sc.Cleanup(func() { emptyRulesets(sc, c.Node.NS) })
	return c
}

// loadFloorRules loads into c's node, untimed, the floor ruleset of n
// Services whose endpoints are c's pods, by mode: "iptnft" and "legacy"
// restore it with iptables-restore or iptables-legacy-restore and then
// jump to KUBE-SERVICES from nat PREROUTING; "nft" loads it in transactions
// of floorChunk Services. Its files go to dir.
func loadFloorRules(dir string, c *netns.Cluster, mode string, n int) error {
	var pods []netip.Addr
	for _, p := range c.Pods {
		pods = append(pods, p.IPv4)
	}
	rules := floorRules{Endpoints: len(pods), Pods: pods}
	if mode == "nft" {
		files, err := writeNftChunks(dir, rules, n)
		if err != nil {
			return err
		}
		_, err = loadTimed(c.Node.NS, floorLoad{argv: nftArgv, files: files})
		return err
	}
	tool := map[string]string{"iptnft": "iptables", "legacy": "iptables-legacy"}[mode]
	if tool == "" {
		return fmt.Errorf("unknown floor mode %q", mode)
	}
	f := filepath.Join(dir, "full.ipt")
	if err := writeFile(f, func(w io.Writer) error { return rules.writeIptables(w, 0, n) }); err != nil {
		return err
	}
	if _, err := loadTimed(c.Node.NS, floorLoad{argv: []string{tool + "-restore"}, files: []string{f}}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Node.Run(ctx, tool, "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES"); err != nil {
		return fmt.Errorf("jumping to KUBE-SERVICES: %w", err)
	}
	return nil
}

// floorsMarkdown lists every floor measured, by N and name, as a Markdown
// table.
func floorsMarkdown(floors map[string]float64) string {
	keys := slices.SortedFunc(maps.Keys(floors), func(a, b string) int {
		an, bn := floorKeyN(a), floorKeyN(b)
		if an != bn {
			return an - bn
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	b.WriteString("Every floor of the run (medians):\n\n| floor | N | median |\n|---|---|---|\n")
	for _, k := range keys {
		name, n, _ := strings.Cut(k, "/")
		unit := "ms"
		if strings.HasPrefix(name, "lat-") {
			unit = "µs"
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s |\n", name, n, num(floors[k]), unit)
	}
	return b.String()
}

// floorKeyN is the N of a floor key "configuration/N" (0 if it has none).
func floorKeyN(key string) int {
	_, n, _ := strings.Cut(key, "/")
	v, _ := strconv.Atoi(n)
	return v
}

// TestFloorRulesRoute checks that the floor rulesets do what they stand
// for, with each tool: after a full load, connections to the first and the
// last Service reach the pods, all three of them; after the one-Service
// addition that the restore group times, the new Service is reached too
// and the old ones still are; a Service not loaded is not.
func TestFloorRulesRoute(t *testing.T) {
	const n = 50
	for _, m := range latencyModes {
		t.Run(m.mode, func(t *testing.T) {
			netns.Require(t, m.tool)
			sc := newScope(t)
			defer sc.close()
			c := floorCluster(sc)
			dir := t.TempDir()
			if err := loadFloorRules(dir, c, m.mode, n); err != nil {
				t.Fatalf("loading %d Services: %v", n, err)
			}
			wantReached(t, c, n-1, 60)
			wantReached(t, c, 0, 60)
			addFloorService(t, dir, c, m.mode, n)
			wantReached(t, c, n, 60)
			wantReached(t, c, n-1, 3)
			svc := netip.AddrPortFrom(scalegen.ClusterIP(n+1), floorPort)
			if r, err := c.Clients[0].TCP(svc, 500*time.Millisecond); err == nil {
				t.Errorf("Service %d, not loaded: reached %s", n+1, r.Identity)
			}
		})
	}
}

// wantReached connects conns times to Service i and checks that every
// connection reaches a pod, and that, with at least 60 connections, every
// pod is reached (a pod is missed with probability 3·(2/3)^60 < 1e-10).
func wantReached(t *testing.T, c *netns.Cluster, i, conns int) {
	t.Helper()
	svc := netip.AddrPortFrom(scalegen.ClusterIP(i), floorPort)
	seen := map[string]int{}
	for range conns {
		r, err := c.Clients[0].TCP(svc, 2*time.Second)
		if err != nil {
			t.Fatalf("Service %d (%v): %v", i, svc, err)
		}
		seen[r.Identity]++
	}
	if conns >= 60 && len(seen) != len(c.Pods) {
		t.Errorf("Service %d: %d connections reached %v, want all %d pods", i, conns, seen, len(c.Pods))
	}
}

// addFloorService adds Service n to the floor ruleset of n Services loaded
// in c's node by mode, as the restore group's one-Service additions do.
func addFloorService(t *testing.T, dir string, c *netns.Cluster, mode string, n int) {
	t.Helper()
	var pods []netip.Addr
	for _, p := range c.Pods {
		pods = append(pods, p.IPv4)
	}
	rules := floorRules{Endpoints: len(pods), Pods: pods}
	f := filepath.Join(dir, "add")
	write := func(w io.Writer) error { return rules.writeIptables(w, n, n+1) }
	argv := map[string][]string{"iptnft": {"iptables-restore", "--noflush"}, "legacy": {"iptables-legacy-restore", "--noflush"}, "nft": nftArgv}[mode]
	if mode == "nft" {
		write = func(w io.Writer) error { return rules.writeNft(w, n, n+1, false) }
	}
	if err := writeFile(f, write); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTimed(c.Node.NS, floorLoad{argv: argv, files: []string{f}}); err != nil {
		t.Fatalf("adding Service %d: %v", n, err)
	}
}
