package nftables_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

// pools are the small sets of values random Services draw from, so that
// changes collide: shared cluster IPs, external IPs and node ports.
type pools struct {
	clusterIPs, externalIPs, lbIPs, podIPs []string
	sourceRanges                           []string
}

var pools4 = pools{
	clusterIPs:   []string{"198.19.0.1", "198.19.0.2", "198.19.0.3", "198.19.0.4"},
	externalIPs:  []string{"198.18.0.100", "198.18.0.101"},
	lbIPs:        []string{"198.19.128.1", "198.19.128.2"},
	podIPs:       []string{"198.18.64.2", "198.18.64.3", "198.18.65.2", "198.18.65.3"},
	sourceRanges: []string{"198.18.32.0/24", "198.18.0.0/24", "0.0.0.0/0"},
}

var pools6 = pools{
	clusterIPs:   []string{"2001:db8:19::1", "2001:db8:19::2", "2001:db8:19::3", "2001:db8:19::4"},
	externalIPs:  []string{"2001:db8:18::100", "2001:db8:18::101"},
	lbIPs:        []string{"2001:db8:19::8001", "2001:db8:19::8002"},
	podIPs:       []string{"2001:db8:18:40::2", "2001:db8:18:40::3", "2001:db8:18:41::2", "2001:db8:18:41::3"},
	sourceRanges: []string{"2001:db8:18:20::/64", "2001:db8:18::/64", "::/0"},
}

var (
	namespaces = []string{"a", "b"}
	names      = []string{"s1", "s2", "s3"}
)

func subset(t *rapid.T, label string, from []string) []string {
	var out []string
	for i, s := range from {
		if rapid.Bool().Draw(t, fmt.Sprintf("%s%d", label, i)) {
			out = append(out, s)
		}
	}
	return out
}

// genService draws a Service ns/name with one or two ports.
func genService(t *rapid.T, p pools, ns, name string) *v1.Service {
	clusterIP := rapid.SampledFrom(p.clusterIPs).Draw(t, "clusterIP")
	s := svc(ns, name, clusterIP)
	s.Spec.Type = rapid.SampledFrom([]v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer}).Draw(t, "type")
	nPorts := rapid.IntRange(1, 2).Draw(t, "ports")
	s.Spec.Ports = nil
	for i := range nPorts {
		port := v1.ServicePort{
			Name:     fmt.Sprintf("p%d", 80+i),
			Port:     int32(80 + i),
			Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"),
		}
		if s.Spec.Type != v1.ServiceTypeClusterIP {
			port.NodePort = rapid.SampledFrom([]int32{0, 30001, 30002, 30003}).Draw(t, "nodePort")
		}
		s.Spec.Ports = append(s.Spec.Ports, port)
	}
	s.Spec.ExternalIPs = subset(t, "externalIP", p.externalIPs)
	if s.Spec.Type == v1.ServiceTypeLoadBalancer {
		for _, ip := range subset(t, "lbIP", p.lbIPs) {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
		s.Spec.LoadBalancerSourceRanges = subset(t, "sourceRange", p.sourceRanges)
	}
	if rapid.Bool().Draw(t, "eTPLocal") && (s.Spec.Type != v1.ServiceTypeClusterIP || len(s.Spec.ExternalIPs) > 0) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	if rapid.IntRange(0, 3).Draw(t, "iTPLocal") == 0 {
		internalLocal(s)
	}
	switch rapid.IntRange(0, 3).Draw(t, "affinity") {
	case 1:
		affinity(60)(s)
	case 2:
		affinity(120)(s)
	}
	return s
}

// genSlice draws the EndpointSlice of Service ns/name.
func genSlice(t *rapid.T, p pools, ns, name string) *discovery.EndpointSlice {
	var eps []discovery.Endpoint
	for i, ip := range p.podIPs {
		if !rapid.Bool().Draw(t, fmt.Sprintf("ep%d", i)) {
			continue
		}
		ready := rapid.IntRange(0, 4).Draw(t, "ready") > 0
		terminating := !ready && rapid.Bool().Draw(t, "terminating")
		serving := ready || rapid.Bool().Draw(t, "serving")
		nodeName := rapid.SampledFrom([]string{node, "node-b"}).Draw(t, "node")
		eps = append(eps, discovery.Endpoint{
			Addresses:  []string{ip},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &nodeName,
		})
	}
	addrType := discovery.AddressTypeIPv4
	if netip.MustParseAddr(p.podIPs[0]).Is6() {
		addrType = discovery.AddressTypeIPv6
	}
	var ports []discovery.EndpointPort
	for i := range 2 {
		name := fmt.Sprintf("p%d", 80+i)
		port := int32(rapid.SampledFrom([]int{8080, 8081}).Draw(t, "targetPort"))
		proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")
		ports = append(ports, discovery.EndpointPort{Name: &name, Port: &port, Protocol: &proto})
	}
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name + "-1",
			Labels: map[string]string{discovery.LabelServiceName: name},
		},
		AddressType: addrType,
		Endpoints:   eps,
		Ports:       ports,
	}
}

// genConfig draws a ruleset Config and Options.
func genConfig(t *rapid.T) (ruleset.Config, nftables.Options, pools) {
	cfg, p := config4(), pools4
	if rapid.IntRange(0, 3).Draw(t, "ipv6") == 0 {
		cfg, p = config6(), pools6
	}
	cfg.MasqueradeAll = rapid.IntRange(0, 3).Draw(t, "masqueradeAll") == 0
	if rapid.IntRange(0, 3).Draw(t, "noClusterCIDRs") == 0 {
		cfg.ClusterCIDRs = nil
	}
	if rapid.Bool().Draw(t, "nodePortAddresses") {
		node := netip.MustParseAddr("198.18.0.1")
		if cfg.Family == v1.IPv6Protocol {
			node = netip.MustParseAddr("2001:db8:18::1")
		}
		cfg.NodePortAddresses = []netip.Addr{node}
	} else {
		cfg.NoNodePortAddresses = rapid.IntRange(0, 3).Draw(t, "noNodePortAddresses") == 0
	}
	return cfg, nftables.Options{}, p
}

// change is one event a proxy may see: a Service or EndpointSlice added,
// updated or deleted.
type change struct {
	svc      *v1.Service
	slice    *discovery.EndpointSlice
	ns, name string // for deletes
	delSvc   bool
}

func (c change) apply(w *world) {
	switch {
	case c.svc != nil:
		w.add(c.svc)
	case c.slice != nil:
		w.add(c.slice)
	case c.delSvc:
		w.Svcs.Delete(c.ns, c.name)
	default:
		w.Eps.Delete(c.ns, c.name+"-1")
	}
}

// genChanges draws one to three changes to the Services of the universe.
func genChanges(p pools) *rapid.Generator[[]change] {
	return rapid.Custom(func(t *rapid.T) []change {
		var out []change
		for range rapid.IntRange(1, 3).Draw(t, "changes") {
			ns := rapid.SampledFrom(namespaces).Draw(t, "ns")
			name := rapid.SampledFrom(names).Draw(t, "name")
			c := change{ns: ns, name: name}
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				c.svc = genService(t, p, ns, name)
			case 2, 3:
				c.slice = genSlice(t, p, ns, name)
			case 4:
				c.delSvc = true
			}
			out = append(out, c)
		}
		return out
	})
}

// mutate applies one to three random changes to w.
func mutate(t *rapid.T, w *world, p pools) {
	for _, c := range genChanges(p).Draw(t, "step") {
		c.apply(w)
	}
}

// fullDump is the Dump of a fresh Fake after a full render of rs, plus the
// stale chains still waiting to be deleted (empty).
func fullDump(t fataler, rs *ruleset.Ruleset, opts nftables.Options, stale []string) string {
	fake := knftables.NewFake(nftables.Family(rs.Config().Family), tableName(opts))
	tx := fake.NewTransaction()
	if _, err := nftables.Render(tx, rs, opts, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		tx.Add(&knftables.Chain{Name: name})
	}
	apply(t, fake, tx)
	return canonical(fake.Dump())
}

// TestIncrementalMatchesFull: for random sequences of changes, applying
// RenderChanges to the Fake that holds the old state gives the Fake state of
// a full render of the new Ruleset (plus the flushed chains that wait to be
// deleted), and every transaction is one the kernel would accept (no
// element clash, no reference to a deleted object).
func TestIncrementalMatchesFull(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		w := newWorld(t, cfg)
		old := w.build()
		fake := knftables.NewFake(nftables.Family(cfg.Family), tableName(opts))
		tx := fake.NewTransaction()
		if _, err := nftables.Render(tx, old, opts, nil); err != nil {
			t.Fatal(err)
		}
		apply(t, fake, tx)
		var pending []string
		for range rapid.IntRange(1, 12).Draw(t, "steps") {
			mutate(t, w, p)
			var rs *ruleset.Ruleset
			if rapid.Bool().Draw(t, "update") {
				rs = w.update(old)
			} else {
				rs = w.build()
			}
			if err := nftables.CheckFrontends(rs); err != nil {
				t.Fatal(err)
			}
			var deletable []string
			if rapid.Bool().Draw(t, "delayPassed") {
				deletable = pending
			}
			tx := fake.NewTransaction()
			res, err := nftables.RenderChanges(tx, old, rs, opts, deletable)
			if err != nil {
				t.Fatal(err)
			}
			apply(t, fake, tx)
			for _, name := range res.Stale {
				if c := fake.Table.Chains[name]; c == nil || len(c.Rules) != 0 {
					t.Fatalf("stale chain %s not flushed", name)
				}
			}
			if deletable != nil {
				pending = nil
			}
			pending = append(pending, res.Stale...)
			slices.Sort(pending)
			pending = slices.Compact(pending)

			if diff := cmp.Diff(fullDump(t, rs, opts, pending), canonical(fake.Dump())); diff != "" {
				t.Fatalf("incremental state differs from full render (-full +incremental):\n%s\ntransaction:\n%s", diff, tx)
			}
			// Nothing changed (a Ruleset built again from the same
			// state): nothing to do.
			tx = fake.NewTransaction()
			if _, err := nftables.RenderChanges(tx, rs, w.build(), opts, nil); err != nil || tx.NumOperations() != 0 {
				t.Fatalf("no change gave %d operations (%v):\n%s", tx.NumOperations(), err, tx)
			}
			old = rs
		}
	})
}

// bigWorld is a world of n Services (each with a ClusterIP, every tenth a
// NodePort, two endpoints), built once per size.
type bigWorld struct {
	w    *world
	base *ruleset.Ruleset
}

var (
	bigWorldsMu sync.Mutex
	bigWorlds   = map[int]*bigWorld{}
)

func bigService(i int) (*v1.Service, *discovery.EndpointSlice) {
	name := fmt.Sprintf("svc%05d", i)
	ip := fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)
	var mods []func(*v1.Service)
	if i%10 == 0 {
		mods = append(mods, nodePort(int32(30000+i/10)))
	}
	s := svc("big", name, ip, mods...)
	es := slice("big", name, 8080,
		ep{ip: fmt.Sprintf("198.18.%d.%d", 64+i/250%64, i%250+2), node: node},
		ep{ip: fmt.Sprintf("198.18.%d.%d", 64+(i+1)/250%64, (i+1)%250+2), node: "node-b"})
	return s, es
}

func getBigWorld(tb fataler, n int) *bigWorld {
	bigWorldsMu.Lock()
	defer bigWorldsMu.Unlock()
	if bw := bigWorlds[n]; bw != nil {
		return bw
	}
	w := newWorld(tb, config4())
	for i := range n {
		s, es := bigService(i)
		w.add(s, es)
	}
	bw := &bigWorld{w: w, base: w.build()}
	bigWorlds[n] = bw
	return bw
}

// TestIncrementalSizeIndependent: the transaction for a change to one
// Service is the same, operation for operation, whether the table holds 100
// Services or 10,000.
func TestIncrementalSizeIndependent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 10,000-Service ruleset")
	}
	small, large := getBigWorld(t, 100), getBigWorld(t, 10000)
	p := pools{
		clusterIPs:   []string{"198.19.200.1", "198.19.200.2"},
		externalIPs:  []string{"198.18.0.200", "198.18.0.201"},
		lbIPs:        []string{"198.19.201.1", "198.19.201.2"},
		podIPs:       []string{"198.18.127.2", "198.18.127.3", "198.18.126.2", "198.18.126.3"},
		sourceRanges: pools4.sourceRanges,
	}
	rapid.Check(t, func(t *rapid.T) {
		// Change a Service both worlds hold, or add a new one.
		i := rapid.IntRange(0, 100).Draw(t, "service")
		origSvc, origSlice := bigService(i)
		ns, name := "big", origSvc.Name
		if i == 100 {
			ns, name = "new", "svc"
		}
		var objs []any
		var undo []func(*world)
		if rapid.Bool().Draw(t, "changeService") {
			s := genService(t, p, ns, name)
			for j := range s.Spec.Ports {
				if s.Spec.Ports[j].NodePort != 0 {
					s.Spec.Ports[j].NodePort += 2000 // outside the base range
				}
			}
			objs = append(objs, s)
			undo = append(undo, func(w *world) {
				if i == 100 {
					w.Svcs.Delete(ns, name)
				} else {
					w.add(origSvc)
				}
			})
		}
		if rapid.Bool().Draw(t, "changeSlice") || len(objs) == 0 {
			objs = append(objs, genSlice(t, p, ns, name))
			undo = append(undo, func(w *world) {
				if i == 100 {
					w.Eps.Delete(ns, name+"-1")
				} else {
					w.add(origSlice)
				}
			})
		}
		var txs [2]string
		var ops [2]int
		for k, bw := range []*bigWorld{small, large} {
			bw.w.TB = t
			bw.w.add(objs...)
			rs := bw.w.build()
			for _, u := range undo {
				u(bw.w)
			}
			fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
			tx := fake.NewTransaction()
			if _, err := nftables.RenderChanges(tx, bw.base, rs, nftables.Options{}, nil); err != nil {
				t.Fatal(err)
			}
			txs[k], ops[k] = tx.String(), tx.NumOperations()
		}
		if ops[0] != ops[1] || txs[0] != txs[1] {
			t.Fatalf("100 Services: %d operations, 10,000: %d\n%s", ops[0], ops[1], cmp.Diff(txs[0], txs[1]))
		}
	})
}

var affinityTimeouts = regexp.MustCompile(`timeout [0-9]+s`)

// flaky is a Fake whose next Run fails when failNext is set.
type flaky struct {
	*knftables.Fake
	failNext bool
	runs     int
}

func (f *flaky) Run(ctx context.Context, tx *knftables.Transaction) error {
	f.runs++
	if f.failNext {
		f.failNext = false
		return errors.New("injected failure")
	}
	return f.Fake.Run(ctx, tx)
}

// flakyExecutor is an Executor of cfg's family over flaky Fakes, which it
// returns too (by family, as the Executor opened them), with its clock at
// *now and a drawn first-sync chunk size.
func flakyExecutor(t *rapid.T, cfg ruleset.Config, opts nftables.Options, now *time.Time) (*nftables.Executor, map[knftables.Family]*flaky) {
	fakes := map[knftables.Family]*flaky{}
	ex, err := nftables.NewExecutor(nftables.ExecutorConfig{
		Family:  cfg.Family,
		Options: opts,
		NewInterface: func(f knftables.Family, table string) (knftables.Interface, error) {
			if fakes[f] == nil {
				fakes[f] = &flaky{Fake: knftables.NewFake(f, table)}
			}
			return fakes[f], nil
		},
		Now:            func() time.Time { return *now },
		FirstSyncChunk: rapid.IntRange(-1, 3).Draw(t, "chunk"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ex, fakes
}

// TestExecutor drives the Executor over a Fake through random changes,
// failures and clock steps: after every Sync the table holds exactly the
// Ruleset (plus flushed chains waiting to be deleted), a failed incremental
// sync falls back to a full one at once, and stale chains are deleted once
// the delay has passed.
func TestExecutor(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		now := time.Unix(1e9, 0)
		ex, fakes := flakyExecutor(t, cfg, opts, &now)
		fake := fakes[nftables.Family(cfg.Family)]
		w := newWorld(t, cfg)
		var rs *ruleset.Ruleset
		for step := range rapid.IntRange(1, 10).Draw(t, "steps") {
			mutate(t, w, p)
			if rapid.Bool().Draw(t, "update") {
				rs = w.update(rs)
			} else {
				rs = w.build()
			}
			fail := step > 0 && rapid.IntRange(0, 4).Draw(t, "fail") == 0
			fake.failNext = fail
			now = now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(t, "ms")) * time.Millisecond)
			res, err := ex.Apply(context.Background(), rs)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			wantFull := step == 0 || fail
			if fake.failNext { // nothing to do, so nothing ran
				fake.failNext, wantFull = false, false
			}
			details := res
			if wantFull != res.Full {
				t.Fatalf("step %d: full=%v, want %v (fallback %v)", step, res.Full, wantFull, details.Fallback)
			}
			// Chains waiting to be deleted ask for the Sync that deletes
			// them, no later than the delay.
			if waiting := details.StaleChains > 0; waiting != (res.NextSync > 0) || res.NextSync > nftables.DefaultStaleChainDelay {
				t.Fatalf("step %d: %d stale chains, NextSync %v; want a NextSync in (0, %v] exactly when chains wait", step, details.StaleChains, res.NextSync, nftables.DefaultStaleChainDelay)
			}
			if err := danglingRefs(fake.Fake); err != nil {
				t.Fatal(err)
			}
			// The chains left over are flushed ones, and only those.
			var extra []string
			for name, c := range fake.Table.Chains {
				if len(c.Rules) == 0 && !slices.Contains([]string{"cluster-ips-check", "firewall-check", "nodeport-endpoints-check", "service-endpoints-check", "services", "masquerading", "reject-chain"}, name) {
					extra = append(extra, name)
				}
			}
			if len(extra) > details.StaleChains {
				t.Fatalf("step %d: %d empty chains, %d stale", step, len(extra), details.StaleChains)
			}
			// A full sync adds affinity sets without flushing them, to keep
			// sessions; an existing set then keeps its timeout in the Fake
			// (and in kernels before 6.5). Compare without the timeouts.
			if diff := cmp.Diff(affinityTimeouts.ReplaceAllString(fullDump(t, rs, opts, extra), "timeout"),
				affinityTimeouts.ReplaceAllString(canonical(fake.Dump()), "timeout")); diff != "" {
				t.Fatalf("step %d: table differs from full render (-full +executor):\n%s", step, diff)
			}
		}
		if err := ex.Cleanup(context.Background()); err != nil {
			t.Fatal(err)
		}
		for f, fk := range fakes {
			if len(fk.Tables[f]) != 0 {
				t.Fatalf("table left in %s after Cleanup", f)
			}
		}
		if len(fakes) != 2 {
			t.Fatalf("Cleanup opened %d families, want 2", len(fakes))
		}
	})
}
