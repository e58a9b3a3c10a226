package nftnl

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

// The expected encodings below are written with these helpers, which know
// nothing of attrs: a netlink attribute is a native-endian 16-bit length
// (its 4-byte header included, its padding not) and 16-bit type, then the
// value, then zeros up to a multiple of 4 bytes.

// hdr is an attribute header.
func hdr(n int, typ uint16) []byte {
	return binary.NativeEndian.AppendUint16(binary.NativeEndian.AppendUint16(nil, uint16(n)), typ)
}

// nla is an attribute whose value is the concatenation of parts.
func nla(typ uint16, parts ...[]byte) []byte {
	v := slices.Concat(parts...)
	b := append(hdr(4+len(v), typ), v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nested is a nested attribute (NLA_F_NESTED) holding children.
func nested(typ uint16, children ...[]byte) []byte { return nla(typ|0x8000, children...) }

func strz(s string) []byte     { return append([]byte(s), 0) }
func be32(v uint32) []byte     { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte     { return binary.BigEndian.AppendUint64(nil, v) }
func ne32(v uint32) []byte     { return binary.NativeEndian.AppendUint32(nil, v) }
func nfgen(f Family) []byte    { return []byte{byte(f), 0, 0, 0} }
func table(name string) []byte { return nla(1, strz(name)) }

// attr is one attribute that walk found.
type attr struct {
	typ    uint16 // without NLA_F_NESTED
	nested bool
	data   []byte // the value, without header and padding
}

// walk splits b into attributes, and fails the test unless each has a whole
// header, a length within b and zero padding to 4 bytes, and each nested
// one holds attributes in turn.
func walk(t testing.TB, b []byte) []attr {
	t.Helper()
	var out []attr
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("%d bytes left, short of an attribute header: % x", len(b), b)
		}
		n, typ := int(binary.NativeEndian.Uint16(b)), binary.NativeEndian.Uint16(b[2:])
		padded := (n + 3) &^ 3
		if n < 4 || padded > len(b) {
			t.Fatalf("attribute of type %#x: length %d (%d with padding), %d bytes left: % x", typ, n, padded, len(b), b)
		}
		if pad := b[n:padded]; !bytes.Equal(pad, make([]byte, len(pad))) {
			t.Fatalf("attribute of type %#x: padding % x", typ, pad)
		}
		a := attr{typ: typ &^ 0x8000, nested: typ&0x8000 != 0, data: b[4:n]}
		if a.nested {
			walk(t, a.data)
		}
		out = append(out, a)
		b = b[padded:]
	}
	return out
}

// get returns the one attribute of a type among as.
func get(t testing.TB, as []attr, typ uint16) attr {
	t.Helper()
	var found []attr
	for _, a := range as {
		if a.typ == typ {
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d attributes of type %d, want 1", len(found), typ)
	}
	return found[0]
}

// children are the attributes a nested attribute holds.
func children(t testing.TB, a attr) []attr {
	t.Helper()
	if !a.nested {
		t.Fatalf("attribute of type %d is not flagged nested", a.typ)
	}
	return walk(t, a.data)
}

// byType maps the attributes of b, encoded, by type (NLA_F_NESTED kept):
// for comparing attributes whose order nft and we do not share.
func byType(t testing.TB, b []byte) map[uint16][]byte {
	t.Helper()
	m := map[uint16][]byte{}
	for _, a := range walk(t, b) {
		typ := a.typ
		if a.nested {
			typ |= 0x8000
		}
		if _, dup := m[typ]; dup {
			t.Fatalf("two attributes of type %d", a.typ)
		}
		m[typ] = a.data
	}
	return m
}

func TestBatchAttrEncoding(t *testing.T) {
	tests := []struct {
		name  string
		build func(*attrs)
		want  []byte
	}{
		{"string, padded", func(a *attrs) { a.str(1, "t") }, slices.Concat(hdr(6, 1), []byte{'t', 0, 0, 0})},
		{"string filling 4 bytes", func(a *attrs) { a.str(3, "abc") }, slices.Concat(hdr(8, 3), []byte("abc\x00"))},
		{"empty string", func(a *attrs) { a.str(2, "") }, slices.Concat(hdr(5, 2), []byte{0, 0, 0, 0})},
		{"anonymous map name", func(a *attrs) { a.str(2, "__map%d") }, slices.Concat(hdr(12, 2), []byte("__map%d\x00"))},
		{"bytes, padded", func(a *attrs) { a.bytes(6, []byte{1, 2, 3, 4, 5}) }, slices.Concat(hdr(9, 6), []byte{1, 2, 3, 4, 5, 0, 0, 0})},
		{"no bytes", func(a *attrs) { a.bytes(6, nil) }, hdr(4, 6)},
		{"u32 big-endian", func(a *attrs) { a.u32(5, 0x01020304) }, slices.Concat(hdr(8, 5), []byte{1, 2, 3, 4})},
		{"u32 jump code", func(a *attrs) { a.u32(1, 0xfffffffd) }, slices.Concat(hdr(8, 1), []byte{0xff, 0xff, 0xff, 0xfd})},
		{"u64 big-endian", func(a *attrs) { a.u64(11, 0x0102030405060708) }, slices.Concat(hdr(12, 11), []byte{1, 2, 3, 4, 5, 6, 7, 8})},
		{"two in a row", func(a *attrs) { a.str(1, "t"); a.u32(10, 7) },
			slices.Concat(hdr(6, 1), []byte{'t', 0, 0, 0}, hdr(8, 10), []byte{0, 0, 0, 7})},
		{"nested", func(a *attrs) { a.nest(9, func(a *attrs) { a.u32(1, 2) }) },
			slices.Concat(hdr(12, 0x8009), hdr(8, 1), []byte{0, 0, 0, 2})},
		{"empty nest", func(a *attrs) { a.nest(4, func(*attrs) {}) }, hdr(4, 0x8004)},
		// The length of a nest counts its children's padding.
		{"nest in nest around a padded string", func(a *attrs) {
			a.nest(3, func(a *attrs) { a.nest(1, func(a *attrs) { a.str(1, "ab") }) })
		}, slices.Concat(hdr(16, 0x8003), hdr(12, 0x8001), hdr(7, 1), []byte{'a', 'b', 0, 0})},
		{"nest after a padded string", func(a *attrs) {
			a.str(1, "t")
			a.nest(2, func(a *attrs) { a.str(1, "h"); a.u32(2, 1) })
		}, slices.Concat(hdr(6, 1), []byte{'t', 0, 0, 0}, hdr(20, 0x8002), hdr(6, 1), []byte{'h', 0, 0, 0}, hdr(8, 2), []byte{0, 0, 0, 1})},
		{"goto verdict", func(a *attrs) { a.verdict(Verdict{Code: VerdictGoto, Chain: "d"}) },
			slices.Concat(hdr(20, 0x8002), hdr(8, 1), []byte{0xff, 0xff, 0xff, 0xfc}, hdr(6, 2), []byte{'d', 0, 0, 0})},
		{"accept verdict, no chain", func(a *attrs) { a.verdict(Verdict{Code: VerdictAccept}) },
			slices.Concat(hdr(12, 0x8002), hdr(8, 1), []byte{0, 0, 0, 1})},
		// The helpers the other tests use agree with these.
		{"helpers", func(a *attrs) {
			a.str(1, "t")
			a.nest(3, func(a *attrs) { a.nest(1, func(a *attrs) { a.bytes(1, []byte{10, 1, 2}) }) })
			a.u64(11, 60000)
		}, slices.Concat(nla(1, strz("t")), nested(3, nested(1, nla(1, []byte{10, 1, 2}))), nla(11, be64(60000)))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &attrs{}
			tc.build(a)
			if !bytes.Equal(a.buf, tc.want) {
				t.Fatalf("encoded\n% x\nwant\n% x", a.buf, tc.want)
			}
			walk(t, a.buf)
		})
	}
}

// TestBatchChainMatchesNFT: the NEWCHAIN message of `nft --debug=mnl add chain
// ip t h` (nft 1.0.6, on a little-endian host), byte for byte.
func TestBatchChainMatchesNFT(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the reference was captured on a little-endian host")
	}
	b := NewBatch(IPv4, "t")
	b.AddChain("h")
	want := []byte{
		0x02, 0x00, 0x00, 0x00, // nfgenmsg: AF_INET
		0x06, 0x00, 0x01, 0x00, 't', 0x00, 0x00, 0x00, // NFTA_CHAIN_TABLE
		0x06, 0x00, 0x03, 0x00, 'h', 0x00, 0x00, 0x00, // NFTA_CHAIN_NAME
	}
	if m := b.msgs[0]; m.typ != 3 || !bytes.Equal(m.body, want) {
		t.Fatalf("message %d\n% x\nwant 3\n% x", m.typ, m.body, want)
	}
}

type wantMsg struct {
	typ, flags uint16
	body       []byte
}

func TestBatchMessages(t *testing.T) {
	const (
		create       = 0x400
		appendCreate = 0x800 | 0x400
	)
	key := []byte{198, 19, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0}
	affinity := Set{
		Name: "affinity-x", Flags: SetTimeout | SetEval, KeyType: TypeIPv4Addr, KeyLen: 4,
		TimeoutMS: 60000, Userdata: []byte{0, 4, 2, 0, 0, 0},
	}
	accept := nested(1, nla(1, strz("immediate")), nested(2, nla(1, be32(RegVerdict)), nested(2, nested(2, nla(1, be32(1))))))
	tests := []struct {
		name   string
		family Family
		build  func(*Batch)
		want   []wantMsg
	}{
		{"add chain", IPv4, func(b *Batch) { b.AddChain("h") },
			[]wantMsg{{3, create, slices.Concat(nfgen(IPv4), table("t"), nla(3, strz("h")))}}},
		{"add chain, IPv6", IPv6, func(b *Batch) { b.AddChain("service-abc") },
			[]wantMsg{{3, create, slices.Concat([]byte{10, 0, 0, 0}, table("t"), nla(3, strz("service-abc")))}}},
		{"delete chain", IPv4, func(b *Batch) { b.DelChain("h") },
			[]wantMsg{{5, 0, slices.Concat(nfgen(IPv4), table("t"), nla(3, strz("h")))}}},
		{"flush chain", IPv4, func(b *Batch) { b.FlushChain("h") },
			[]wantMsg{{8, 0, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")))}}},
		{"rule", IPv4, func(b *Batch) { b.AddRule("h", []Expr{VerdictExpr{Code: VerdictAccept}}, "") },
			[]wantMsg{{6, appendCreate, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")), nested(4, accept))}}},
		// Comments are libnftnl user data: type 0 (NFTNL_UDATA_RULE_COMMENT),
		// length, the comment and a NUL.
		{"rule with a comment", IPv4, func(b *Batch) { b.AddRule("h", []Expr{VerdictExpr{Code: VerdictAccept}}, "abc") },
			[]wantMsg{{6, appendCreate, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")), nested(4, accept),
				slices.Concat(hdr(10, 7), []byte{0, 4, 'a', 'b', 'c', 0, 0, 0}))}}},
		{"rule with a long comment", IPv4, func(b *Batch) {
			b.AddRule("h", []Expr{VerdictExpr{Code: VerdictAccept}}, "masquerade local traffic")
		}, []wantMsg{{6, appendCreate, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")), nested(4, accept),
			nla(7, []byte{0, 25}, strz("masquerade local traffic")))}}},
		{"rule of two expressions", IPv4, func(b *Batch) {
			b.AddRule("h", []Expr{Payload{Dreg: Reg1, Base: BaseNetwork, Offset: 12, Len: 1}, VerdictExpr{Code: VerdictJump, Chain: "d"}}, "")
		}, []wantMsg{{6, appendCreate, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")), nested(4,
			nested(1, nla(1, strz("payload")), nested(2, nla(1, be32(1)), nla(2, be32(1)), nla(3, be32(12)), nla(4, be32(1)))),
			nested(1, nla(1, strz("immediate")), nested(2, nla(1, be32(0)), nested(2, nested(2, nla(1, be32(0xfffffffd)), nla(2, strz("d"))))))))}}},
		// An affinity set, as nft 1.0.6 sends `add set ip t s { type
		// ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }`.
		{"affinity set", IPv4, func(b *Batch) { b.AddSet(affinity) },
			[]wantMsg{{9, create, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("affinity-x")),
				nla(3, be32(0x30)), nla(4, be32(7)), nla(5, be32(4)), nla(10, be32(1)), nla(11, be64(60000)),
				nla(13, []byte{0, 4, 2, 0, 0, 0}))}}},
		{"set without a default timeout", IPv6, func(b *Batch) {
			b.AddSet(Set{Name: "s", Flags: SetTimeout, KeyType: TypeIPv6Addr, KeyLen: 16})
		}, []wantMsg{{9, create, slices.Concat(nfgen(IPv6), table("t"), nla(2, strz("s")),
			nla(3, be32(0x10)), nla(4, be32(8)), nla(5, be32(16)), nla(10, be32(1)))}}},
		{"delete set", IPv4, func(b *Batch) { b.DelSet("s") },
			[]wantMsg{{11, 0, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("s")))}}},
		{"map element", IPv4, func(b *Batch) {
			b.AddElements("m", []Element{{Key: key, Verdict: &Verdict{Code: VerdictGoto, Chain: "service-x"}}})
		}, []wantMsg{{12, create, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("m")), nested(3,
			nested(1, nested(1, nla(1, key)), nested(2, nested(2, nla(1, be32(0xfffffffc)), nla(2, strz("service-x")))))))}}},
		{"delete elements", IPv4, func(b *Batch) { b.DelElements("c", [][]byte{{198, 19, 0, 1}, {198, 19, 0, 2}}) },
			[]wantMsg{{14, 0, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("c")), nested(3,
				nested(1, nested(1, nla(1, []byte{198, 19, 0, 1}))),
				nested(1, nested(1, nla(1, []byte{198, 19, 0, 2})))))}}},
		{"in order", IPv4, func(b *Batch) {
			b.FlushChain("h")
			b.AddRule("h", []Expr{VerdictExpr{Code: VerdictAccept}}, "")
			b.DelChain("x")
		}, []wantMsg{
			{8, 0, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")))},
			{6, appendCreate, slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h")), nested(4, accept))},
			{5, 0, slices.Concat(nfgen(IPv4), table("t"), nla(3, strz("x")))},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBatch(tc.family, "t")
			tc.build(b)
			if b.Len() != len(tc.want) {
				t.Fatalf("Len %d, want %d", b.Len(), len(tc.want))
			}
			for i, m := range b.msgs {
				w := tc.want[i]
				if m.typ != w.typ || m.flags != w.flags {
					t.Errorf("message %d: type %d flags %#x, want type %d flags %#x", i, m.typ, m.flags, w.typ, w.flags)
				}
				if !bytes.Equal(m.body, w.body) {
					t.Errorf("message %d:\n% x\nwant\n% x", i, m.body, w.body)
				}
				walk(t, m.body[4:])
			}
		})
	}
}

// TestBatchElementEncoding: the attributes of one element of a set or map.
func TestBatchElementEncoding(t *testing.T) {
	k := []byte{10, 0, 0, 0}
	tests := []struct {
		name string
		elem Element
		want []byte // the NFTA_LIST_ELEM
	}{
		{"key", Element{Key: k}, nested(1, nested(1, nla(1, k)))},
		// NFTA_SET_ELEM_FLAGS: NFT_SET_ELEM_INTERVAL_END, big-endian.
		{"interval end", Element{Key: k, IntervalEnd: true}, nested(1, nla(3, be32(1)), nested(1, nla(1, k)))},
		// NFTNL_UDATA_SET_ELEM_FLAGS (1), 4 bytes: native-endian
		// NFTNL_SET_ELEM_F_INTERVAL_OPEN (1).
		{"interval open", Element{Key: k, IntervalOpen: true}, nested(1, nested(1, nla(1, k)), nla(6, []byte{1, 4}, ne32(1)))},
		{"comment", Element{Key: k, Comment: "ns/svc:p"}, nested(1, nested(1, nla(1, k)), nla(6, []byte{0, 9}, strz("ns/svc:p")))},
		{"drop, with a comment", Element{Key: k, Verdict: &Verdict{Code: VerdictDrop}, Comment: "a/b:p80"},
			nested(1, nested(1, nla(1, k)), nested(2, nested(2, nla(1, be32(0)))), nla(6, []byte{0, 8}, strz("a/b:p80")))},
		{"return", Element{Key: k, Verdict: &Verdict{Code: VerdictReturn}},
			nested(1, nested(1, nla(1, k)), nested(2, nested(2, nla(1, be32(0xfffffffb)))))},
		{"jump", Element{Key: ne32(1), Verdict: &Verdict{Code: VerdictJump, Chain: "endpoint-abc"}},
			nested(1, nested(1, nla(1, ne32(1))), nested(2, nested(2, nla(1, be32(0xfffffffd)), nla(2, strz("endpoint-abc")))))},
		{"IPv6 key", Element{Key: make([]byte, 16)}, nested(1, nested(1, nla(1, make([]byte, 16))))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBatch(IPv4, "t")
			b.AddElements("s", []Element{tc.elem})
			body := b.msgs[0].body
			elems := children(t, get(t, walk(t, body[4:]), 3))
			if len(elems) != 1 {
				t.Fatalf("%d elements", len(elems))
			}
			want := slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("s")), nested(3, tc.want))
			if !bytes.Equal(body, want) {
				t.Fatalf("encoded\n% x\nwant\n% x", body, want)
			}
		})
	}
}

// nftRef is a rule with an anonymous set as nft 1.0.6 sends it (`nft
// --debug=mnl`, table ip t): the set, its elements and the rule, each
// without its nfgenmsg, for the set id the batch gives.
type nftRef struct {
	name        string
	exprs       []Expr
	set, elems  func(id uint32) []byte
	ruleExprs   func(id uint32) [][]byte // each NFTA_LIST_ELEM of NFTA_RULE_EXPRESSIONS
	anonymousAt int                      // the Lookup among exprs
}
