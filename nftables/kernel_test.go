//go:build linux

package nftables_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := netns.Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "nftables: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}

// kernelState lists a table inside ns in a canonical form: handles dropped,
// the table renamed, set and map elements sorted, rules kept in order.
func kernelState(t testing.TB, ns *netns.NS, nft string, family knftables.Family, table string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), nft, "-j", "list", "table", string(family), table)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	var objects []string
	rules := map[string][]string{}
	for _, o := range doc.Nftables {
		for kind, body := range o {
			if kind == "metainfo" || kind == "table" {
				continue
			}
			delete(body, "handle")
			body["table"] = "T"
			if elems, ok := body["elem"].([]any); ok {
				slices.SortFunc(elems, func(a, b any) int { return strings.Compare(mustJSON(a), mustJSON(b)) })
			}
			if kind == "rule" {
				chain := body["chain"].(string)
				rules[chain] = append(rules[chain], mustJSON(body))
			} else {
				objects = append(objects, kind+" "+mustJSON(body))
			}
		}
	}
	slices.Sort(objects)
	chains := make([]string, 0, len(rules))
	for c := range rules {
		chains = append(chains, c)
	}
	slices.Sort(chains)
	for _, c := range chains {
		objects = append(objects, rules[c]...)
	}
	return strings.Join(objects, "\n")
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestKernelAcceptsTransactions: nft --check accepts every transaction Render
// and RenderChanges produce (the golden cases, then random sequences of
// changes), applied in order in a namespace of the test's own; and after
// each incremental transaction the kernel holds exactly what a full render
// of the same Ruleset into a fresh table holds.
func TestKernelAcceptsTransactions(t *testing.T) {
	netns.Require(t, "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("nft")
	nft := ns.ToolOnPath(t, "nft")
	ctx := context.Background()

	iface := func(family knftables.Family, table string) knftables.Interface {
		t.Helper()
		i, err := nftables.Open(family, table)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	run := func(i knftables.Interface, tx *knftables.Transaction, what string) {
		t.Helper()
		if err := i.Check(ctx, tx); err != nil {
			t.Fatalf("nft --check refuses %s: %v\n%s", what, err, tx)
		}
		if err := i.Run(ctx, tx); err != nil {
			t.Fatalf("nft refuses %s: %v\n%s", what, err, tx)
		}
	}
	checked := 0
	for _, c := range goldenCases {
		rs := c.ruleset(t)
		f := nftables.Family(rs.Config().Family)
		i := iface(f, tableName(c.opts))
		existing, err := i.ListAll(ctx)
		if err != nil && !knftables.IsNotFound(err) {
			t.Fatal(err)
		}
		tx := i.NewTransaction()
		if _, err := nftables.Render(tx, rs, c.opts, existing); err != nil {
			t.Fatal(err)
		}
		run(i, tx, c.name)
		checked++
	}

	// Random sequences, from the table the golden cases left.
	for seed := range 12 {
		cfg, opts, p := genConfigExample(seed)
		f := nftables.Family(cfg.Family)
		i := iface(f, tableName(opts))
		w := newWorld(t, cfg)
		old := w.build()
		existing, err := i.ListAll(ctx)
		if err != nil && !knftables.IsNotFound(err) {
			t.Fatal(err)
		}
		tx := i.NewTransaction()
		res, err := nftables.Render(tx, old, opts, existing)
		if err != nil {
			t.Fatal(err)
		}
		run(i, tx, fmt.Sprintf("seed %d: full render over the previous table", seed))
		checked++
		pending := res.Stale
		for step := range 8 {
			for _, c := range genChanges(p).Example(seed*100 + step) {
				c.apply(w)
			}
			rs := w.build()
			var deletable []string
			if step%2 == 1 {
				deletable = pending
			}
			tx := i.NewTransaction()
			res, err := nftables.RenderChanges(tx, old, rs, opts, deletable)
			if err != nil {
				t.Fatal(err)
			}
			if tx.NumOperations() > 0 {
				run(i, tx, fmt.Sprintf("seed %d step %d", seed, step))
				checked++
			}
			if deletable != nil {
				pending = nil
			}
			pending = append(pending, res.Stale...)
			slices.Sort(pending)
			pending = slices.Compact(pending)
			want := fullState(t, ns, nft, rs, opts, pending)
			got := kernelState(t, ns, nft, f, tableName(opts))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("seed %d step %d: kernel state after the incremental transaction differs from a full render (-full +incremental):\n%s\ntransaction:\n%s", seed, step, diff, tx)
			}
			old = rs
		}
	}
	t.Logf("nft --check accepted %d transactions", checked)
}

// fullState renders rs, with opts and with empty chains named stale, into
// a fresh table "full" inside ns (nft --check, then nft) and returns its
// kernelState.
func fullState(t *testing.T, ns *netns.NS, nft string, rs *ruleset.Ruleset, opts nftables.Options, stale []string) string {
	t.Helper()
	f := nftables.Family(rs.Config().Family)
	opts.Table = "full"
	i, err := nftables.Open(f, "full")
	if err != nil {
		t.Fatal(err)
	}
	tx := i.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if _, err := nftables.Render(tx, rs, opts, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		tx.Add(&knftables.Chain{Name: name})
	}
	ctx := context.Background()
	if err := i.Check(ctx, tx); err != nil {
		t.Fatalf("nft --check refuses a full render: %v\n%s", err, tx)
	}
	if err := i.Run(ctx, tx); err != nil {
		t.Fatalf("nft refuses a full render: %v\n%s", err, tx)
	}
	return kernelState(t, ns, nft, f, "full")
}

// executorIn makes an Executor inside ns, so that its netlink socket (with
// cfg.Netlink) is there, and closes it when the test ends. Unless cfg names
// another namespace, its nft runs in ns too (cfg.NetNS), so that no test can
// reach the host's ruleset by forgetting ToolOnPath.
func executorIn(t *testing.T, ns *netns.NS, cfg nftables.ExecutorConfig) *nftables.Executor {
	t.Helper()
	if cfg.NetNS == "" {
		cfg.NetNS = filepath.Join("/run/netns", ns.Name)
	}
	var ex *nftables.Executor
	if err := ns.Do(func() error {
		var err error
		ex, err = nftables.NewExecutor(cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

// genConfigExample is genConfig's example for seed.
func genConfigExample(seed int) (ruleset.Config, nftables.Options, pools) {
	type drawn struct {
		cfg  ruleset.Config
		opts nftables.Options
		p    pools
	}
	d := rapid.Custom(func(t *rapid.T) drawn {
		cfg, opts, p := genConfig(t)
		return drawn{cfg, opts, p}
	}).Example(seed)
	return d.cfg, d.opts, d.p
}

// TestKernelService: through the real Executor (knftables and nft inside
// the node namespace for full syncs, netlink for incremental ones), TCP
// connections from a client, from the node itself
// and from a pod reach the pods behind a ClusterIP; incremental syncs move
// the traffic; a Service without endpoints rejects; a NodePort with
// externalTrafficPolicy Local keeps the client address; Cleanup removes the
// tables.
func TestKernelService(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, RemotePods: 1, Clients: 1})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(t, "nft")
	client, pod0, pod1, pod2 := c.Clients[0], c.Pods[0], c.Pods[1], c.Pods[2]
	const quick = 2 * time.Second

	for _, v6 := range []bool{false, true} {
		family, cfg, svcIP := v1.IPv4Protocol, config4(), "198.19.0.10"
		emptyIP, localIP := "198.19.0.11", "198.19.0.12"
		cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
		if v6 {
			family, cfg, svcIP = v1.IPv6Protocol, config6(), "2001:db8:19::10"
			emptyIP, localIP = "2001:db8:19::11", "2001:db8:19::12"
			cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR6}
		}
		now := time.Unix(1e9, 0)
		ex := executorIn(t, c.Node.NS, nftables.ExecutorConfig{Family: family, Now: func() time.Time { return now }, Netlink: true})
		ip := func(h *netns.Host) string { return h.IP(v6).String() }
		w := newWorld(t, cfg)
		w.add(
			svc("ns1", "web", svcIP, nodePort(30080)),
			slice("ns1", "web", 8080, ep{ip: ip(pod0), node: node}, ep{ip: ip(pod2), node: "node-b"}),
			svc("ns1", "empty", emptyIP),
			svc("ns1", "local", localIP, nodePort(30081), externalLocal),
			slice("ns1", "local", 8080, ep{ip: ip(pod1), node: node}, ep{ip: ip(pod2), node: "node-b"}),
		)
		sync := func(wantFull bool) nftables.SyncDetails {
			t.Helper()
			now = now.Add(2 * time.Second)
			res, err := ex.Apply(context.Background(), w.build())
			if err != nil {
				t.Fatal(err)
			}
			details := res
			if res.Full != wantFull {
				t.Fatalf("sync: full=%v, want %v (fallback: %v)", res.Full, wantFull, details.Fallback)
			}
			if !res.Full && details.Operations > 0 && !details.Netlink {
				t.Fatalf("incremental sync not over netlink: %v", details.NotNetlink)
			}
			return details
		}
		sync(true)

		web := netip.AddrPortFrom(netip.MustParseAddr(svcIP), 80)
		seen := func(from *netns.Host, dst netip.AddrPort, n int) map[string]netns.Reply {
			t.Helper()
			got := map[string]netns.Reply{}
			for range n {
				r, err := from.TCP(dst, quick)
				if err != nil {
					t.Fatalf("%s → %s: %v", from.Label, dst, err)
				}
				got[r.Identity] = r
			}
			return got
		}
		// From a client (nat-prerouting), spread over both endpoints and
		// masqueraded (the client is outside the pod network).
		got := seen(client, web, 40)
		if len(got) != 2 || got[pod0.Label].Identity == "" || got[pod2.Label].Identity == "" {
			t.Errorf("%s → %s reached %v, want %s and %s", client.Label, web, got, pod0.Label, pod2.Label)
		}
		for _, r := range got {
			if r.Source.Addr() == client.IP(v6) || r.From != web {
				t.Errorf("%s → %s: %+v: want the client masqueraded and the reply from the Service", client.Label, web, r)
			}
		}
		// From the node itself (nat-output) and from a pod (not
		// masqueraded: it is in the pod network).
		if got := seen(c.Node, web, 4); len(got) == 0 {
			t.Errorf("node → %s: no reply", web)
		}
		for _, r := range seen(pod1, web, 4) {
			if r.Source.Addr() != pod1.IP(v6) {
				t.Errorf("%s → %s: source %s, want the pod's own", pod1.Label, web, r.Source)
			}
		}
		// NodePort, Cluster policy.
		nodeIP := c.Node.IP(v6)
		if got := seen(client, netip.AddrPortFrom(nodeIP, 30080), 4); len(got) == 0 {
			t.Errorf("NodePort 30080: no reply")
		}
		// NodePort, Local policy: the local endpoint only, client kept.
		for id, r := range seen(client, netip.AddrPortFrom(nodeIP, 30081), 10) {
			if id != pod1.Label || r.Source.Addr() != client.IP(v6) {
				t.Errorf("NodePort 30081 (Local): %+v, want %s seeing the client's address", r, pod1.Label)
			}
		}
		// No endpoints: rejected (ICMP port unreachable, as kube-proxy
		// does), not left to time out. Linux TCP over IPv6 ignores the
		// ICMPv6 error that answers a first SYN and gives up on the one
		// that answers the retransmission, a second later.
		limit := 500 * time.Millisecond
		if v6 {
			limit = 1500 * time.Millisecond
		}
		begin := time.Now()
		if _, err := client.TCP(netip.AddrPortFrom(netip.MustParseAddr(emptyIP), 80), quick); !errors.Is(err, netns.ErrRefused) || time.Since(begin) > limit {
			t.Errorf("Service without endpoints: %v after %v, want refused within %v", err, time.Since(begin), limit)
		}
		begin = time.Now()
		if _, err := client.UDP(netip.AddrPortFrom(netip.MustParseAddr(emptyIP), 80), quick); !errors.Is(err, netns.ErrRefused) || time.Since(begin) > 500*time.Millisecond {
			t.Errorf("UDP to a port no Service uses on a cluster IP: %v after %v, want refused at once", err, time.Since(begin))
		}
		// Another port of a cluster IP: rejected too.
		if _, err := client.TCP(netip.AddrPortFrom(web.Addr(), 81), quick); !errors.Is(err, netns.ErrRefused) {
			t.Errorf("unused port of a cluster IP: %v, want refused", err)
		}

		// Incremental: the endpoints move to pod1 only.
		w.add(slice("ns1", "web", 8080, ep{ip: ip(pod1), node: node}))
		sync(false)
		for id := range seen(client, web, 10) {
			if id != pod1.Label {
				t.Errorf("after the change %s → %s reached %s, want %s only", client.Label, web, id, pod1.Label)
			}
		}
		// A full resync of the loaded table (in chunks, over netlink)
		// with a change in it: back to pod0 and pod2.
		w.add(slice("ns1", "web", 8080, ep{ip: ip(pod0), node: node}, ep{ip: ip(pod2), node: "node-b"}))
		ex.RequestFullSync()
		if details := sync(true); !details.Netlink {
			t.Errorf("full resync of the loaded table: nothing over netlink")
		}
		if got := seen(client, web, 40); len(got) != 2 || got[pod0.Label].Identity == "" || got[pod2.Label].Identity == "" {
			t.Errorf("after a full resync %s → %s reached %v, want %s and %s", client.Label, web, got, pod0.Label, pod2.Label)
		}
		w.add(slice("ns1", "web", 8080, ep{ip: ip(pod1), node: node}))
		sync(false)
		// The empty Service gets an endpoint; the Local one loses its
		// local endpoint, so external traffic is dropped.
		w.add(slice("ns1", "empty", 8080, ep{ip: ip(pod2), node: "node-b"}),
			slice("ns1", "local", 8080, ep{ip: ip(pod2), node: "node-b"}))
		sync(false)
		if got := seen(client, netip.AddrPortFrom(netip.MustParseAddr(emptyIP), 80), 2); got[pod2.Label].Identity == "" {
			t.Errorf("Service with a new endpoint: %v", got)
		}
		if _, err := client.TCP(netip.AddrPortFrom(nodeIP, 30081), 300*time.Millisecond); !errors.Is(err, netns.ErrTimeout) {
			t.Errorf("NodePort with Local policy and no local endpoint: %v, want dropped", err)
		}
		// A stale chain is deleted by a later sync.
		w.Svcs.Delete("ns1", "local")
		sync(false)
		w.add(svc("ns1", "other", emptyIP, func(s *v1.Service) { s.Spec.Ports[0].Port = 8081 }))
		sync(false)
		out, err := c.Node.Run(context.Background(), nft, "list", "chains", string(nftables.Family(family)))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "ns1/local/") {
			t.Errorf("chains of a deleted Service are still there:\n%s", out)
		}
		if err := ex.Cleanup(context.Background()); err != nil {
			t.Fatal(err)
		}
		if out, err := c.Node.Run(context.Background(), nft, "list", "tables"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("tables after Cleanup: %q, %v", out, err)
		}
	}
}

// TestOpenRefusesOldNFT: Open reports a clear error when nft is older than
// 1.0.1 (an nft that says so, on PATH).
func TestOpenRefusesOldNFT(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho 'nftables v0.9.8 (E.D.S.)'\n"
	if err := os.WriteFile(filepath.Join(dir, "nft"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	_, err := nftables.Open(knftables.IPv4Family, nftables.DefaultTable)
	if err == nil || !strings.Contains(err.Error(), "1.0.1") || !strings.Contains(err.Error(), "v0.9.8") {
		t.Errorf("Open with nft 0.9.8: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := nftables.Open(knftables.IPv4Family, nftables.DefaultTable); err == nil || !strings.Contains(err.Error(), "nft") {
		t.Errorf("Open without nft: %v", err)
	}
}

// BenchmarkKernelSync times the Executor against the kernel, in a namespace
// of its own: one full sync of N Services × 10 endpoints (reported as
// full-s), then incremental syncs that each change one Service's endpoints.
func BenchmarkKernelSync(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			netns.Require(b, "nft")
			lab := netns.NewLab(b)
			ns := lab.NewNS("bench")
			ns.ToolOnPath(b, "nft")
			before, after := benchWorld(b, n)
			ex, err := nftables.NewExecutor(nftables.ExecutorConfig{Family: v1.IPv4Protocol})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := ex.Apply(context.Background(), before); err != nil {
				b.Fatal(err)
			}
			full := time.Since(start)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rs := after
				if i%2 == 1 {
					rs = before
				}
				res, err := ex.Apply(context.Background(), rs)
				if err != nil || res.Full {
					b.Fatalf("%+v, %v", res, err)
				}
			}
			b.ReportMetric(full.Seconds(), "full-s")
		})
	}
}
