package nftables_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// serviceObjects are a Service and its EndpointSlice; nil when absent.
type serviceObjects struct {
	svc   *v1.Service
	slice *discovery.EndpointSlice
}

// universe is a set of Services by "namespace/name".
type universe map[string]serviceObjects

// world feeds u into a fresh world.
func (u universe) world(tb fataler, cfg ruleset.Config) *world {
	helper(tb)
	w := newWorld(tb, cfg)
	for _, key := range slices.Sorted(mapKeys(u)) {
		if o := u[key]; o.svc != nil {
			w.add(o.svc)
		}
		if o := u[key]; o.slice != nil {
			w.add(o.slice)
		}
	}
	return w
}

// partly is prev with the Service ports names rebuilt from the state of w
// (Builder.UpdatePorts): what the table holds when only those ports of a
// change from prev to w's state are written.
func (w *world) partly(prev *ruleset.Ruleset, names []servicemap.PortName) *ruleset.Ruleset {
	helper(w.TB)
	s, _ := w.Svcs.Snapshot()
	e, _ := w.Eps.Snapshot()
	rs, _, warnings := w.Builder.UpdatePorts(prev, s, e, names)
	w.CheckWarnings("UpdatePorts", warnings)
	return rs
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// flushedChains are the chains that tx flushes.
func flushedChains(tx *knftables.Transaction) []string {
	var names []string
	for _, line := range strings.Split(tx.String(), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "flush" && f[1] == "chain" {
			names = append(names, f[4])
		}
	}
	return names
}

// splitHairpin splits a canonical dump into its hairpin-connections
// elements and the rest.
func splitHairpin(dump string) (rest string, hairpin []string) {
	var b strings.Builder
	for _, l := range strings.SplitAfter(dump, "\n") {
		if strings.HasPrefix(l, "add element ") && strings.Contains(l, " hairpin-connections { ") {
			hairpin = append(hairpin, l)
			continue
		}
		b.WriteString(l)
	}
	return b.String(), hairpin
}

// checkChunked applies the chunked changes from the table of old to that of
// new one transaction at a time, and checks after each that the table is
// the full render of old with the Service ports changed so far taken from
// new (plus the chains flushed as stale so far; the hairpin set may hold
// more, see below), and at the end that it is
// the table RenderChanges' one transaction leaves. It returns the Service ports
// of each transaction.
func checkChunked(tb fataler, cfg ruleset.Config, old, new universe, chunk int) [][]servicemap.PortName {
	helper(tb)
	opts := nftables.Options{}
	oldRS := old.world(tb, cfg).build()
	newWorld := new.world(tb, cfg)
	newRS := newWorld.build()
	load := func() *knftables.Fake {
		fake := knftables.NewFake(nftables.Family(cfg.Family), nftables.DefaultTable)
		tx := fake.NewTransaction()
		if _, err := nftables.Render(tx, oldRS, opts, nil); err != nil {
			tb.Fatal(err)
		}
		apply(tb, fake, tx)
		return fake
	}
	one, chunked := load(), load()
	tx := one.NewTransaction()
	want, err := nftables.RenderChanges(tx, oldRS, newRS, opts, nil)
	if err != nil {
		tb.Fatal(err)
	}
	apply(tb, one, tx)

	txs, ports, got, err := nftables.ChunkedChanges(chunked.NewTransaction, oldRS, newRS, opts, nil, chunk)
	if err != nil {
		tb.Fatal(err)
	}
	if len(txs) != len(ports) {
		tb.Fatalf("%d transactions, %d lists of ports", len(txs), len(ports))
	}
	var changedSoFar []servicemap.PortName
	var staleSoFar []string
	for i, tx := range txs {
		apply(tb, chunked, tx)
		changedSoFar = append(changedSoFar, ports[i]...)
		for _, name := range flushedChains(tx) {
			if slices.Contains(got.Stale, name) {
				staleSoFar = append(staleSoFar, name)
			}
		}
		between := newWorld.partly(oldRS, changedSoFar)
		wantRest, wantHairpin := splitHairpin(fullDump(tb, between, opts, staleSoFar))
		gotRest, gotHairpin := splitHairpin(canonical(chunked.Dump()))
		if diff := cmp.Diff(wantRest, gotRest); diff != "" {
			tb.Fatalf("after transaction %d of %d (ports %v), the table is not old with the ports changed so far from new (-want +got):\n%s\n%s", i+1, len(txs), ports[i], diff, tx)
		}
		// The hairpin set's elements, which ports in several transactions
		// may share, are added by the first and deleted by the last: in
		// between, every one needed is there, and none that neither old
		// nor new has.
		_, oldHairpin := splitHairpin(fullDump(tb, oldRS, opts, nil))
		_, newHairpin := splitHairpin(fullDump(tb, newRS, opts, nil))
		for _, e := range wantHairpin {
			if !slices.Contains(gotHairpin, e) {
				tb.Fatalf("after transaction %d of %d (ports %v): %q missing\n%s", i+1, len(txs), ports[i], e, tx)
			}
		}
		for _, e := range gotHairpin {
			if !slices.Contains(oldHairpin, e) && !slices.Contains(newHairpin, e) {
				tb.Fatalf("after transaction %d of %d (ports %v): %q in neither table\n%s", i+1, len(txs), ports[i], e, tx)
			}
		}
	}
	if diff := cmp.Diff(canonical(one.Dump()), canonical(chunked.Dump())); diff != "" {
		tb.Fatalf("after the chunked changes (-one transaction +chunked):\n%s", diff)
	}
	slices.Sort(want.Stale)
	slices.Sort(got.Stale)
	if diff := cmp.Diff(want.Stale, got.Stale); diff != "" {
		tb.Fatalf("stale chains (-one transaction +chunked):\n%s", diff)
	}
	return ports
}

// TestChunkedChangesLarge: a change of 27 Service ports in chunks of 4 is
// applied as transactions of at most 4 ports each, in name order, where the
// ports that share an element go together: two that claim one external IP
// (one takes it over from the other) and the two ports of one Service
// (their cluster IP); every transaction leaves each port as it was or as it
// is to be; the end state is RenderChanges' one transaction's.
func TestChunkedChangesLarge(t *testing.T) {
	old, new := universe{}, universe{}
	for i := range 23 {
		name := fmt.Sprintf("svc%02d", i)
		ip := fmt.Sprintf("198.19.0.%d", 10+i)
		s := svc("ns1", name, ip, nodePort(int32(30000+i)))
		before := slice("ns1", name, 8080, ep{ip: fmt.Sprintf("198.18.64.%d", 10+i), node: node}, ep{ip: "198.18.65.2", node: "node-b"})
		after := slice("ns1", name, 8080, ep{ip: fmt.Sprintf("198.18.66.%d", 10+i), node: node})
		switch {
		case i < 2: // removed
			old["ns1/"+name] = serviceObjects{s, before}
			new["ns1/"+name] = serviceObjects{}
		case i < 5: // added
			old["ns1/"+name] = serviceObjects{}
			new["ns1/"+name] = serviceObjects{s, after}
		default: // endpoints changed
			old["ns1/"+name] = serviceObjects{s, before}
			new["ns1/"+name] = serviceObjects{s, after}
		}
	}
	// ns2/first owns 198.18.0.100:80 until it goes; then ns2/second does.
	first := svc("ns2", "first", "198.19.1.1", externalIPs("198.18.0.100"))
	second := svc("ns2", "second", "198.19.1.2", externalIPs("198.18.0.100"))
	eps := func(name string) *discovery.EndpointSlice {
		return slice("ns2", name, 8080, ep{ip: "198.18.67.2", node: node})
	}
	old["ns2/first"], new["ns2/first"] = serviceObjects{first, eps("first")}, serviceObjects{}
	old["ns2/second"] = serviceObjects{second, eps("second")}
	new["ns2/second"] = serviceObjects{second, slice("ns2", "second", 8080, ep{ip: "198.18.67.3", node: node})}
	// ns3/web has two ports, which share their cluster IP.
	web := svc("ns3", "web", "198.19.2.1")
	web.Spec.Ports = append(web.Spec.Ports, v1.ServicePort{Name: "p81", Port: 81, Protocol: v1.ProtocolTCP})
	webV2 := web.DeepCopy()
	webV2.Spec.ClusterIP, webV2.Spec.ClusterIPs = "198.19.2.2", []string{"198.19.2.2"}
	old["ns3/web"], new["ns3/web"] = serviceObjects{web, nil}, serviceObjects{webV2, nil}

	ports := checkChunked(t, config4(), old, new, 4)

	// ns1/svc20 to svc22 make a transaction of 3: ns2/first and
	// ns2/second must go together, and with them 5 would be too many.
	var sizes []int
	chunkOf := map[string]int{}
	for i, ps := range ports {
		sizes = append(sizes, len(ps))
		for _, p := range ps {
			chunkOf[p.Namespace+"/"+p.Name+":"+p.Port] = i
		}
	}
	if diff := cmp.Diff([]int{4, 4, 4, 4, 4, 3, 4}, sizes); diff != "" {
		t.Errorf("ports per transaction (-want +got):\n%s\n%v", diff, ports)
	}
	if chunkOf["ns2/first:p80"] != chunkOf["ns2/second:p80"] {
		t.Errorf("ns2/first and ns2/second share 198.18.0.100:80 but are in transactions %d and %d", chunkOf["ns2/first:p80"]+1, chunkOf["ns2/second:p80"]+1)
	}
	if chunkOf["ns3/web:p80"] != chunkOf["ns3/web:p81"] {
		t.Errorf("the ports of ns3/web share a cluster IP but are in transactions %d and %d", chunkOf["ns3/web:p80"]+1, chunkOf["ns3/web:p81"]+1)
	}
}

// TestChunkedChangesSmall: a change of no more ports than the chunk, or
// with chunking off, is RenderChanges' one transaction, operation for
// operation.
func TestChunkedChangesSmall(t *testing.T) {
	w := newWorld(t, config4())
	w.add(svc("ns1", "a", "198.19.0.10"), slice("ns1", "a", 8080, ep{ip: "198.18.64.2", node: node}))
	old := w.build()
	w.add(slice("ns1", "a", 8080, ep{ip: "198.18.64.3", node: node}), svc("ns1", "b", "198.19.0.11"))
	new := w.update(old)
	fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
	one := fake.NewTransaction()
	if _, err := nftables.RenderChanges(one, old, new, nftables.Options{}, []string{"service-gone"}); err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{-1, 0, 2, 100} {
		txs, _, _, err := nftables.ChunkedChanges(fake.NewTransaction, old, new, nftables.Options{}, []string{"service-gone"}, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if len(txs) != 1 {
			t.Fatalf("chunk %d: %d transactions, want 1", chunk, len(txs))
		}
		if diff := cmp.Diff(one.String(), txs[0].String()); diff != "" {
			t.Errorf("chunk %d (-RenderChanges +chunked):\n%s", chunk, diff)
		}
	}
}

// TestChunkedChangesMatchFull: for random Services (sharing cluster IPs,
// external IPs and node ports) and random changes to them, chunks of 1 to
// 3 ports each leave the table as old with the Services changed so far
// taken from new, and end where RenderChanges' one transaction does.
func TestChunkedChangesMatchFull(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, _, p := genConfig(t)
		old, new := universe{}, universe{}
		for _, ns := range namespaces {
			for _, name := range names {
				key := ns + "/" + name
				var o serviceObjects
				if rapid.IntRange(0, 3).Draw(t, "exists") > 0 {
					o = serviceObjects{genService(t, p, ns, name), genSlice(t, p, ns, name)}
				}
				old[key], new[key] = o, o
				switch rapid.IntRange(0, 4).Draw(t, "change") {
				case 1:
					new[key] = serviceObjects{genService(t, p, ns, name), o.slice}
				case 2:
					new[key] = serviceObjects{o.svc, genSlice(t, p, ns, name)}
				case 3:
					new[key] = serviceObjects{}
				}
			}
		}
		checkChunked(t, cfg, old, new, rapid.IntRange(1, 3).Draw(t, "chunk"))
	})
}
