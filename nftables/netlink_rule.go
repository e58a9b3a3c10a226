package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

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
	words := strings.Fields(text)
	var exprs []nftnl.Expr
	for len(words) > 0 {
		stmt, used, isVerdict, err := enc.statement(words)
		if err != nil {
			return nil, err
		}
		exprs = append(exprs, stmt...)
		words = words[used:]
		if isVerdict && len(words) > 0 {
			return nil, fmt.Errorf("statement after the verdict")
		}
	}
	return exprs, nil
}

// statement encodes the statement that words start with, returning the
// number of words it used and whether it is a verdict (which must end the
// rule).
func (enc encoder) statement(words []string) (exprs []nftnl.Expr, used int, isVerdict bool, err error) {
	switch words[0] {
	case enc.ipX():
		exprs, used, err = enc.addrMatch(words)
	case "tcp", "udp", "sctp":
		exprs, used, err = enc.portMatch(words)
	case "meta":
		exprs, used, err = enc.protoMatch(words)
	case "fib":
		if len(words) < 4 || words[1] != "saddr" || words[2] != "type" || words[3] != "local" {
			return nil, 0, false, fmt.Errorf("unknown fib statement")
		}
		exprs = []nftnl.Expr{
			nftnl.FibSaddrType{Dreg: nftnl.Reg1},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.NativeEndian.AppendUint32(nil, 2)}, // RTN_LOCAL
		}
		used = 4
	case "numgen":
		exprs, used, err = enc.numgenMap(words)
		isVerdict = true
	case "update":
		if len(words) < 6 || !strings.HasPrefix(words[1], "@") || words[2] != "{" || words[3] != enc.ipX() || words[4] != "saddr" || words[5] != "}" {
			return nil, 0, false, fmt.Errorf("unknown update statement")
		}
		exprs, used = []nftnl.Expr{enc.addrLoad("saddr"), nftnl.DynsetUpdate{Sreg: nftnl.Reg1, Set: words[1][1:]}}, 6
	case "dnat":
		exprs, used, err = enc.dnat(words)
	case "jump", "goto":
		if len(words) < 2 {
			return nil, 0, false, fmt.Errorf("%s without a chain", words[0])
		}
		v, _ := parseVerdict(words[:2])
		exprs, used, isVerdict = []nftnl.Expr{nftnl.VerdictExpr(v)}, 2, true
	case "drop", "accept", "return":
		v, _ := parseVerdict(words[:1])
		exprs, used, isVerdict = []nftnl.Expr{nftnl.VerdictExpr(v)}, 1, true
	default:
		return nil, 0, false, fmt.Errorf("unknown statement %q", words[0])
	}
	return exprs, used, isVerdict, err
}

// portMatch encodes `tcp|udp|sctp dport PORT`.
func (enc encoder) portMatch(words []string) ([]nftnl.Expr, int, error) {
	if len(words) < 3 || words[1] != "dport" {
		return nil, 0, fmt.Errorf("unknown statement %q", words[0])
	}
	port, err := strconv.ParseUint(words[2], 10, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("port %q", words[2])
	}
	return []nftnl.Expr{
		nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
		nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{protoNumbers[words[0]]}},
		nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseTransport, Offset: 2, Len: 2},
		nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.BigEndian.AppendUint16(nil, uint16(port))},
	}, 3, nil
}

// protoMatch encodes `meta l4proto PROTO`.
func (enc encoder) protoMatch(words []string) ([]nftnl.Expr, int, error) {
	proto, ok := byte(0), false
	if len(words) >= 3 && words[1] == "l4proto" {
		proto, ok = protoNumbers[words[2]]
	}
	if !ok {
		return nil, 0, fmt.Errorf("unknown meta statement")
	}
	return []nftnl.Expr{
		nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
		nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{proto}},
	}, 3, nil
}

// dnat encodes `dnat to ADDR:PORT`.
func (enc encoder) dnat(words []string) ([]nftnl.Expr, int, error) {
	if len(words) < 3 || words[1] != "to" {
		return nil, 0, fmt.Errorf("unknown dnat statement")
	}
	to, err := netip.ParseAddrPort(words[2])
	if err != nil || !familyAddr(to.Addr(), enc.v6) {
		return nil, 0, fmt.Errorf("dnat to %q", words[2])
	}
	return []nftnl.Expr{
		nftnl.Immediate{Dreg: nftnl.Reg1, Data: to.Addr().AsSlice()},
		nftnl.Immediate{Dreg: nftnl.Reg2, Data: binary.BigEndian.AppendUint16(nil, to.Port())},
		nftnl.DNAT{Family: enc.family, RegAddr: nftnl.Reg1, RegProto: nftnl.Reg2},
	}, 3, nil
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
		v, err := parseVerdict(body[i+2 : i+4])
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
