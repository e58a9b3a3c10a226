//go:build scale && linux

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

// TestScaleFlat measures nftables' flat layout against kube-proxy's layout
// (the Executor over netlink, as TestScale runs it) in one run, at each
// SVCPROXY_SCALE_N (default 10000): generation, first sync, full resync of
// the loaded table, one Service changed, added and removed, and connect()
// latency. The flat layout's first sync writes its definitions with nft
// and its elements over netlink (FlatFirstSync), its resync is one `nft -f`
// of the whole table (FlatScript), which is also timed into no table; its
// incremental syncs go over netlink when they touch only
// elements, through nft otherwise (reported).
//
//	SVCPROXY_SCALE_N=10000 go test -tags scale ./bench/ -run ScaleFlat -v -timeout 60m
//
// SVCPROXY_SCALE_LAYOUTS picks the layouts (default "kube-proxy flat").
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
	for _, f := range strings.Split(env("SVCPROXY_SCALE_N", "10000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > scalegen.MaxServices-100 {
			t.Fatalf("SVCPROXY_SCALE_N: bad count %q", f)
		}
		if layouts["kube-proxy"] {
			floors := map[string]float64{}
			t.Run(fmt.Sprintf("kube-proxy/services=%d", n), func(t *testing.T) { runNftables(t, n, reps, conns, true, &rep, floors) })
		}
		if layouts["flat"] {
			t.Run(fmt.Sprintf("flat/services=%d", n), func(t *testing.T) { runFlat(t, n, reps, conns, &rep) })
		}
	}
	rep.notes = append(rep.notes, fmt.Sprintf("Whole run: %v.", time.Since(start).Round(time.Second)))
	fmt.Println(rep.markdown())
}

// flatLab is the flat layout loaded into a lab's node.
type flatLab struct {
	t     *testing.T
	c     *netns.Cluster
	state *nftables.FlatState
	fake  *knftables.Fake
	nl    *nftables.FlatNetlink
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

func runFlat(t *testing.T, n, reps, conns int, rep *report) {
	c := newCluster(t)
	w := world(t, c, n)
	l := &flatLab{t: t, c: c, fake: knftables.NewFake(knftables.IPv4Family, nftables.DefaultFlatTable)}
	if err := c.Node.Do(func() error {
		var err error
		l.nl, err = nftables.DialFlatNetlink()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.nl.Close() })

	var load nftables.FlatLoad
	var res nftables.Result
	gen := timed(t, "generation (snapshots + Build + FlatFirstSync)", func() error {
		rs := w.Build()
		l.state, load, res = nftables.FlatFirstSync(rs, nftables.Options{})
		return nil
	})
	first := l.script("flat: first sync, definitions through nft", load.Definitions)
	var loadTx int
	first += timed(t, "flat: first sync, elements over netlink", func() (err error) { loadTx, err = l.nl.Load(load); return err })
	lat := latencies(t, c, w, n, conns)
	var script string
	l.state, script, _ = nftables.FlatScript(w.Ruleset, nftables.Options{})
	resync := l.script("flat: full resync of the loaded table (one nft -f)", script)
	l.script("flat: table deleted", "delete table ip "+nftables.DefaultFlatTable+"\n")
	whole := l.script("flat: whole table into no table (one nft -f)", script)

	var change, add, remove []float64
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
	for _, i := range []int{0, n - 1} {
		if _, err := c.Clients[0].TCP(netip.AddrPortFrom(scalegen.ClusterIP(i), 80), 2*time.Second); err != nil {
			t.Errorf("Service %d after the incremental syncs: %v", i, err)
		}
	}

	rep.add(n, "flat: lines of the whole-table script", float64(strings.Count(script, "\n")), "lines", "", nil)
	rep.add(n, "flat: Service ports warned about (ClientIP affinity not rendered)", float64(len(res.Warnings)), "ports", "", nil)
	rep.add(n, "flat: generation (snapshots + Build + FlatFirstSync)", ms(gen), "ms", "", nil)
	rep.add(n, "flat: first sync (definitions through nft, elements over netlink)", ms(first), "ms", "", nil)
	rep.add(n, "flat: netlink transactions of the first sync's elements", float64(loadTx), "tx", "", nil)
	rep.add(n, "flat: whole table into no table (one nft -f)", ms(whole), "ms", "", nil)
	rep.add(n, "flat: generation / first sync", 100*float64(gen)/float64(first), "%", "", nil)
	rep.add(n, "flat: full resync of the loaded table (one nft -f)", ms(resync), "ms", "", nil)
	rep.add(n, fmt.Sprintf("flat: incremental sync, 1 Service changed (median of %d)", reps), median(change), "ms", "", nil)
	rep.add(n, fmt.Sprintf("flat: incremental sync, 1 Service added (median of %d)", reps), median(add), "ms", "", nil)
	rep.add(n, fmt.Sprintf("flat: incremental sync, 1 Service removed (median of %d)", reps), median(remove), "ms", "", nil)
	rep.add(n, "flat: incremental syncs that changed rules (through nft)", float64(l.viaNFT), "syncs", "", nil)
	rep.add(n, "flat: connect() to the last Service (median)", lat[0], "µs", "", nil)
	rep.add(n, "flat: connect() to the first Service (median)", lat[1], "µs", "", nil)
	rep.add(n, "flat: connect() to a pod directly (median)", lat[2], "µs", "", nil)
}

// incremental renders the changes from prev to next and applies them:
// over netlink when they touch only elements, with nft otherwise. It
// returns the time of render and apply, in ms.
func (l *flatLab) incremental(what string, prev, next *ruleset.Ruleset) float64 {
	start := time.Now()
	tx := l.fake.NewTransaction()
	ch, err := nftables.RenderFlatChanges(tx, l.state, prev, next)
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
