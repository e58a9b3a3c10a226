package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// txWriter is what the renderers write to: a knftables.Transaction, or an
// opRecorder for the netlink path.
type txWriter interface {
	Add(knftables.Object)
	Flush(knftables.Object)
	Delete(knftables.Object)
}

type opVerb uint8

const (
	opAdd opVerb = iota
	opFlush
	opDelete
)

// op is one operation of a transaction.
type op struct {
	verb opVerb
	obj  knftables.Object
}

// opRecorder records the operations a renderer writes, to be applied over
// netlink or replayed into a knftables.Transaction.
type opRecorder struct{ ops []op }

func (r *opRecorder) Add(o knftables.Object)    { r.ops = append(r.ops, op{opAdd, o}) }
func (r *opRecorder) Flush(o knftables.Object)  { r.ops = append(r.ops, op{opFlush, o}) }
func (r *opRecorder) Delete(o knftables.Object) { r.ops = append(r.ops, op{opDelete, o}) }

// replay writes the recorded operations to tx.
func (r *opRecorder) replay(tx txWriter) {
	for _, o := range r.ops {
		switch o.verb {
		case opAdd:
			tx.Add(o.obj)
		case opFlush:
			tx.Flush(o.obj)
		case opDelete:
			tx.Delete(o.obj)
		}
	}
}

// errNotNetlink says that an operation is outside what the netlink path
// encodes; the transaction then goes through nft.
var errNotNetlink = errors.New("not encodable for netlink")

// netlinkBatch encodes ops, as RenderChanges writes them, as one nftnl
// batch for the table of a family, the same objects nft would make of
// them. Anonymous sets are named anonPrefix and a number when anonPrefix
// is not "" (see nftnl.Batch.NameAnonymousSets). It returns an error
// wrapping errNotNetlink for any operation it does not know.
func netlinkBatch(family knftables.Family, table string, ops []op, anonPrefix string) (*nftnl.Batch, error) {
	enc := newEncoder(family)
	b := nftnl.NewBatch(enc.family, table)
	b.NameAnonymousSets(anonPrefix)
	for _, o := range ops {
		if err := enc.op(b, o); err != nil {
			return nil, fmt.Errorf("%w: %w", errNotNetlink, err)
		}
	}
	return b, nil
}

type encoder struct {
	v6     bool
	family nftnl.Family
}

// newEncoder returns the encoder for a table of family.
func newEncoder(family knftables.Family) encoder {
	if family == knftables.IPv6Family {
		return encoder{v6: true, family: nftnl.IPv6}
	}
	return encoder{family: nftnl.IPv4}
}

func (enc encoder) op(b *nftnl.Batch, o op) error {
	switch obj := o.obj.(type) {
	case *knftables.Chain:
		if obj.Type != nil || obj.Hook != nil || obj.Comment != nil {
			return fmt.Errorf("base chain or chain comment %s", obj.Name)
		}
		switch o.verb {
		case opAdd:
			b.AddChain(obj.Name)
		case opFlush:
			b.FlushChain(obj.Name)
		case opDelete:
			b.DelChain(obj.Name)
		}
		return nil
	case *knftables.Rule:
		if o.verb != opAdd || obj.Index != nil || obj.Handle != nil {
			return fmt.Errorf("rule operation other than append in chain %s", obj.Chain)
		}
		exprs, err := enc.rule(obj.Rule)
		if err != nil {
			return fmt.Errorf("rule %q: %w", obj.Rule, err)
		}
		comment := ""
		if obj.Comment != nil {
			comment = *obj.Comment
		}
		b.AddRule(obj.Chain, exprs, comment)
		return nil
	case *knftables.Set:
		switch o.verb {
		case opAdd:
			s, err := enc.affinitySet(obj)
			if err != nil {
				return err
			}
			b.AddSet(s)
		case opDelete:
			b.DelSet(obj.Name)
		default:
			return fmt.Errorf("flush of set %s", obj.Name)
		}
		return nil
	case *knftables.Map:
		if o.verb != opDelete {
			return fmt.Errorf("map %s other than a delete", obj.Name)
		}
		b.DelSet(obj.Name)
		return nil
	case *knftables.Element:
		name := obj.Set + obj.Map
		key, err := enc.elementKey(obj.Key)
		if err != nil {
			return fmt.Errorf("element of %s: %w", name, err)
		}
		switch o.verb {
		case opAdd:
			e := nftnl.Element{Key: key}
			if obj.Map != "" {
				if len(obj.Value) != 1 {
					return fmt.Errorf("element of %s: value %q", name, obj.Value)
				}
				v, err := verdictOf(strings.Fields(obj.Value[0]))
				if err != nil {
					return fmt.Errorf("element of %s: %w", name, err)
				}
				e.Verdict = &v
			}
			if obj.Comment != nil {
				e.Comment = *obj.Comment
			}
			b.AddElements(name, []nftnl.Element{e})
		case opDelete:
			b.DelElements(name, [][]byte{key})
		default:
			return fmt.Errorf("flush of an element of %s", name)
		}
		return nil
	}
	return fmt.Errorf("object %T", o.obj)
}

// affinitySet encodes the sets that RenderChanges adds: per-endpoint
// affinity sets of client addresses, with a timeout.
func (enc encoder) affinitySet(s *knftables.Set) (nftnl.Set, error) {
	wantType := "ipv4_addr"
	if enc.v6 {
		wantType = "ipv6_addr"
	}
	if s.Type != wantType || s.TypeOf != "" || s.Timeout == nil || s.Comment != nil || s.Size != nil || s.Policy != nil ||
		!slices.Equal(s.Flags, []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}) || s.Timeout.Truncate(time.Millisecond) != *s.Timeout {
		return nftnl.Set{}, fmt.Errorf("set %s other than an affinity set", s.Name)
	}
	return nftnl.Set{
		Name: s.Name, Flags: nftnl.SetTimeout | nftnl.SetEval,
		KeyType: enc.addrType(), KeyLen: uint32(enc.addrLen()),
		TimeoutMS: uint64(s.Timeout.Milliseconds()),
		Userdata:  udataKeyBigEndian,
	}, nil
}

// User data that nft 1.0.6 stores with sets (libnftnl's NFTNL_UDATA_SET_*
// TLVs), which it reads back to print them: the key's byte order, and for
// the anonymous sets of rules how their key and data were written.
var (
	// KEYBYTEORDER big endian: named address sets.
	udataKeyBigEndian = []byte{0, 4, 2, 0, 0, 0}
	// KEYBYTEORDER big endian, MERGE_ELEMENTS, KEY_TYPEOF "ip saddr": the
	// interval sets of `ip saddr { … }`.
	udataSaddrSet4 = []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 12, 0, 0, 0, 1, 4, 11, 0, 0, 0}
	// The same for "ip6 saddr".
	udataSaddrSet6 = []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 13, 0, 0, 0, 1, 4, 8, 0, 0, 0}
	// KEYBYTEORDER host, DATABYTEORDER, DATA_TYPEOF verdict,
	// DATA_INTERVAL no: the verdict maps of `numgen random mod N vmap`.
	udataNumgenMap = []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 4, 8, 0, 4, 1, 0, 0, 0, 1, 0, 6, 4, 0, 0, 0, 0}
)

func (enc encoder) addrType() uint32 {
	if enc.v6 {
		return nftnl.TypeIPv6Addr
	}
	return nftnl.TypeIPv4Addr
}

func (enc encoder) addrLen() int {
	if enc.v6 {
		return 16
	}
	return 4
}

func (enc encoder) ipX() string {
	if enc.v6 {
		return "ip6"
	}
	return "ip"
}

// addr parses an address of the encoder's family.
func (enc encoder) addr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !familyAddr(a, enc.v6) {
		return netip.Addr{}, fmt.Errorf("address %q", s)
	}
	return a, nil
}

// familyAddr reports whether a is a plain address of the family: no zone,
// not IPv4-mapped.
func familyAddr(a netip.Addr, v6 bool) bool {
	return a.Is6() == v6 && a.Zone() == "" && !a.Is4In6()
}

// elementKey encodes the keys of the backend's maps and sets: an
// address (cluster-ips), protocol . port (the node-port maps) or
// address . protocol . port, each field padded to 4 bytes.
func (enc encoder) elementKey(fields []string) ([]byte, error) {
	addr, proto, port, err := parseKeyFields(fields, enc.v6)
	if err != nil {
		return nil, err
	}
	var key []byte
	if addr.IsValid() {
		key = addr.AsSlice()
	}
	if proto == "" {
		return key, nil
	}
	key = append(key, protoNumbers[proto], 0, 0, 0)
	return append(binary.BigEndian.AppendUint16(key, port), 0, 0), nil
}

// parseKeyFields parses the key of an element of the backend's maps and
// sets, as knftables holds it: an address, a protocol and a port, or
// both. proto is "" when the key has no protocol and port, addr invalid
// when it has no address.
func parseKeyFields(fields []string, v6 bool) (addr netip.Addr, proto string, port uint16, err error) {
	bad := fmt.Errorf("key %q", fields)
	rest := fields
	if len(fields) != 2 {
		if len(fields) == 0 {
			return netip.Addr{}, "", 0, bad
		}
		if addr, err = netip.ParseAddr(fields[0]); err != nil || !familyAddr(addr, v6) {
			return netip.Addr{}, "", 0, bad
		}
		rest = fields[1:]
	}
	switch len(rest) {
	case 0:
		return addr, "", 0, nil
	case 2:
		p, err := strconv.ParseUint(rest[1], 10, 16)
		if _, ok := protoNumbers[rest[0]]; !ok || err != nil {
			return netip.Addr{}, "", 0, bad
		}
		return addr, rest[0], uint16(p), nil
	}
	return netip.Addr{}, "", 0, bad
}

var protoNumbers = map[string]byte{"tcp": 6, "udp": 17, "sctp": 132}

// verdictOf parses a verdict: drop, accept, return, jump CHAIN, goto CHAIN.
func verdictOf(words []string) (nftnl.Verdict, error) {
	switch {
	case len(words) == 1 && words[0] == "drop":
		return nftnl.Verdict{Code: nftnl.VerdictDrop}, nil
	case len(words) == 1 && words[0] == "accept":
		return nftnl.Verdict{Code: nftnl.VerdictAccept}, nil
	case len(words) == 1 && words[0] == "return":
		return nftnl.Verdict{Code: nftnl.VerdictReturn}, nil
	case len(words) == 2 && words[0] == "jump":
		return nftnl.Verdict{Code: nftnl.VerdictJump, Chain: words[1]}, nil
	case len(words) == 2 && words[0] == "goto":
		return nftnl.Verdict{Code: nftnl.VerdictGoto, Chain: words[1]}, nil
	}
	return nftnl.Verdict{}, fmt.Errorf("verdict %q", strings.Join(words, " "))
}

// rule encodes the statements of the per-Service chains' rules (see
// renderer.chains), as nft 1.0.6 encodes them:
//
//	ip|ip6 saddr|daddr [!=] ADDR|PREFIX|@SET|{ ADDR|PREFIX , … }
//	tcp|udp|sctp dport PORT
//	meta l4proto PROTO
//	fib saddr type local
//	numgen random mod N vmap { 0 : goto CHAIN , … }
//	update @SET { ip|ip6 saddr }
//	dnat to ADDR:PORT
//	jump CHAIN, goto CHAIN, drop, accept, return
func (enc encoder) rule(text string) ([]nftnl.Expr, error) {
	w := strings.Fields(text)
	var exprs []nftnl.Expr
	verdict := false
	for len(w) > 0 {
		if verdict {
			return nil, fmt.Errorf("statement after the verdict")
		}
		var (
			es  []nftnl.Expr
			n   int
			err error
		)
		switch w[0] {
		case enc.ipX():
			es, n, err = enc.addrMatch(w)
		case "tcp", "udp", "sctp":
			if len(w) < 3 || w[1] != "dport" {
				return nil, fmt.Errorf("unknown statement %q", w[0])
			}
			port, perr := strconv.ParseUint(w[2], 10, 16)
			if perr != nil {
				return nil, fmt.Errorf("port %q", w[2])
			}
			es = []nftnl.Expr{
				nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
				nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{protoNumbers[w[0]]}},
				nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseTransport, Offset: 2, Len: 2},
				nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.BigEndian.AppendUint16(nil, uint16(port))},
			}
			n = 3
		case "meta":
			proto, ok := byte(0), false
			if len(w) >= 3 && w[1] == "l4proto" {
				proto, ok = protoNumbers[w[2]]
			}
			if !ok {
				return nil, fmt.Errorf("unknown meta statement")
			}
			es = []nftnl.Expr{
				nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
				nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{proto}},
			}
			n = 3
		case "fib":
			if len(w) < 4 || w[1] != "saddr" || w[2] != "type" || w[3] != "local" {
				return nil, fmt.Errorf("unknown fib statement")
			}
			es = []nftnl.Expr{
				nftnl.FibSaddrType{Dreg: nftnl.Reg1},
				nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.NativeEndian.AppendUint32(nil, 2)}, // RTN_LOCAL
			}
			n = 4
		case "numgen":
			es, n, err = enc.numgenMap(w)
			verdict = true
		case "update":
			if len(w) < 6 || !strings.HasPrefix(w[1], "@") || w[2] != "{" || w[3] != enc.ipX() || w[4] != "saddr" || w[5] != "}" {
				return nil, fmt.Errorf("unknown update statement")
			}
			es = []nftnl.Expr{enc.addrLoad("saddr"), nftnl.DynsetUpdate{Sreg: nftnl.Reg1, Set: w[1][1:]}}
			n = 6
		case "dnat":
			if len(w) < 3 || w[1] != "to" {
				return nil, fmt.Errorf("unknown dnat statement")
			}
			to, perr := netip.ParseAddrPort(w[2])
			if perr != nil || !familyAddr(to.Addr(), enc.v6) {
				return nil, fmt.Errorf("dnat to %q", w[2])
			}
			es = []nftnl.Expr{
				nftnl.Immediate{Dreg: nftnl.Reg1, Data: to.Addr().AsSlice()},
				nftnl.Immediate{Dreg: nftnl.Reg2, Data: binary.BigEndian.AppendUint16(nil, to.Port())},
				nftnl.DNAT{Family: enc.family, RegAddr: nftnl.Reg1, RegProto: nftnl.Reg2},
			}
			n = 3
		case "jump", "goto":
			if len(w) < 2 {
				return nil, fmt.Errorf("%s without a chain", w[0])
			}
			v, _ := verdictOf(w[:2])
			es, n, verdict = []nftnl.Expr{nftnl.VerdictExpr(v)}, 2, true
		case "drop", "accept", "return":
			v, _ := verdictOf(w[:1])
			es, n, verdict = []nftnl.Expr{nftnl.VerdictExpr(v)}, 1, true
		default:
			return nil, fmt.Errorf("unknown statement %q", w[0])
		}
		if err != nil {
			return nil, err
		}
		exprs = append(exprs, es...)
		w = w[n:]
	}
	return exprs, nil
}

// addrLoad loads the source or destination address into register 1.
func (enc encoder) addrLoad(field string) nftnl.Payload {
	p := nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseNetwork, Len: uint32(enc.addrLen())}
	switch {
	case enc.v6 && field == "saddr":
		p.Offset = 8
	case enc.v6:
		p.Offset = 24
	case field == "saddr":
		p.Offset = 12
	default:
		p.Offset = 16
	}
	return p
}

// addrMatch encodes `ip saddr|daddr [!=] OPERAND`, returning the number of
// words it used.
func (enc encoder) addrMatch(w []string) ([]nftnl.Expr, int, error) {
	if len(w) < 3 || (w[1] != "saddr" && w[1] != "daddr") {
		return nil, 0, fmt.Errorf("unknown %s statement", w[0])
	}
	field := w[1]
	n := 2
	op := uint32(nftnl.CmpEq)
	if w[n] == "!=" {
		op = nftnl.CmpNeq
		n++
	}
	if n >= len(w) {
		return nil, 0, fmt.Errorf("%s %s without a value", w[0], field)
	}
	switch v := w[n]; {
	case strings.HasPrefix(v, "@"):
		if op != nftnl.CmpEq {
			return nil, 0, fmt.Errorf("negated named set")
		}
		return []nftnl.Expr{enc.addrLoad(field), nftnl.Lookup{Sreg: nftnl.Reg1, Set: v[1:]}}, n + 1, nil
	case v == "{":
		end := slices.Index(w[n:], "}")
		if end < 0 || field != "saddr" {
			return nil, 0, fmt.Errorf("anonymous set")
		}
		var items []string
		for _, item := range w[n+1 : n+end] {
			for _, s := range strings.Split(item, ",") {
				if s != "" {
					items = append(items, s)
				}
			}
		}
		if len(items) == 1 {
			// nft writes a set of one as a plain comparison.
			p, err := enc.prefix(items[0])
			if err != nil {
				return nil, 0, err
			}
			return enc.prefixMatch(field, op, p), n + end + 1, nil
		}
		set, err := enc.intervalSet(items)
		if err != nil {
			return nil, 0, err
		}
		return []nftnl.Expr{enc.addrLoad(field), nftnl.Lookup{Sreg: nftnl.Reg1, Anonymous: &set, Invert: op == nftnl.CmpNeq}}, n + end + 1, nil
	default:
		p, err := enc.prefix(v)
		if err != nil {
			return nil, 0, err
		}
		return enc.prefixMatch(field, op, p), n + 1, nil
	}
}

// prefix parses an address or a prefix of the encoder's family.
func (enc encoder) prefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := enc.addr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !familyAddr(p.Addr(), enc.v6) || p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("prefix %q", s)
	}
	return p, nil
}

// prefixMatch compares an address with a prefix as nft does: whole bytes
// by loading only those, other lengths through a mask.
func (enc encoder) prefixMatch(field string, op uint32, p netip.Prefix) []nftnl.Expr {
	load := enc.addrLoad(field)
	addr := p.Addr().AsSlice()
	if p.Bits()%8 == 0 && p.Bits() > 0 {
		load.Len = uint32(p.Bits() / 8)
		return []nftnl.Expr{load, nftnl.Cmp{Sreg: nftnl.Reg1, Op: op, Data: addr[:load.Len]}}
	}
	mask := make([]byte, len(addr))
	for i := range p.Bits() {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []nftnl.Expr{
		load,
		nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1, Mask: mask},
		nftnl.Cmp{Sreg: nftnl.Reg1, Op: op, Data: addr},
	}
}

// intervalSet is the anonymous interval set nft makes of `{ a , b/n , … }`:
// the ranges sorted and merged where they overlap or touch, each one a
// start element and an end element (the first address after it; none for
// a range up to the last address), after an end element at the zero
// address when the first range starts later.
func (enc encoder) intervalSet(items []string) (nftnl.Set, error) {
	type span struct{ from, to netip.Addr } // inclusive
	spans := make([]span, 0, len(items))
	for _, s := range items {
		p, err := enc.prefix(s)
		if err != nil {
			return nftnl.Set{}, err
		}
		spans = append(spans, span{p.Addr(), lastAddr(p)})
	}
	if len(spans) == 0 {
		return nftnl.Set{}, fmt.Errorf("empty set")
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	merged := spans[:1]
	for _, s := range spans[1:] {
		last := &merged[len(merged)-1]
		if next := last.to.Next(); next.IsValid() && s.from.Compare(next) <= 0 || !next.IsValid() {
			if s.to.Compare(last.to) > 0 {
				last.to = s.to
			}
			continue
		}
		merged = append(merged, s)
	}
	var elems []nftnl.Element
	zero := netip.IPv4Unspecified()
	if enc.v6 {
		zero = netip.IPv6Unspecified()
	}
	if merged[0].from != zero {
		elems = append(elems, nftnl.Element{Key: zero.AsSlice(), IntervalEnd: true})
	}
	size := 0
	for _, s := range merged {
		end := s.to.Next()
		if !end.IsValid() {
			// Up to the last address: no end element, and nft declares
			// the size as if there were one.
			elems = append(elems, nftnl.Element{Key: s.from.AsSlice(), IntervalOpen: true})
			size = len(elems) + 1
			break
		}
		elems = append(elems,
			nftnl.Element{Key: s.from.AsSlice()},
			nftnl.Element{Key: end.AsSlice(), IntervalEnd: true})
	}
	udata := udataSaddrSet4
	if enc.v6 {
		udata = udataSaddrSet6
	}
	return nftnl.Set{
		Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetInterval,
		KeyType: enc.addrType(), KeyLen: uint32(enc.addrLen()),
		Userdata: udata, Elements: elems, Size: uint32(size),
	}, nil
}

// lastAddr is the last address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// numgenMap encodes `numgen random mod N vmap { 0 : goto A , 1 : goto B … }`.
func (enc encoder) numgenMap(w []string) ([]nftnl.Expr, int, error) {
	if len(w) < 6 || w[1] != "random" || w[2] != "mod" || w[4] != "vmap" || w[5] != "{" {
		return nil, 0, fmt.Errorf("unknown numgen statement")
	}
	mod, err := strconv.ParseUint(w[3], 10, 32)
	if err != nil || mod == 0 {
		return nil, 0, fmt.Errorf("numgen modulus %q", w[3])
	}
	end := slices.Index(w, "}")
	if end < 0 {
		return nil, 0, fmt.Errorf("numgen map without an end")
	}
	// "0 : goto A , 1 : goto B": entries of four words, separated by ",".
	body := slices.DeleteFunc(slices.Clone(w[6:end]), func(s string) bool { return s == "," })
	if len(body)%4 != 0 {
		return nil, 0, fmt.Errorf("numgen map entries %q", body)
	}
	var elems []nftnl.Element
	for i := 0; i < len(body); i += 4 {
		k, err := strconv.ParseUint(body[i], 10, 32)
		if err != nil || body[i+1] != ":" {
			return nil, 0, fmt.Errorf("numgen map entry %q", body[i:i+4])
		}
		v, err := verdictOf(body[i+2 : i+4])
		if err != nil {
			return nil, 0, err
		}
		elems = append(elems, nftnl.Element{Key: binary.NativeEndian.AppendUint32(nil, uint32(k)), Verdict: &v})
	}
	set := nftnl.Set{
		Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetMap,
		KeyType: nftnl.TypeInteger, KeyLen: 4, DataType: nftnl.TypeVerdict,
		Userdata: udataNumgenMap, Elements: elems,
	}
	return []nftnl.Expr{
		nftnl.Numgen{Dreg: nftnl.Reg1, Modulus: uint32(mod)},
		nftnl.Lookup{Sreg: nftnl.Reg1, Anonymous: &set, IsMap: true},
	}, end + 1, nil
}
