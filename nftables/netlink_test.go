package nftables_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
	"github.com/svcproxy/svcproxy/ruleset"
)

// TestNetlinkEncodesIncrementalChanges: every transaction that
// RenderChanges makes of random changes is one the netlink path encodes,
// so that a rule, set or element of a new shape that the renderer writes
// fails here, rather than sending every incremental sync through nft.
func TestNetlinkEncodesIncrementalChanges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		opts.Table = rapid.SampledFrom([]string{"", "svcproxy"}).Draw(t, "table")
		fake := knftables.NewFake(nftables.Family(cfg.Family), tableName(opts))
		w := newWorld(t, cfg)
		old := w.build()
		var pending []string // stale chains, flushed, to delete
		for range rapid.IntRange(1, 12).Draw(t, "steps") {
			mutate(t, w, p)
			var rs *ruleset.Ruleset
			if rapid.Bool().Draw(t, "update") {
				rs = w.update(old)
			} else {
				rs = w.build()
			}
			var deletable []string
			if rapid.Bool().Draw(t, "delayPassed") {
				deletable = pending
			}
			tx := fake.NewTransaction()
			res, msgs, err := nftables.NetlinkChanges(tx, old, rs, opts, deletable)
			if err != nil {
				t.Fatalf("incremental transaction not encoded for netlink: %v\n%s", err, tx)
			}
			if msgs < tx.NumOperations() {
				t.Fatalf("%d netlink messages for %d operations:\n%s", msgs, tx.NumOperations(), tx)
			}
			if deletable != nil {
				pending = nil
			}
			pending = append(pending, res.Stale...)
			slices.Sort(pending)
			pending = slices.Compact(pending)
			old = rs
		}
	})
}

// TestNetlinkEncodesFirstSyncChunks: the chunks of a first sync after the
// first, which an Executor sends over netlink, are encoded for netlink.
func TestNetlinkEncodesFirstSyncChunks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		opts.Table = rapid.SampledFrom([]string{"", "svcproxy"}).Draw(t, "table")
		w := newWorld(t, cfg)
		for range rapid.IntRange(1, 6).Draw(t, "changes") {
			mutate(t, w, p)
		}
		rs := w.build()
		chunk := rapid.IntRange(1, 3).Draw(t, "chunk")
		if n, err := nftables.NetlinkFirstSync(rs, opts, chunk); err != nil {
			t.Fatalf("first sync in chunks of %d (%d chunks) not encoded for netlink: %v", chunk, n, err)
		}
	})
}

// TestNetlinkEncodesGoldenChanges: the first sync of each golden case in
// chunks of one Service port, and the incremental transactions between an
// empty table and it, both ways, then the deletion of the stale chains, are
// encoded for netlink.
func TestNetlinkEncodesGoldenChanges(t *testing.T) {
	deleted, chunked := 0, 0
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			rs := c.ruleset(t)
			n, err := nftables.NetlinkFirstSync(rs, c.opts, 1)
			if err != nil {
				t.Fatalf("first sync in %d chunks: %v", n, err)
			}
			chunked += n - 1
			empty := newWorld(t, rs.Config()).build()
			fake := knftables.NewFake(nftables.Family(rs.Config().Family), tableName(c.opts))
			var stale []string
			for _, step := range []struct {
				what     string
				old, new *ruleset.Ruleset
			}{
				{"every Service added", empty, rs},
				{"every Service removed", rs, empty},
				{"stale chains deleted", empty, empty},
				{"added again", empty, rs},
			} {
				tx := fake.NewTransaction()
				res, msgs, err := nftables.NetlinkChanges(tx, step.old, step.new, c.opts, stale)
				if err != nil {
					t.Fatalf("%s: not encoded for netlink: %v\n%s", step.what, err, tx)
				}
				if msgs < tx.NumOperations() || step.what == "every Service added" && msgs == 0 {
					t.Fatalf("%s: %d netlink messages for %d operations:\n%s", step.what, msgs, tx.NumOperations(), tx)
				}
				stale = res.Stale
				deleted += len(res.Deleted)
			}
		})
	}
	if deleted == 0 || chunked == 0 {
		t.Errorf("%d chains deleted, %d chunks after the first: some of the netlink path went untested", deleted, chunked)
	}
}

// TestEncodeRuleErrors: statements outside the grammar of the netlink
// encoder, and values of the other family, are refused, not encoded as
// something else.
func TestEncodeRuleErrors(t *testing.T) {
	v4, v6 := knftables.IPv4Family, knftables.IPv6Family
	accept := model.Verdict{Kind: "accept"}
	tests := []struct {
		family knftables.Family
		stmts  []model.Stmt
	}{
		{v4, stmts(model.CtNew{}, model.Jump("firewall-check"))},
		{v4, stmts(model.MarkXor{Bits: 0x4000})},
		{v4, stmts(model.Masquerade{})},
		{v4, stmts(model.Reject)},
		{v4, stmts(model.Verdict{Kind: "continue"})},
		{v4, stmts(model.Verdict{Kind: "jump"})},
		{v4, stmts(model.Verdict{Kind: "drop", Chain: "a"})},
		{v4, stmts(model.DNATMap{Family: model.IPv4, Key: []model.Expr{model.IPDaddr}, Map: "m"})},
		// A named set is only looked up, not negated, and only by one address.
		{v4, stmts(model.InSet{Key: []model.Expr{model.IPSaddr}, Set: "s", Neg: true}, model.Drop)},
		{v4, stmts(model.InSet{Key: []model.Expr{model.IPDaddr, model.L4Proto, model.THDport}, Set: "s"}, model.Drop)},
		{v4, stmts(model.InSet{Key: []model.Expr{model.THDport}, Set: "s"}, model.Drop)},
		{v4, stmts(anyOf(model.IPSaddr, false), model.Drop)},
		{v4, stmts(model.Equal{Field: model.Mark, Value: model.Int(1)}, accept)},
		{v4, stmts(model.Equal{Field: model.THDport, Value: model.Port(80)}, accept)},
		// Addresses of the other family.
		{v4, stmts(is(model.IPSaddr, false, "fd00::1"), model.Jump("a"))},
		{v4, stmts(is(model.IPDaddr, false, "2001:db8::/32"), model.Drop)},
		{v4, stmts(anyOf(model.IPSaddr, true, "10.0.0.0/8", "fd00::/8"), model.Drop)},
		{v4, stmts(is(model.IP6Saddr, false, "fd00::1"), model.Jump("a"))},
		{v4, stmts(is(model.IPSaddr, false, "::ffff:10.0.0.1"), model.Jump("a"))},
		{v4, stmts(model.DNATTo{To: netip.MustParseAddrPort("[fd00::1]:80")})},
		{v6, stmts(is(model.IP6Saddr, false, "10.0.0.1"), model.Jump("a"))},
		{v6, stmts(anyOf(model.IP6Saddr, true, "10.0.0.0/8", "11.0.0.0/8"), model.Drop)},
		{v6, stmts(is(model.IPSaddr, false, "10.0.0.1"), model.Jump("a"))},
		{v6, stmts(model.Equal{Field: model.IP6Saddr, Value: model.Addr(netip.MustParseAddr("fe80::1%eth0"))}, model.Jump("a"))},
		{v6, stmts(model.DNATTo{To: netip.MustParseAddrPort("1.2.3.4:80")})},
		{v6, stmts(model.UpdateSet{Set: "s", Field: model.IPSaddr})},
		{v4, stmts(model.UpdateSet{Set: "s", Field: model.IPDaddr})},
		// Protocols.
		{v4, stmts(model.DportEq{Proto: 1, Port: 80}, accept)},
		{v4, stmts(model.Equal{Field: model.L4Proto, Value: model.Proto(1)}, accept)},
		{v4, stmts(model.Equal{Field: model.L4Proto, Value: model.Proto(6), Neg: true}, accept)},
		{v4, stmts(model.Equal{Field: model.L4Proto, Value: model.Addr(netip.MustParseAddr("10.0.0.1"))}, accept)},
		{v4, stmts(model.FibLocal{}, model.Jump("a"))},
		// numgen maps.
		{v4, stmts(model.NumgenGoto{})},
		// Nothing after a verdict.
		{v4, stmts(model.NumgenGoto{Chains: []string{"a", "b"}}, accept)},
		{v4, stmts(model.Drop, accept)},
		{v4, stmts(model.Jump("a"), model.DportEq{Proto: 6, Port: 80})},
	}
	for _, tc := range tests {
		if exprs, err := nftables.EncodeRule(tc.family, tc.stmts); err == nil {
			t.Errorf("%s %q: encoded as %s, want an error", tc.family, model.Rule{Stmts: tc.stmts}, exprKinds(exprs))
		}
	}
}

// stmts is the statements of a rule.
func stmts(s ...model.Stmt) []model.Stmt { return s }

// addrData are addresses, or with a length networks.
func addrData(ss []string) []model.Datum {
	ds := make([]model.Datum, len(ss))
	for i, s := range ss {
		if strings.Contains(s, "/") {
			ds[i] = model.Network(netip.MustParsePrefix(s))
		} else {
			ds[i] = model.Addr(netip.MustParseAddr(s))
		}
	}
	return ds
}

// anyOf matches f with an anonymous set of addresses or networks.
func anyOf(f model.Field, neg bool, ss ...string) model.AddrIn {
	return model.AddrIn{Field: f, Values: addrData(ss), Braces: true, Neg: neg}
}

// is compares f with one address or network.
func is(f model.Field, neg bool, s string) model.AddrIn {
	return model.AddrIn{Field: f, Values: addrData([]string{s}), Neg: neg}
}

// exprKinds names the types of exprs.
func exprKinds(exprs []nftnl.Expr) string {
	s := make([]string, len(exprs))
	for i, e := range exprs {
		s[i] = strings.TrimPrefix(fmt.Sprintf("%T", e), "nftnl.")
	}
	return "[" + strings.Join(s, " ") + "]"
}

// The user data nft 1.0.6 stores with the anonymous sets of these rules
// (nft --debug=mnl): key byte order, and for `saddr { … }` merged elements
// and the typeof of the key; for numgen maps the key's host byte order and
// the data's typeof, verdict.
var (
	nftSaddrUdata4 = []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 12, 0, 0, 0, 1, 4, 11, 0, 0, 0}
	nftSaddrUdata6 = []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 13, 0, 0, 0, 1, 4, 8, 0, 0, 0}
	nftNumgenUdata = []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 4, 8, 0, 4, 1, 0, 0, 0, 1, 0, 6, 4, 0, 0, 0, 0}
)

// compareExprs compares encoded expressions; the set id of a Lookup is
// the batch's to give.
var compareExprs = cmpopts.IgnoreUnexported(nftnl.Lookup{})

func nlAddr(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

// ivEnd, ivStart and ivOpen are interval set elements.
func ivEnd(a string) nftnl.Element   { return nftnl.Element{Key: nlAddr(a), IntervalEnd: true} }
func ivStart(a string) nftnl.Element { return nftnl.Element{Key: nlAddr(a)} }
func ivOpen(a string) nftnl.Element  { return nftnl.Element{Key: nlAddr(a), IntervalOpen: true} }

// saddrSet is what nft makes of `ip|ip6 saddr [!=] { … }`: a load of the
// source address and a lookup in an anonymous interval set.
func saddrSet(v6, invert bool, size uint32, elems ...nftnl.Element) []nftnl.Expr {
	load := nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseNetwork, Offset: 12, Len: 4}
	set := &nftnl.Set{
		Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetInterval,
		KeyType: nftnl.TypeIPv4Addr, KeyLen: 4, Userdata: nftSaddrUdata4,
		Elements: elems, Size: size,
	}
	if v6 {
		load.Offset, load.Len = 8, 16
		set.KeyType, set.KeyLen, set.Userdata = nftnl.TypeIPv6Addr, 16, nftSaddrUdata6
	}
	return []nftnl.Expr{load, nftnl.Lookup{Sreg: nftnl.Reg1, Anonymous: set, Invert: invert}}
}

func nlVerdict(code int32, chain string) nftnl.Expr {
	return nftnl.VerdictExpr{Code: code, Chain: chain}
}

// TestEncodeRulePrefixesAndIntervals: addresses, prefixes and sets of them
// are encoded as nft 1.0.6 encodes them: a comparison of the whole bytes of
// a prefix, a mask for the others, and for a set of several an anonymous
// interval set whose ranges are sorted and merged, each a start and an end
// element (the address after it), after an end element at the zero
// address; a range up to the last address has no end but a start flagged
// interval-open, and the set is declared one element larger.
func TestEncodeRulePrefixesAndIntervals(t *testing.T) {
	v4, v6 := knftables.IPv4Family, knftables.IPv6Family
	drop := nlVerdict(nftnl.VerdictDrop, "")
	jumpX := nlVerdict(nftnl.VerdictJump, "x")
	cmp4 := func(op uint32, data ...byte) nftnl.Expr { return nftnl.Cmp{Sreg: nftnl.Reg1, Op: op, Data: data} }
	load := func(offset, n uint32) nftnl.Expr {
		return nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseNetwork, Offset: offset, Len: n}
	}
	tests := []struct {
		family knftables.Family
		rule   string
		stmts  []model.Stmt
		want   []nftnl.Expr
	}{
		{v4, "ip saddr != { 10.0.0.0/8 , 10.1.0.0/16 , 11.0.0.0/25 , 11.0.0.128/25 } drop", stmts(anyOf(model.IPSaddr, true, "10.0.0.0/8", "10.1.0.0/16", "11.0.0.0/25", "11.0.0.128/25"), model.Verdict{Kind: "drop"}),
			append(saddrSet(false, true, 0, ivEnd("0.0.0.0"), ivStart("10.0.0.0"), ivEnd("11.0.1.0")), drop)},
		{v4, "ip saddr != { 0.0.0.0/0 , 10.0.0.0/8 } drop", stmts(anyOf(model.IPSaddr, true, "0.0.0.0/0", "10.0.0.0/8"), model.Verdict{Kind: "drop"}),
			append(saddrSet(false, true, 2, ivOpen("0.0.0.0")), drop)},
		{v4, "ip saddr != { 10.0.0.0/8 , 255.255.255.0/24 } drop", stmts(anyOf(model.IPSaddr, true, "10.0.0.0/8", "255.255.255.0/24"), model.Verdict{Kind: "drop"}),
			append(saddrSet(false, true, 5, ivEnd("0.0.0.0"), ivStart("10.0.0.0"), ivEnd("11.0.0.0"), ivOpen("255.255.255.0")), drop)},
		// Out of order, touching, and addresses.
		{v4, "ip saddr { 10.0.1.0/24 , 10.0.0.0/24 , 10.0.3.0/24 } goto x", stmts(anyOf(model.IPSaddr, false, "10.0.1.0/24", "10.0.0.0/24", "10.0.3.0/24"), model.Goto("x")),
			append(saddrSet(false, false, 0, ivEnd("0.0.0.0"), ivStart("10.0.0.0"), ivEnd("10.0.2.0"), ivStart("10.0.3.0"), ivEnd("10.0.4.0")),
				nlVerdict(nftnl.VerdictGoto, "x"))},
		{v4, "ip saddr != { 198.18.32.0/24 , 198.19.128.1 , 198.19.128.2 } drop", stmts(anyOf(model.IPSaddr, true, "198.18.32.0/24", "198.19.128.1", "198.19.128.2"), model.Verdict{Kind: "drop"}),
			append(saddrSet(false, true, 0, ivEnd("0.0.0.0"), ivStart("198.18.32.0"), ivEnd("198.18.33.0"), ivStart("198.19.128.1"), ivEnd("198.19.128.3")), drop)},
		// From the zero address: no end element first.
		{v4, "ip saddr { 0.0.0.0/8 , 10.0.0.0/8 } drop", stmts(anyOf(model.IPSaddr, false, "0.0.0.0/8", "10.0.0.0/8"), model.Verdict{Kind: "drop"}),
			append(saddrSet(false, false, 0, ivStart("0.0.0.0"), ivEnd("1.0.0.0"), ivStart("10.0.0.0"), ivEnd("11.0.0.0")), drop)},
		{v4, "ip saddr { 10.0.0.0/8 , 255.255.255.255 } drop", stmts(anyOf(model.IPSaddr, false, "10.0.0.0/8", "255.255.255.255"), model.Verdict{Kind: "drop"}),
			append(saddrSet(false, false, 5, ivEnd("0.0.0.0"), ivStart("10.0.0.0"), ivEnd("11.0.0.0"), ivOpen("255.255.255.255")), drop)},
		// Prefixes and addresses.
		{v4, "ip saddr 10.0.0.0/8 jump x", stmts(is(model.IPSaddr, false, "10.0.0.0/8"), model.Jump("x")), []nftnl.Expr{load(12, 1), cmp4(nftnl.CmpEq, 0x0a), jumpX}},
		{v4, "ip saddr 10.16.0.0/12 jump x", stmts(is(model.IPSaddr, false, "10.16.0.0/12"), model.Jump("x")), []nftnl.Expr{
			load(12, 4),
			nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: []byte{0xff, 0xf0, 0, 0}},
			cmp4(nftnl.CmpEq, 0x0a, 0x10, 0, 0), jumpX,
		}},
		{v4, "ip saddr != 198.18.64.0/18 jump x", stmts(is(model.IPSaddr, true, "198.18.64.0/18"), model.Jump("x")), []nftnl.Expr{
			load(12, 4),
			nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: []byte{0xff, 0xff, 0xc0, 0}},
			cmp4(nftnl.CmpNeq, 198, 18, 64, 0), jumpX,
		}},
		{v4, "ip daddr 198.19.0.1 jump x", stmts(is(model.IPDaddr, false, "198.19.0.1"), model.Jump("x")), []nftnl.Expr{load(16, 4), cmp4(nftnl.CmpEq, 198, 19, 0, 1), jumpX}},
		{v4, "ip saddr 198.18.64.2 jump x", stmts(is(model.IPSaddr, false, "198.18.64.2"), model.Jump("x")), []nftnl.Expr{load(12, 4), cmp4(nftnl.CmpEq, 198, 18, 64, 2), jumpX}},
		// A set of one is a plain comparison.
		{v4, "ip saddr != { 198.18.32.0/24 } drop", stmts(anyOf(model.IPSaddr, true, "198.18.32.0/24"), model.Verdict{Kind: "drop"}), []nftnl.Expr{load(12, 3), cmp4(nftnl.CmpNeq, 198, 18, 32), drop}},
		{v4, "ip saddr != { 0.0.0.0/0 } drop", stmts(anyOf(model.IPSaddr, true, "0.0.0.0/0"), model.Verdict{Kind: "drop"}), []nftnl.Expr{
			load(12, 4),
			nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: []byte{0, 0, 0, 0}},
			cmp4(nftnl.CmpNeq, 0, 0, 0, 0), drop,
		}},
		// IPv6.
		{v6, "ip6 saddr != { 2001:db8:18:20::/64 , ::/0 } drop", stmts(anyOf(model.IP6Saddr, true, "2001:db8:18:20::/64", "::/0"), model.Verdict{Kind: "drop"}),
			append(saddrSet(true, true, 2, ivOpen("::")), drop)},
		{v6, "ip6 saddr != { 2001:db8:18:20::/64 , 2001:db8:19::8001 } drop", stmts(anyOf(model.IP6Saddr, true, "2001:db8:18:20::/64", "2001:db8:19::8001"), model.Verdict{Kind: "drop"}),
			append(saddrSet(true, true, 0, ivEnd("::"), ivStart("2001:db8:18:20::"), ivEnd("2001:db8:18:21::"),
				ivStart("2001:db8:19::8001"), ivEnd("2001:db8:19::8002")), drop)},
		{v6, "ip6 saddr 2001:db8:18::/48 jump x", stmts(is(model.IP6Saddr, false, "2001:db8:18::/48"), model.Jump("x")), []nftnl.Expr{load(8, 6), cmp4(nftnl.CmpEq, 0x20, 0x01, 0x0d, 0xb8, 0, 0x18), jumpX}},
		{v6, "ip6 saddr != 2001:db8:18:40::/58 jump x", stmts(is(model.IP6Saddr, true, "2001:db8:18:40::/58"), model.Jump("x")), []nftnl.Expr{
			load(8, 16),
			nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0}},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpNeq, Data: nlAddr("2001:db8:18:40::")}, jumpX,
		}},
		{v6, "ip6 daddr 2001:db8:19::1 jump x", stmts(is(model.IP6Daddr, false, "2001:db8:19::1"), model.Jump("x")), []nftnl.Expr{load(24, 16), nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: nlAddr("2001:db8:19::1")}, jumpX}},
		{v6, "ip6 saddr { 2001:db8:18:40::/64 } jump x", stmts(anyOf(model.IP6Saddr, false, "2001:db8:18:40::/64"), model.Jump("x")), []nftnl.Expr{load(8, 8), nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: nlAddr("2001:db8:18:40::")[:8]}, jumpX}},
	}
	for _, tc := range tests {
		t.Run(string(tc.family)+" "+tc.rule, func(t *testing.T) {
			if text := (model.Rule{Stmts: tc.stmts}).String(); text != tc.rule {
				t.Fatalf("statements print as %q", text)
			}
			got, err := nftables.EncodeRule(tc.family, tc.stmts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, compareExprs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodeRuleStatements: each statement of the encoder's grammar, as
// nft 1.0.6 encodes it.
func TestEncodeRuleStatements(t *testing.T) {
	v4, v6 := knftables.IPv4Family, knftables.IPv6Family
	l4proto := func(p byte) []nftnl.Expr {
		return []nftnl.Expr{
			nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{p}},
		}
	}
	dport := func(p byte, port uint16) []nftnl.Expr {
		return append(l4proto(p),
			nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseTransport, Offset: 2, Len: 2},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.BigEndian.AppendUint16(nil, port)})
	}
	dnat := func(f nftnl.Family, a string, port uint16) []nftnl.Expr {
		return []nftnl.Expr{
			nftnl.Immediate{Dreg: nftnl.Reg1, Data: nlAddr(a)},
			nftnl.Immediate{Dreg: nftnl.Reg2, Data: binary.BigEndian.AppendUint16(nil, port)},
			nftnl.DNAT{Family: f, RegAddr: nftnl.Reg1, RegProto: nftnl.Reg2},
		}
	}
	saddr4 := nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseNetwork, Offset: 12, Len: 4}
	saddr6 := nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseNetwork, Offset: 8, Len: 16}
	goTo := func(key uint32, chain string) nftnl.Element {
		return nftnl.Element{Key: binary.NativeEndian.AppendUint32(nil, key), Verdict: &nftnl.Verdict{Code: nftnl.VerdictGoto, Chain: chain}}
	}
	numgen := func(elems ...nftnl.Element) []nftnl.Expr {
		return []nftnl.Expr{
			nftnl.Numgen{Dreg: nftnl.Reg1, Modulus: uint32(len(elems))},
			nftnl.Lookup{Sreg: nftnl.Reg1, IsMap: true, Anonymous: &nftnl.Set{
				Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetMap,
				KeyType: nftnl.TypeInteger, KeyLen: 4, DataType: nftnl.TypeVerdict,
				Userdata: nftNumgenUdata, Elements: elems,
			}},
		}
	}
	tests := []struct {
		family knftables.Family
		rule   string
		stmts  []model.Stmt
		want   []nftnl.Expr
	}{
		{v4, "tcp dport 80 accept", stmts(model.DportEq{Proto: 6, Port: 80}, model.Verdict{Kind: "accept"}), append(dport(6, 80), nlVerdict(nftnl.VerdictAccept, ""))},
		{v4, "udp dport 53 return", stmts(model.DportEq{Proto: 17, Port: 53}, model.Verdict{Kind: "return"}), append(dport(17, 53), nlVerdict(nftnl.VerdictReturn, ""))},
		{v6, "sctp dport 9 drop", stmts(model.DportEq{Proto: 132, Port: 9}, model.Verdict{Kind: "drop"}), append(dport(132, 9), nlVerdict(nftnl.VerdictDrop, ""))},
		{v4, "ip daddr 198.19.0.1 tcp dport 80 ip saddr != 198.18.64.0/18 jump mark-for-masquerade", stmts(is(model.IPDaddr, false, "198.19.0.1"), model.DportEq{Proto: 6, Port: 80}, is(model.IPSaddr, true, "198.18.64.0/18"), model.Jump("mark-for-masquerade")), slices.Concat(
			[]nftnl.Expr{
				nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseNetwork, Offset: 16, Len: 4},
				nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: nlAddr("198.19.0.1")},
			},
			dport(6, 80),
			[]nftnl.Expr{
				saddr4,
				nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: []byte{0xff, 0xff, 0xc0, 0}},
				nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpNeq, Data: nlAddr("198.18.64.0")},
				nlVerdict(nftnl.VerdictJump, "mark-for-masquerade"),
			})},
		{v4, "meta l4proto udp dnat to 198.18.64.2:8080", stmts(model.Equal{Field: model.L4Proto, Value: model.Proto(17)}, model.DNATTo{To: netip.MustParseAddrPort("198.18.64.2:8080")}), append(l4proto(17), dnat(nftnl.IPv4, "198.18.64.2", 8080)...)},
		{v4, "dnat to 198.18.64.2:53", stmts(model.DNATTo{To: netip.MustParseAddrPort("198.18.64.2:53")}), dnat(nftnl.IPv4, "198.18.64.2", 53)},
		{v6, "meta l4proto sctp dnat to [2001:db8:18:40::2]:8080", stmts(model.Equal{Field: model.L4Proto, Value: model.Proto(132)}, model.DNATTo{To: netip.MustParseAddrPort("[2001:db8:18:40::2]:8080")}), append(l4proto(132), dnat(nftnl.IPv6, "2001:db8:18:40::2", 8080)...)},
		// RTN_LOCAL, in host byte order.
		{v4, "fib saddr type local jump mark-for-masquerade", stmts(model.FibLocal{Saddr: true}, model.Jump("mark-for-masquerade")), []nftnl.Expr{
			nftnl.FibSaddrType{Dreg: nftnl.Reg1},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.NativeEndian.AppendUint32(nil, 2)},
			nlVerdict(nftnl.VerdictJump, "mark-for-masquerade"),
		}},
		{v4, "numgen random mod 2 vmap { 0 : goto endpoint-a , 1 : goto endpoint-b }", stmts(model.NumgenGoto{Chains: []string{"endpoint-a", "endpoint-b"}}), numgen(goTo(0, "endpoint-a"), goTo(1, "endpoint-b"))},
		{v6, "numgen random mod 3 vmap { 0 : goto a , 1 : goto b , 2 : goto c }", stmts(model.NumgenGoto{Chains: []string{"a", "b", "c"}}), numgen(goTo(0, "a"), goTo(1, "b"), goTo(2, "c"))},
		{v4, "update @affinity-x { ip saddr }", stmts(model.UpdateSet{Set: "affinity-x", Field: model.IPSaddr}), []nftnl.Expr{saddr4, nftnl.DynsetUpdate{Sreg: nftnl.Reg1, Set: "affinity-x"}}},
		{v6, "update @affinity-x { ip6 saddr }", stmts(model.UpdateSet{Set: "affinity-x", Field: model.IP6Saddr}), []nftnl.Expr{saddr6, nftnl.DynsetUpdate{Sreg: nftnl.Reg1, Set: "affinity-x"}}},
		{v4, "ip saddr @affinity-x goto endpoint-x", stmts(model.InSet{Key: []model.Expr{model.IPSaddr}, Set: "affinity-x"}, model.Goto("endpoint-x")), []nftnl.Expr{saddr4, nftnl.Lookup{Sreg: nftnl.Reg1, Set: "affinity-x"}, nlVerdict(nftnl.VerdictGoto, "endpoint-x")}},
		{v6, "ip6 saddr @affinity-x goto endpoint-x", stmts(model.InSet{Key: []model.Expr{model.IP6Saddr}, Set: "affinity-x"}, model.Goto("endpoint-x")), []nftnl.Expr{saddr6, nftnl.Lookup{Sreg: nftnl.Reg1, Set: "affinity-x"}, nlVerdict(nftnl.VerdictGoto, "endpoint-x")}},
		{v4, "ip saddr { 198.18.64.0/18 , 10.0.0.0/8 } goto service-x", stmts(anyOf(model.IPSaddr, false, "198.18.64.0/18", "10.0.0.0/8"), model.Goto("service-x")), append(
			saddrSet(false, false, 0, ivEnd("0.0.0.0"), ivStart("10.0.0.0"), ivEnd("11.0.0.0"), ivStart("198.18.64.0"), ivEnd("198.18.128.0")),
			nlVerdict(nftnl.VerdictGoto, "service-x"))},
		// As `nft --debug=netlink` shows them: [ meta load mark => reg 1 ]
		// [ bitwise reg 1 = ( reg 1 & 0xffffbfff ) ^ 0x00004000 ] [ meta
		// set mark with reg 1 ].
		{v4, "mark set mark or 0x00004000 goto a", stmts(model.MarkOr{Bits: 0x4000, Keywords: true}, model.Goto("a")), []nftnl.Expr{
			nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaMark},
			nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: binary.NativeEndian.AppendUint32(nil, 0xffffbfff), Xor: binary.NativeEndian.AppendUint32(nil, 0x4000)},
			nftnl.MetaSet{Key: nftnl.MetaMark, Sreg: nftnl.Reg1},
			nlVerdict(nftnl.VerdictGoto, "a"),
		}},
		// [ numgen reg 1 = random mod 2 ] [ lookup reg 1 set __map%d dreg 1 ]
		// [ nat dnat ip addr_min reg 1 proto_min reg 9 ], the map's values
		// the address and the port padded to 4 bytes (ip6: proto_min reg 2).
		{v4, "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.18.64.2 . 8080 , 1 : 198.18.65.2 . 8080 }",
			stmts(model.Equal{Field: model.L4Proto, Value: model.Proto(6)}, model.NumgenDNAT{Family: model.IPv4, Targets: []netip.AddrPort{netip.MustParseAddrPort("198.18.64.2:8080"), netip.MustParseAddrPort("198.18.65.2:8080")}}),
			append(l4proto(6),
				nftnl.Numgen{Dreg: nftnl.Reg1, Modulus: 2},
				nftnl.Lookup{Sreg: nftnl.Reg1, IsMap: true, Dreg: nftnl.Reg1, Anonymous: &nftnl.Set{
					Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetMap,
					KeyType: nftnl.TypeInteger, KeyLen: 4, DataType: 0x1cd, DataLen: 8,
					Userdata: []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 6, 4, 0, 0, 0, 0},
					Elements: []nftnl.Element{
						{Key: binary.NativeEndian.AppendUint32(nil, 0), Data: []byte{198, 18, 64, 2, 0x1f, 0x90, 0, 0}},
						{Key: binary.NativeEndian.AppendUint32(nil, 1), Data: []byte{198, 18, 65, 2, 0x1f, 0x90, 0, 0}},
					},
				}},
				nftnl.DNAT{Family: nftnl.IPv4, RegAddr: nftnl.Reg1, RegProto: 9})},
		{v6, "meta l4proto udp dnat ip6 addr . port to numgen random mod 2 map { 0 : 2001:db8::1 . 53 , 1 : 2001:db8::2 . 53 }",
			stmts(model.Equal{Field: model.L4Proto, Value: model.Proto(17)}, model.NumgenDNAT{Family: model.IPv6, Targets: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:53"), netip.MustParseAddrPort("[2001:db8::2]:53")}}),
			append(l4proto(17),
				nftnl.Numgen{Dreg: nftnl.Reg1, Modulus: 2},
				nftnl.Lookup{Sreg: nftnl.Reg1, IsMap: true, Dreg: nftnl.Reg1, Anonymous: &nftnl.Set{
					Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetMap,
					KeyType: nftnl.TypeInteger, KeyLen: 4, DataType: 0x20d, DataLen: 20,
					Userdata: []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 6, 4, 0, 0, 0, 0},
					Elements: []nftnl.Element{
						{Key: binary.NativeEndian.AppendUint32(nil, 0), Data: append(nlAddr("2001:db8::1"), 0, 53, 0, 0)},
						{Key: binary.NativeEndian.AppendUint32(nil, 1), Data: append(nlAddr("2001:db8::2"), 0, 53, 0, 0)},
					},
				}},
				nftnl.DNAT{Family: nftnl.IPv6, RegAddr: nftnl.Reg1, RegProto: nftnl.Reg2})},
		{v4, "jump a", stmts(model.Jump("a")), []nftnl.Expr{nlVerdict(nftnl.VerdictJump, "a")}},
		{v4, "goto a", stmts(model.Goto("a")), []nftnl.Expr{nlVerdict(nftnl.VerdictGoto, "a")}},
		{v4, "drop", stmts(model.Verdict{Kind: "drop"}), []nftnl.Expr{nlVerdict(nftnl.VerdictDrop, "")}},
		{v4, "accept", stmts(model.Verdict{Kind: "accept"}), []nftnl.Expr{nlVerdict(nftnl.VerdictAccept, "")}},
		{v6, "return", stmts(model.Verdict{Kind: "return"}), []nftnl.Expr{nlVerdict(nftnl.VerdictReturn, "")}},
	}
	for _, tc := range tests {
		t.Run(string(tc.family)+" "+tc.rule, func(t *testing.T) {
			if text := (model.Rule{Stmts: tc.stmts}).String(); text != tc.rule {
				t.Fatalf("statements print as %q", text)
			}
			got, err := nftables.EncodeRule(tc.family, tc.stmts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, compareExprs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
