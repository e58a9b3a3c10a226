package nftables_test

import (
	"math/big"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// genFlatPacket draws the first packet of a flow towards the addresses and
// ports of p, from a pod, a client, the node or a load-balancer IP.
func genFlatPacket(t *rapid.T, cfg ruleset.Config, p pools) trace.Packet {
	node, loopback, client, unallocated := "198.18.0.1", "127.0.0.1", "198.18.32.5", "198.19.200.1"
	if cfg.Family == v1.IPv6Protocol {
		node, loopback, client, unallocated = "2001:db8:18::1", "::1", "2001:db8:18:20::5", "2001:db8:19::c8:1"
	}
	dsts := append(append(append([]string{node, loopback, unallocated}, p.clusterIPs...), p.externalIPs...), p.lbIPs...)
	dst := netip.MustParseAddr(rapid.SampledFrom(dsts).Draw(t, "dst"))
	port := uint16(rapid.SampledFrom([]int{80, 81, 82, 30001, 30002, 30003}).Draw(t, "port"))
	fromNode := rapid.IntRange(0, 3).Draw(t, "fromNode") == 0
	srcs := append([]string{client, p.lbIPs[0]}, p.podIPs...)
	if fromNode {
		srcs = []string{node, p.lbIPs[0]}
	}
	src := netip.MustParseAddr(rapid.SampledFrom(srcs).Draw(t, "src"))
	if dst.IsLoopback() {
		src, fromNode = dst, true
	}
	return trace.Packet{
		Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"),
		Src:      netip.AddrPortFrom(src, 40000),
		Dst:      netip.AddrPortFrom(dst, port),
		FromNode: fromNode,
		ToNode:   dst == netip.MustParseAddr(node) || dst.IsLoopback(),
	}
}

// traceResult is what trace.Trace says, in flatResult's terms: every
// target with its masquerading, each with share exactly 1/N.
func traceResult(t *rapid.T, rs *ruleset.Ruleset, p trace.Packet) flatResult {
	o := trace.Trace(rs, p, trace.Options{RejectUnknownPorts: true, DropUnallocated: true})
	res := flatResult{Result: o.Result}
	for _, c := range o.Targets {
		if c.Share.Cmp(big.NewRat(1, int64(len(o.Targets)))) != 0 {
			t.Fatalf("trace: share %v of %d targets", c.Share, len(o.Targets))
		}
		res.Targets = append(res.Targets, flatTarget{Endpoint: c.Endpoint, Masquerade: c.Masquerade})
	}
	return res
}

// TestFlatMatchesTrace: for random clusters and packets, the flat layout's
// table, evaluated rule by rule, does what trace.Trace (the specification
// of every backend) says: the same result, the same targets in the same
// order, each reached by exactly one numgen value of N (share 1/N), and
// the same masquerading. ClientIP affinity, which the flat layout does not
// render, is the one thing left out.
func TestFlatMatchesTrace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		if rapid.Bool().Draw(t, "serviceCIDRs") {
			cidr := "198.19.0.0/16"
			if cfg.Family == v1.IPv6Protocol {
				cidr = "2001:db8:19::/108"
			}
			cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(cidr)}
		}
		w := newWorld(t, cfg)
		mutate(t, w, p)
		mutate(t, w, p)
		rs := w.build()
		ev := newFlatEval(nftables.FlatTable(rs, opts))
		for range 20 {
			pk := genFlatPacket(t, cfg, p)
			if diff := cmp.Diff(traceResult(t, rs, pk), ev.packet(pk), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
				t.Fatalf("%v: flat layout differs from trace (-trace +flat):\n%s", pk, diff)
			}
		}
	})
}

// TestFlatIncrementalMatchesFull: after random changes, RenderFlatChanges
// applied to a Fake that holds the old table gives what RenderFlat of the
// new Ruleset gives, in transactions the kernel would accept.
func TestFlatIncrementalMatchesFull(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		w := newWorld(t, cfg)
		mutate(t, w, p)
		old := w.build()
		family := nftables.Family(cfg.Family)
		fake := knftables.NewFake(family, nftables.DefaultFlatTable)
		tx := fake.NewTransaction()
		st, _ := nftables.RenderFlat(tx, old, opts)
		apply(t, fake, tx)
		for range rapid.IntRange(1, 4).Draw(t, "syncs") {
			mutate(t, w, p)
			next := w.update(old)
			tx := fake.NewTransaction()
			ch, err := nftables.RenderFlatChanges(tx, st, old, next)
			if err != nil {
				t.Fatal(err)
			}
			if ch.ElementsOnly && hasNonElementOps(tx) {
				t.Fatalf("ElementsOnly, but the transaction changes more:\n%s", tx)
			}
			apply(t, fake, tx)
			want := knftables.NewFake(family, nftables.DefaultFlatTable)
			wtx := want.NewTransaction()
			nftables.RenderFlat(wtx, next, opts)
			apply(t, want, wtx)
			if diff := cmp.Diff(canonical(want.Dump()), canonical(fake.Dump())); diff != "" {
				t.Fatalf("incremental differs from full (-full +incremental):\n%s\ntransaction:\n%s", diff, tx)
			}
			old = next
		}
	})
}

// hasNonElementOps reports whether tx does anything but add or delete
// elements.
func hasNonElementOps(tx *knftables.Transaction) bool {
	for _, line := range strings.Split(strings.TrimSpace(tx.String()), "\n") {
		if line != "" && !strings.HasPrefix(line, "add element ") && !strings.HasPrefix(line, "delete element ") {
			return true
		}
	}
	return false
}
