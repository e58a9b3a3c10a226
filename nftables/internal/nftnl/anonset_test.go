package nftnl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// TestBatchAnonymousSetsMatchNFT: the messages of rules that carry anonymous
// sets, against what nft 1.0.6 sends for the same rules. Two differences
// that the kernel ignores are left out of the references: nft numbers the
// elements of NFTA_SET_ELEM_LIST_ELEMENTS 1, 2, 3… where we number each 1
// (the kernel iterates over them whatever their type), and nft orders the
// lookup expression's attributes sreg, dreg, set, set id, flags (the kernel
// parses them into an array by type), so the lookup's are compared by type.
func TestBatchAnonymousSetsMatchNFT(t *testing.T) {
	numgenUdata := []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 4, 8, 0, 4, 1, 0, 0, 0, 1, 0, 6, 4, 0, 0, 0, 0}
	saddrUdata := []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 12, 0, 0, 0, 1, 4, 11, 0, 0, 0}
	gotoElem := func(key uint32, chain string) []byte {
		return nested(1, nested(1, nla(1, ne32(key))), nested(2, nested(2, nla(1, be32(0xfffffffc)), nla(2, strz(chain)))))
	}
	refs := []nftRef{
		{
			name: "numgen random mod 2 vmap { 0 : goto d , 1 : goto e }",
			exprs: []Expr{
				Numgen{Dreg: Reg1, Modulus: 2},
				Lookup{Sreg: Reg1, IsMap: true, Anonymous: &Set{
					Flags: SetAnonymous | SetConstant | SetMap, KeyType: TypeInteger, KeyLen: 4, DataType: TypeVerdict,
					Userdata: numgenUdata,
					Elements: []Element{
						{Key: ne32(0), Verdict: &Verdict{Code: VerdictGoto, Chain: "d"}},
						{Key: ne32(1), Verdict: &Verdict{Code: VerdictGoto, Chain: "e"}},
					},
				}},
			},
			anonymousAt: 1,
			set: func(id uint32) []byte {
				return slices.Concat(table("t"), nla(2, strz("__map%d")), nla(3, be32(0xb)), nla(4, be32(4)), nla(5, be32(4)),
					nla(6, be32(0xffffff00)), nla(7, be32(0)), nla(10, be32(id)), nested(9, nla(1, be32(2))), nla(13, numgenUdata))
			},
			elems: func(id uint32) []byte {
				return slices.Concat(table("t"), nla(2, strz("__map%d")), nla(4, be32(id)), nested(3, gotoElem(0, "d"), gotoElem(1, "e")))
			},
			ruleExprs: func(id uint32) [][]byte {
				return [][]byte{
					nested(1, nla(1, strz("numgen")), nested(2, nla(1, be32(1)), nla(2, be32(2)), nla(3, be32(1)), nla(4, be32(0)))),
					nested(1, nla(1, strz("lookup")), nested(2, nla(2, be32(1)), nla(3, be32(0)), nla(1, strz("__map%d")), nla(4, be32(id)))),
				}
			},
		},
		{
			name: "ip saddr != { 10.0.0.0/8 , 10.1.0.0/16 , 11.0.0.0/25 , 11.0.0.128/25 } drop",
			exprs: []Expr{
				Payload{Dreg: Reg1, Base: BaseNetwork, Offset: 12, Len: 4},
				Lookup{Sreg: Reg1, Invert: true, Anonymous: &Set{
					Flags: SetAnonymous | SetConstant | SetInterval, KeyType: TypeIPv4Addr, KeyLen: 4,
					Userdata: saddrUdata,
					Elements: []Element{
						{Key: []byte{0, 0, 0, 0}, IntervalEnd: true},
						{Key: []byte{10, 0, 0, 0}},
						{Key: []byte{11, 0, 1, 0}, IntervalEnd: true},
					},
				}},
				VerdictExpr{Code: VerdictDrop},
			},
			anonymousAt: 1,
			set: func(id uint32) []byte {
				return slices.Concat(table("t"), nla(2, strz("__set%d")), nla(3, be32(7)), nla(4, be32(7)), nla(5, be32(4)),
					nla(10, be32(id)), nested(9, nla(1, be32(3))), nla(13, saddrUdata))
			},
			elems: func(id uint32) []byte {
				return slices.Concat(table("t"), nla(2, strz("__set%d")), nla(4, be32(id)), nested(3,
					nested(1, nla(3, be32(1)), nested(1, nla(1, []byte{0, 0, 0, 0}))),
					nested(1, nested(1, nla(1, []byte{10, 0, 0, 0}))),
					nested(1, nla(3, be32(1)), nested(1, nla(1, []byte{11, 0, 1, 0})))))
			},
			ruleExprs: func(id uint32) [][]byte {
				return [][]byte{
					nested(1, nla(1, strz("payload")), nested(2, nla(1, be32(1)), nla(2, be32(1)), nla(3, be32(12)), nla(4, be32(4)))),
					nested(1, nla(1, strz("lookup")), nested(2, nla(2, be32(1)), nla(1, strz("__set%d")), nla(4, be32(id)), nla(5, be32(1)))),
					nested(1, nla(1, strz("immediate")), nested(2, nla(1, be32(0)), nested(2, nested(2, nla(1, be32(0)))))),
				}
			},
		},
		{
			name: "ip saddr != { 0.0.0.0/0 , 10.0.0.0/8 } drop",
			exprs: []Expr{
				Payload{Dreg: Reg1, Base: BaseNetwork, Offset: 12, Len: 4},
				Lookup{Sreg: Reg1, Invert: true, Anonymous: &Set{
					Flags: SetAnonymous | SetConstant | SetInterval, KeyType: TypeIPv4Addr, KeyLen: 4,
					Userdata: saddrUdata,
					Elements: []Element{{Key: []byte{0, 0, 0, 0}, IntervalOpen: true}},
					Size:     2,
				}},
				VerdictExpr{Code: VerdictDrop},
			},
			anonymousAt: 1,
			set: func(id uint32) []byte {
				return slices.Concat(table("t"), nla(2, strz("__set%d")), nla(3, be32(7)), nla(4, be32(7)), nla(5, be32(4)),
					nla(10, be32(id)), nested(9, nla(1, be32(2))), nla(13, saddrUdata))
			},
			elems: func(id uint32) []byte {
				return slices.Concat(table("t"), nla(2, strz("__set%d")), nla(4, be32(id)), nested(3,
					nested(1, nested(1, nla(1, []byte{0, 0, 0, 0})), nla(6, []byte{1, 4}, ne32(1)))))
			},
			ruleExprs: func(id uint32) [][]byte {
				return [][]byte{
					nested(1, nla(1, strz("payload")), nested(2, nla(1, be32(1)), nla(2, be32(1)), nla(3, be32(12)), nla(4, be32(4)))),
					nested(1, nla(1, strz("lookup")), nested(2, nla(2, be32(1)), nla(1, strz("__set%d")), nla(4, be32(id)), nla(5, be32(1)))),
					nested(1, nla(1, strz("immediate")), nested(2, nla(1, be32(0)), nested(2, nested(2, nla(1, be32(0)))))),
				}
			},
		},
	}
	for _, ref := range refs {
		t.Run(ref.name, func(t *testing.T) {
			b := NewBatch(IPv4, "t")
			b.AddRule("h", ref.exprs, "")
			if b.Len() != 3 {
				t.Fatalf("%d messages, want NEWSET, NEWSETELEM, NEWRULE", b.Len())
			}
			set, elems, rule := b.msgs[0], b.msgs[1], b.msgs[2]
			for i, want := range []wantMsg{{9, 0x400, nil}, {12, 0x400, nil}, {6, 0xc00, nil}} {
				if m := b.msgs[i]; m.typ != want.typ || m.flags != want.flags {
					t.Fatalf("message %d: type %d flags %#x, want type %d flags %#x", i, m.typ, m.flags, want.typ, want.flags)
				}
			}
			id := binary.BigEndian.Uint32(get(t, walk(t, set.body[4:]), 10).data)
			if id == 0 {
				t.Fatal("set id 0")
			}
			if want := slices.Concat(nfgen(IPv4), ref.set(id)); !bytes.Equal(set.body, want) {
				t.Errorf("NEWSET\n% x\nwant\n% x", set.body, want)
			}
			if want := slices.Concat(nfgen(IPv4), ref.elems(id)); !bytes.Equal(elems.body, want) {
				t.Errorf("NEWSETELEM\n% x\nwant\n% x", elems.body, want)
			}
			// The rule: table and chain, then the expressions.
			ra := walk(t, rule.body[4:])
			if want := slices.Concat(nfgen(IPv4), table("t"), nla(2, strz("h"))); !bytes.HasPrefix(rule.body, want) || len(ra) != 3 {
				t.Fatalf("NEWRULE\n% x\nwant table, chain and expressions:\n% x …", rule.body, want)
			}
			got, want := children(t, get(t, ra, 4)), ref.ruleExprs(id)
			if len(got) != len(want) {
				t.Fatalf("%d expressions, want %d", len(got), len(want))
			}
			for i, w := range want {
				wattrs := walk(t, w)
				if got[i].typ != 1 || !got[i].nested {
					t.Errorf("expression %d: attribute type %d, nested %v", i, got[i].typ, got[i].nested)
				}
				g, wantExpr := children(t, got[i]), children(t, wattrs[0])
				name := string(get(t, wantExpr, 1).data)
				if !bytes.Equal(get(t, g, 1).data, get(t, wantExpr, 1).data) {
					t.Errorf("expression %d: name %q, want %q", i, get(t, g, 1).data, name)
					continue
				}
				gd, wd := get(t, g, 2), get(t, wantExpr, 2)
				if !gd.nested {
					t.Errorf("expression %d: data not flagged nested", i)
				}
				if name == "lookup\x00" {
					gm, wm := byType(t, gd.data), byType(t, wd.data)
					if fmt.Sprint(gm) != fmt.Sprint(wm) {
						t.Errorf("lookup attributes by type\n%v\nwant\n%v", gm, wm)
					}
					continue
				}
				if !bytes.Equal(gd.data, wd.data) {
					t.Errorf("expression %s data\n% x\nwant\n% x", name, gd.data, wd.data)
				}
			}
			// The caller's expressions are left alone.
			if l := ref.exprs[ref.anonymousAt].(Lookup); l.Set != "" || l.setID != 0 {
				t.Errorf("AddRule changed the caller's Lookup: %+v", l)
			}
		})
	}
}

// TestBatchAnonymousSets: each anonymous set that a rule's Lookups carry is
// created just before the rule, a NEWSET then (with elements) a NEWSETELEM
// on the same set id, named __map%d or __set%d, declared with Size or the
// number of its elements; the rule's lookup names it and carries its id;
// and no two sets of a batch share an id.
func TestBatchAnonymousSets(t *testing.T) {
	elems := func(n int) []Element {
		es := make([]Element, n)
		for i := range es {
			es[i] = Element{Key: []byte{10, byte(i), 0, 0}, IntervalEnd: i%2 == 1}
		}
		return es
	}
	set := func(n int, size uint32) *Set {
		return &Set{Flags: SetAnonymous | SetConstant | SetInterval, KeyType: TypeIPv4Addr, KeyLen: 4, Elements: elems(n), Size: size}
	}
	vmap := func(n int) *Set {
		s := &Set{Flags: SetAnonymous | SetConstant | SetMap, KeyType: TypeInteger, KeyLen: 4, DataType: TypeVerdict}
		for i := range n {
			s.Elements = append(s.Elements, Element{Key: ne32(uint32(i)), Verdict: &Verdict{Code: VerdictGoto, Chain: fmt.Sprint("c", i)}})
		}
		return s
	}
	saddr := Payload{Dreg: Reg1, Base: BaseNetwork, Offset: 12, Len: 4}
	sameExprs := []Expr{saddr, Lookup{Sreg: Reg1, Anonymous: set(2, 0)}}
	type created struct {
		name string
		size uint32
	}
	tests := []struct {
		name  string
		build func(*Batch)
		// want are the anonymous sets, in order; rules lists how many
		// each rule uses.
		want  []created
		rules []int
	}{
		{"set", func(b *Batch) { b.AddRule("h", []Expr{saddr, Lookup{Sreg: Reg1, Anonymous: set(3, 0)}}, "") },
			[]created{{"__set%d", 3}}, []int{1}},
		{"declared size", func(b *Batch) { b.AddRule("h", []Expr{saddr, Lookup{Sreg: Reg1, Anonymous: set(4, 5)}}, "") },
			[]created{{"__set%d", 5}}, []int{1}},
		{"map", func(b *Batch) {
			b.AddRule("h", []Expr{Numgen{Dreg: Reg1, Modulus: 3}, Lookup{Sreg: Reg1, IsMap: true, Anonymous: vmap(3)}}, "")
		},
			[]created{{"__map%d", 3}}, []int{1}},
		{"two in one rule", func(b *Batch) {
			b.AddRule("h", []Expr{saddr, Lookup{Sreg: Reg1, Anonymous: set(2, 0)}, Numgen{Dreg: Reg1, Modulus: 2},
				Lookup{Sreg: Reg1, IsMap: true, Anonymous: vmap(2)}}, "c")
		}, []created{{"__set%d", 2}, {"__map%d", 2}}, []int{2}},
		{"rules and named sets", func(b *Batch) {
			b.AddSet(Set{Name: "affinity-a", Flags: SetTimeout | SetEval, KeyType: TypeIPv4Addr, KeyLen: 4, TimeoutMS: 1000})
			b.AddRule("h", []Expr{saddr, Lookup{Sreg: Reg1, Anonymous: set(1, 2)}}, "")
			b.AddRule("h", []Expr{saddr, Lookup{Sreg: Reg1, Set: "affinity-a"}}, "")
			b.AddRule("i", []Expr{Numgen{Dreg: Reg1, Modulus: 4}, Lookup{Sreg: Reg1, IsMap: true, Anonymous: vmap(4)}}, "")
			b.AddSet(Set{Name: "affinity-b", Flags: SetTimeout | SetEval, KeyType: TypeIPv4Addr, KeyLen: 4, TimeoutMS: 1000})
		}, []created{{"__set%d", 2}, {"__map%d", 4}}, []int{1, 0, 1}},
		{"named by NameAnonymousSets", func(b *Batch) {
			b.NameAnonymousSets("__sp-7-")
			b.AddRule("h", []Expr{saddr, Lookup{Sreg: Reg1, Anonymous: set(3, 0)}}, "")
			b.AddSet(Set{Name: "affinity-a", Flags: SetTimeout | SetEval, KeyType: TypeIPv4Addr, KeyLen: 4, TimeoutMS: 1000})
			b.AddRule("i", []Expr{Numgen{Dreg: Reg1, Modulus: 2}, Lookup{Sreg: Reg1, IsMap: true, Anonymous: vmap(2)}}, "")
		}, []created{{"__sp-7-1", 3}, {"__sp-7-3", 2}}, []int{1, 1}},
		{"the same expressions twice", func(b *Batch) {
			b.AddRule("h", sameExprs, "")
			b.AddRule("h", sameExprs, "")
		}, []created{{"__set%d", 2}, {"__set%d", 2}}, []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBatch(IPv4, "t")
			tc.build(b)
			ids := map[uint32]string{} // every set id of the batch
			type anon struct {
				name string
				id   uint32
			}
			var got []created
			var pending []anon // created since the last rule
			var rules []int
			for i, m := range b.msgs {
				as := walk(t, m.body[4:])
				switch m.typ {
				case msgNewSet:
					name := string(get(t, as, 2).data)
					id := binary.BigEndian.Uint32(get(t, as, 10).data)
					if prev, dup := ids[id]; dup {
						t.Fatalf("message %d: set id %d of %q already used by %q", i, id, name, prev)
					}
					ids[id] = name
					flags := binary.BigEndian.Uint32(get(t, as, 3).data)
					if flags&SetAnonymous == 0 {
						continue
					}
					size := binary.BigEndian.Uint32(get(t, children(t, get(t, as, 9)), 1).data)
					got = append(got, created{cstr(name), size})
					pending = append(pending, anon{name, id})
					if n := len(b.msgs); i+1 >= n || b.msgs[i+1].typ != msgNewSetElem {
						t.Fatalf("message %d: anonymous set not followed by its elements", i)
					}
					es := walk(t, b.msgs[i+1].body[4:])
					if string(get(t, es, 2).data) != name || binary.BigEndian.Uint32(get(t, es, 4).data) != id {
						t.Errorf("message %d: elements of set %q id %d, want %q id %d", i+1,
							get(t, es, 2).data, binary.BigEndian.Uint32(get(t, es, 4).data), name, id)
					}
				case msgNewRule:
					var lookups []anon
					for _, e := range children(t, get(t, as, 4)) {
						ea := children(t, e)
						if string(get(t, ea, 1).data) != "lookup\x00" {
							continue
						}
						data := children(t, get(t, ea, 2))
						l := anon{name: string(get(t, data, 1).data)}
						for _, a := range data {
							if a.typ == 4 {
								l.id = binary.BigEndian.Uint32(a.data)
							}
						}
						if l.id != 0 {
							lookups = append(lookups, l)
						} else if n := cstr(l.name); n == "__set%d" || n == "__map%d" {
							t.Errorf("message %d: lookup of %q without a set id", i, l.name)
						}
					}
					if fmt.Sprint(lookups) != fmt.Sprint(pending) {
						t.Errorf("message %d: the rule looks up %v, want the sets created just before it, %v", i, lookups, pending)
					}
					rules = append(rules, len(pending))
					pending = nil
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("anonymous sets %v, want %v", got, tc.want)
			}
			if !slices.Equal(rules, tc.rules) {
				t.Errorf("anonymous sets per rule %v, want %v", rules, tc.rules)
			}
		})
	}
}

// cstr is a NUL-terminated attribute value as a Go string.
func cstr(s string) string {
	if len(s) == 0 || s[len(s)-1] != 0 {
		return "<not NUL-terminated " + s + ">"
	}
	return s[:len(s)-1]
}
