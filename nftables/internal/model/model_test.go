package model

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	gnft "github.com/google/nftables"
)

func TestDatum(t *testing.T) {
	le := binary.NativeEndian.AppendUint32(nil, 2)
	for _, c := range []struct {
		name        string
		d           Datum
		text        string
		first, last []byte
	}{
		{"IPv4 address", Addr(netip.MustParseAddr("198.19.0.1")), "198.19.0.1", []byte{198, 19, 0, 1}, []byte{198, 19, 0, 1}},
		{"IPv6 address", Addr(netip.MustParseAddr("2001:db8::1")), "2001:db8::1",
			netip.MustParseAddr("2001:db8::1").AsSlice(), netip.MustParseAddr("2001:db8::1").AsSlice()},
		{"prefix, masked", Prefix(netip.MustParsePrefix("198.18.33.7/20")), "198.18.32.0/20", []byte{198, 18, 32, 0}, []byte{198, 18, 47, 255}},
		{"full-length prefix prints as an address", Prefix(netip.MustParsePrefix("198.18.0.1/32")), "198.18.0.1", []byte{198, 18, 0, 1}, []byte{198, 18, 0, 1}},
		{"the whole space", Prefix(netip.MustParsePrefix("0.0.0.0/0")), "0.0.0.0/0", []byte{0, 0, 0, 0}, []byte{255, 255, 255, 255}},
		{"known protocol", Proto(17), "udp", []byte{17, 0, 0, 0}, []byte{17, 0, 0, 0}},
		{"other protocol", Proto(47), "47", []byte{47, 0, 0, 0}, []byte{47, 0, 0, 0}},
		{"port, big-endian, padded", Port(8080), "8080", []byte{0x1f, 0x90, 0, 0}, []byte{0x1f, 0x90, 0, 0}},
		{"integer, host order", Int(2), "2", le, le},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, last := c.d.appendBytes(nil, false), c.d.appendBytes(nil, true)
			if diff := cmp.Diff([]any{c.text, c.first, c.last}, []any{c.d.String(), first, last}); diff != "" {
				t.Errorf("text, first, last (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAppendAddrProtoPort checks that the key written in place is the
// one of Addr, Proto and Port, after what dst held, with or without room.
func TestAppendAddrProtoPort(t *testing.T) {
	net6 := Network(netip.MustParsePrefix("2001:db8::/32"))
	stale := []Datum{Int(1), net6, net6, net6}
	for _, c := range []struct {
		name string
		dst  []Datum
		addr netip.Addr
	}{
		{"IPv4, no room", nil, netip.MustParseAddr("198.19.0.1")},
		{"IPv6, no room", nil, netip.MustParseAddr("2001:db8::1")},
		{"IPv4 after a datum, room left", append(make([]Datum, 0, 8), Int(7)), netip.MustParseAddr("198.19.255.254")},
		{"IPv6 with a zone, room left", make([]Datum, 0, 3), netip.MustParseAddr("fe80::1%eth0")},
		{"room over used data", stale[:1], netip.MustParseAddr("198.18.0.9")},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := append(slices.Clip(slices.Clone(c.dst)), Addr(c.addr), Proto(132), Port(30080))
			got := AppendAddrProtoPort(c.dst, c.addr, 132, 30080)
			if !slices.Equal(got, want) {
				t.Errorf("AppendAddrProtoPort = %v, want %v", got, want)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	net := Prefix(netip.MustParsePrefix("198.18.64.0/18"))
	for _, c := range []struct {
		d, v Datum
		want bool
	}{
		{net, Addr(netip.MustParseAddr("198.18.100.1")), true},
		{net, Addr(netip.MustParseAddr("198.18.128.1")), false},
		{Addr(netip.MustParseAddr("198.18.0.1")), Addr(netip.MustParseAddr("198.18.0.1")), true},
		{Port(80), Port(81), false},
		{Proto(6), Port(6), false},
	} {
		if got := c.d.Matches(c.v); got != c.want {
			t.Errorf("%v matches %v: %v, want %v", c.d, c.v, got, c.want)
		}
	}
}

func testTable() *Table {
	return &Table{
		Family: IPv4, Name: "t", Comment: `a "quoted" table`,
		Sets: []*Set{
			{Name: "s", Key: []Expr{IPDaddr, L4Proto, THDport}},
			{Name: "m", Key: []Expr{IPDaddr, Numgen{Mod: 2}}, Value: []Expr{IPDaddr, TCPDport}},
			{Name: "nets", Key: []Expr{IPSaddr}, Interval: true},
			{Name: "ranges", Key: []Expr{IPDaddr, IPSaddr}, Interval: true},
		},
		Chains: []*Chain{
			{Name: "nat-prerouting", Base: &Hook{Type: "nat", Hook: "prerouting", Priority: "dstnat"}, Rules: []Rule{{Stmts: []Stmt{Jump("svc")}}}},
			{Name: "svc", Rules: []Rule{{
				Stmts:   []Stmt{InSet{Key: []Expr{IPDaddr, L4Proto, THDport}, Set: "s"}, InSet{Key: []Expr{IPSaddr}, Set: "nets", Neg: true}, MarkOr{Bits: 0x4000}, DNATMap{Family: IPv4, Key: []Expr{IPDaddr, Numgen{Mod: 2}}, Map: "m"}},
				Comment: "spread",
			}}},
		},
		Elements: []Element{
			{Set: "s", Key: []Datum{Addr(netip.MustParseAddr("198.19.0.1")), Proto(6), Port(80)}, Comment: "a/b:p"},
			{Set: "m", Key: []Datum{Addr(netip.MustParseAddr("198.19.0.1")), Int(0)}, Value: []Datum{Addr(netip.MustParseAddr("198.18.64.2")), Port(8080)}},
			{Set: "nets", Key: []Datum{Prefix(netip.MustParsePrefix("198.18.64.0/18"))}},
			{Set: "s", Key: []Datum{Addr(netip.MustParseAddr("198.19.0.2")), Proto(17), Port(53)}},
			{Set: "ranges", Key: []Datum{Addr(netip.MustParseAddr("198.19.0.1")), Prefix(netip.MustParsePrefix("198.18.0.0/16"))}},
		},
	}
}

// TestScript: one statement per set, its elements in table order; chain
// priorities as numbers; a double quote in a comment cannot end it.
func TestScript(t *testing.T) {
	want := `add table ip t
delete table ip t
add table ip t { comment "a 'quoted' table" ; }
add set ip t s { typeof ip daddr . meta l4proto . th dport ; }
add map ip t m { typeof ip daddr . numgen random mod 2 : ip daddr . tcp dport ; }
add set ip t nets { typeof ip saddr ; flags interval ; }
add set ip t ranges { typeof ip daddr . ip saddr ; flags interval ; }
add chain ip t nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip t svc { }
add rule ip t nat-prerouting jump svc
add rule ip t svc ip daddr . meta l4proto . th dport @s ip saddr != @nets meta mark set meta mark | 0x00004000 dnat ip to ip daddr . numgen random mod 2 map @m comment "spread"
add element ip t s { 198.19.0.1 . tcp . 80 comment "a/b:p", 198.19.0.2 . udp . 53 }
add element ip t m { 198.19.0.1 . 0 : 198.18.64.2 . 8080 }
add element ip t nets { 198.18.64.0/18 }
add element ip t ranges { 198.19.0.1 . 198.18.0.0/16 }
`
	if diff := cmp.Diff(want, testTable().Script()); diff != "" {
		t.Errorf("script (-want +got):\n%s", diff)
	}
}

// TestDefinitionsAndNetlinkElements: Definitions keeps the elements of
// one-field interval sets, which netlink does not encode; NetlinkElements
// are all the others, which netlinkElements encodes with the last key of
// concatenated ranges.
func TestDefinitionsAndNetlinkElements(t *testing.T) {
	tbl := testTable()
	defs := tbl.Definitions()
	wantTail := "add element ip t nets { 198.18.64.0/18 }\n"
	if got := defs[len(defs)-len(wantTail):]; got != wantTail {
		t.Errorf("Definitions ends with %q, want %q", got, wantTail)
	}
	var sets []string
	for _, e := range tbl.NetlinkElements() {
		sets = append(sets, e.Set)
	}
	if diff := cmp.Diff([]string{"s", "m", "s", "ranges"}, sets); diff != "" {
		t.Errorf("NetlinkElements' sets (-want +got):\n%s", diff)
	}
	// The same elements with the interval set's first: the others are one
	// run, which NetlinkElements returns without copying.
	first := testTable()
	nets := first.Elements[2]
	first.Elements = append([]Element{nets}, slices.Delete(first.Elements, 2, 3)...)
	if diff := cmp.Diff(tbl.NetlinkElements(), first.NetlinkElements(), cmp.AllowUnexported(Datum{})); diff != "" {
		t.Errorf("NetlinkElements of a run (-interleaved +run):\n%s", diff)
	}
	if defs := first.Definitions(); defs[len(defs)-len(wantTail):] != wantTail {
		t.Errorf("Definitions of a run ends with %q, want %q", defs[len(defs)-len(wantTail):], wantTail)
	}
	got := netlinkElements(tbl.Elements[4:5], true)
	want := []gnft.SetElement{{Key: []byte{198, 19, 0, 1, 198, 18, 0, 0}, KeyEnd: []byte{198, 19, 0, 1, 198, 18, 255, 255}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("range element (-want +got):\n%s", diff)
	}
	got = netlinkElements(tbl.Elements[:2], false)
	want = []gnft.SetElement{
		{Key: []byte{198, 19, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0}, Comment: "a/b:p"},
		{Key: append([]byte{198, 19, 0, 1}, binary.NativeEndian.AppendUint32(nil, 0)...), Val: []byte{198, 18, 64, 2, 0x1f, 0x90, 0, 0}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("elements (-want +got):\n%s", diff)
	}
}

// TestGroupBySet: a set's elements go together, in their order, in
// messages of at most maxMessageBytes; the sets in the order they first
// appear.
func TestGroupBySet(t *testing.T) {
	key := []Datum{Addr(netip.MustParseAddr("198.19.0.1")), Proto(6), Port(80)}
	a := Element{Set: "a", Key: key, Comment: "ns/name:http/TCP"}
	perMessage := maxMessageBytes / rowBytes(&a, false, new([]Datum))
	var es []Element
	for i := range perMessage + 1 {
		e := a
		e.Key = []Datum{Addr(netip.MustParseAddr("198.19.0.1")), Proto(6), Port(uint16(i))}
		es = append(es, e)
	}
	es = append(es, Element{Set: "b", Key: key}, a)
	type run struct {
		Set         string
		N           int
		First, Last string // the port of the first and last element
	}
	var got []run
	for _, g := range groupElements(es, nil) {
		got = append(got, run{g[0].Set, len(g), g[0].Key[2].String(), g[len(g)-1].Key[2].String()})
	}
	want := []run{
		{"a", perMessage, "0", fmt.Sprint(perMessage - 1)},
		{"a", 2, fmt.Sprint(perMessage), "80"},
		{"b", 1, "80", "80"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
}

// TestStatementText: the statements print as nft reads them, as the
// default layout's golden files hold them.
func TestStatementText(t *testing.T) {
	a := func(s string) Datum { return Addr(netip.MustParseAddr(s)) }
	n := func(s string) Datum { return Network(netip.MustParsePrefix(s)) }
	for _, c := range []struct {
		s    Stmt
		want string
	}{
		{AddrIn{Field: IPSaddr, Values: []Datum{n("198.18.0.0/16")}}, "ip saddr 198.18.0.0/16"},
		{AddrIn{Field: IPSaddr, Values: []Datum{n("198.18.0.1/32")}, Neg: true}, "ip saddr != 198.18.0.1/32"},
		{AddrIn{Field: IP6Saddr, Values: []Datum{n("2001:db8::/64"), a("2001:db8:19::1")}, Neg: true}, "ip6 saddr != { 2001:db8::/64 , 2001:db8:19::1 }"},
		{AddrIn{Field: IPDaddr, Values: []Datum{n("198.19.0.0/16")}, Braces: true}, "ip daddr { 198.19.0.0/16 }"},
		{AddrIn{Field: IPDaddr, Values: []Datum{Prefix(netip.MustParsePrefix("127.0.0.0/8"))}, Neg: true}, "ip daddr != 127.0.0.0/8"},
		{DportEq{Proto: 132, Port: 9}, "sctp dport 9"},
		{NumgenGoto{Chains: []string{"a", "b", "c"}}, "numgen random mod 3 vmap { 0 : goto a , 1 : goto b , 2 : goto c }"},
		{UpdateSet{Set: "affinity-x", Field: IP6Saddr}, "update @affinity-x { ip6 saddr }"},
		{DNATTo{To: netip.MustParseAddrPort("[2001:db8:18::2]:8080")}, "dnat to [2001:db8:18::2]:8080"},
		{DNATTo{To: netip.MustParseAddrPort("198.18.64.2:53")}, "dnat to 198.18.64.2:53"},
		{MarkOr{Bits: 0x4000, Keywords: true}, "mark set mark or 0x00004000"},
		{MarkOr{Bits: 0x4000}, "meta mark set meta mark | 0x00004000"},
		{MarkClear{Bits: 0x4000, Keywords: true}, "mark and 0x00004000 == 0"},
		{MarkXor{Bits: 0x4000, Keywords: true}, "mark set mark xor 0x00004000"},
		{VmapLookup{Key: []Expr{IPDaddr, L4Proto, THDport}, Map: "service-ips"}, "ip daddr . meta l4proto . th dport vmap @service-ips"},
		{Goto("service-x"), "goto service-x"},
		{FibLocal{}, "fib daddr type local"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("%#v prints %q, want %q", c.s, got, c.want)
		}
	}
}

// TestDatumAccessors: AsPrefix and Uint give back what the constructors
// took, and refuse the other kinds.
func TestDatumAccessors(t *testing.T) {
	p, ok := Addr(netip.MustParseAddr("198.18.0.1")).AsPrefix()
	if !ok || p != netip.MustParsePrefix("198.18.0.1/32") {
		t.Errorf("address as prefix: %v %v", p, ok)
	}
	if p, ok := Network(netip.MustParsePrefix("198.18.0.0/15")).AsPrefix(); !ok || p != netip.MustParsePrefix("198.18.0.0/15") {
		t.Errorf("network as prefix: %v %v", p, ok)
	}
	if _, ok := Addr(netip.MustParseAddr("fe80::1%eth0")).AsPrefix(); ok {
		t.Error("zoned address as prefix")
	}
	if _, ok := Port(80).AsPrefix(); ok {
		t.Error("port as prefix")
	}
	if v, ok := Proto(17).Uint(); !ok || v != 17 {
		t.Errorf("protocol: %v %v", v, ok)
	}
	if _, ok := Addr(netip.MustParseAddr("198.18.0.1")).Uint(); ok {
		t.Error("address as integer")
	}
}
