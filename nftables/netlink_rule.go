package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/internal/prefix"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// rule encodes the statements of the per-Service chains' rules (see
// renderer.chains) as nft 1.0.6 encodes their text (model.Rule.String):
//
//	ip|ip6 saddr|daddr [!=] ADDR|PREFIX|{ ADDR|PREFIX , … } (AddrIn, Equal)
//	ip|ip6 saddr @SET (InSet)
//	tcp|udp|sctp dport PORT (DportEq)
//	meta l4proto PROTO (Equal)
//	fib saddr type local (FibLocal)
//	numgen random mod N vmap { 0 : goto CHAIN , … } (NumgenGoto)
//	update @SET { ip|ip6 saddr } (UpdateSet)
//	dnat to ADDR:PORT (DNATTo)
//	dnat ip|ip6 addr . port to numgen random mod N map { 0 : ADDR . PORT , … } (NumgenDNAT)
//	mark set mark or BITS (MarkOr)
//	jump CHAIN, goto CHAIN, drop, accept, return (Verdict)
//
// A verdict ends the rule. Any other statement, or an address of the other
// family, is an error.
func (enc encoder) rule(stmts []model.Stmt) ([]nftnl.Expr, error) {
	var exprs []nftnl.Expr
	for i, st := range stmts {
		e, isVerdict, err := enc.statement(st)
		if err != nil {
			return nil, fmt.Errorf("statement %q: %w", st, err)
		}
		if isVerdict && i < len(stmts)-1 {
			return nil, fmt.Errorf("statement after the verdict %q", st)
		}
		exprs = append(exprs, e...)
	}
	return exprs, nil
}

// statement encodes one statement, reporting whether it is a verdict
// (which must end the rule).
func (enc encoder) statement(st model.Stmt) (exprs []nftnl.Expr, isVerdict bool, err error) {
	switch st := st.(type) {
	case model.Equal:
		exprs, err = enc.equal(st)
	case model.AddrIn:
		exprs, err = enc.addrIn(st)
	case model.InSet:
		exprs, err = enc.inSet(st)
	case model.DportEq:
		exprs, err = portMatch(st)
	case model.FibLocal:
		if !st.Saddr {
			return nil, false, fmt.Errorf("fib daddr")
		}
		exprs = []nftnl.Expr{
			nftnl.FibSaddrType{Dreg: nftnl.Reg1},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.NativeEndian.AppendUint32(nil, 2)}, // RTN_LOCAL
		}
	case model.NumgenGoto:
		exprs, err = enc.numgenMap(st)
		isVerdict = true
	case model.UpdateSet:
		var load nftnl.Payload
		if load, err = enc.addrLoad(st.Field); err == nil && enc.addrField(st.Field) != "saddr" {
			err = fmt.Errorf("update with %s", st.Field)
		}
		exprs = []nftnl.Expr{load, nftnl.DynsetUpdate{Sreg: nftnl.Reg1, Set: st.Set}}
	case model.DNATTo:
		exprs, err = enc.dnat(st)
	case model.NumgenDNAT:
		exprs, err = enc.numgenDNAT(st)
	case model.MarkOr:
		exprs = []nftnl.Expr{
			nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaMark},
			nftnl.Bitwise{Sreg: nftnl.Reg1, Dreg: nftnl.Reg1,
				Mask: binary.NativeEndian.AppendUint32(nil, ^st.Bits), Xor: binary.NativeEndian.AppendUint32(nil, st.Bits)},
			nftnl.MetaSet{Key: nftnl.MetaMark, Sreg: nftnl.Reg1},
		}
	case model.Verdict:
		var v nftnl.Verdict
		v, err = netlinkVerdict(st)
		exprs, isVerdict = []nftnl.Expr{nftnl.VerdictExpr(v)}, true
	default:
		err = fmt.Errorf("statement %T", st)
	}
	return exprs, isVerdict, err
}

// netlinkVerdict is a verdict of a rule or a verdict-map element: drop, accept,
// return, jump CHAIN, goto CHAIN.
func netlinkVerdict(v model.Verdict) (nftnl.Verdict, error) {
	codes := map[string]int32{"drop": nftnl.VerdictDrop, "accept": nftnl.VerdictAccept, "return": nftnl.VerdictReturn,
		"jump": nftnl.VerdictJump, "goto": nftnl.VerdictGoto}
	code, ok := codes[v.Kind]
	if !ok || (v.Chain != "") != (v.Kind == "jump" || v.Kind == "goto") {
		return nftnl.Verdict{}, fmt.Errorf("verdict %q", v)
	}
	return nftnl.Verdict{Code: code, Chain: v.Chain}, nil
}

// equal encodes a comparison of an address with an address, or of
// `meta l4proto` with a protocol.
func (enc encoder) equal(st model.Equal) ([]nftnl.Expr, error) {
	if st.Field == model.L4Proto {
		proto, ok := st.Value.Uint()
		if !ok || st.Neg || !knownProto(proto) {
			return nil, fmt.Errorf("protocol %s", st.Value)
		}
		return []nftnl.Expr{
			nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
			nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{byte(proto)}},
		}, nil
	}
	return enc.addrIn(model.AddrIn{Field: st.Field, Values: []model.Datum{st.Value}, Neg: st.Neg})
}

// knownProto reports whether proto is TCP, UDP or SCTP.
func knownProto(proto uint32) bool { return proto == 6 || proto == 17 || proto == 132 }

// portMatch encodes `tcp|udp|sctp dport PORT`.
func portMatch(st model.DportEq) ([]nftnl.Expr, error) {
	if !knownProto(uint32(st.Proto)) {
		return nil, fmt.Errorf("protocol %d", st.Proto)
	}
	return []nftnl.Expr{
		nftnl.Meta{Dreg: nftnl.Reg1, Key: nftnl.MetaL4Proto},
		nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: []byte{st.Proto}},
		nftnl.Payload{Dreg: nftnl.Reg1, Base: nftnl.BaseTransport, Offset: 2, Len: 2},
		nftnl.Cmp{Sreg: nftnl.Reg1, Op: nftnl.CmpEq, Data: binary.BigEndian.AppendUint16(nil, st.Port)},
	}, nil
}

// dnat encodes `dnat to ADDR:PORT`.
func (enc encoder) dnat(st model.DNATTo) ([]nftnl.Expr, error) {
	if !familyAddr(st.To.Addr(), enc.v6) {
		return nil, fmt.Errorf("dnat to %s", st.To)
	}
	return []nftnl.Expr{
		nftnl.Immediate{Dreg: nftnl.Reg1, Data: st.To.Addr().AsSlice()},
		nftnl.Immediate{Dreg: nftnl.Reg2, Data: binary.BigEndian.AppendUint16(nil, st.To.Port())},
		nftnl.DNAT{Family: enc.family, RegAddr: nftnl.Reg1, RegProto: nftnl.Reg2},
	}, nil
}

// inSet encodes the lookup of an address in a named set.
func (enc encoder) inSet(st model.InSet) ([]nftnl.Expr, error) {
	if len(st.Key) != 1 || st.Neg {
		return nil, fmt.Errorf("lookup other than of one address, not negated")
	}
	field, ok := st.Key[0].(model.Field)
	if !ok {
		return nil, fmt.Errorf("lookup of %s", st.Key[0])
	}
	load, err := enc.addrLoad(field)
	if err != nil {
		return nil, err
	}
	return []nftnl.Expr{load, nftnl.Lookup{Sreg: nftnl.Reg1, Set: st.Set}}, nil
}

// addrField is "saddr" or "daddr" for the address fields of the encoder's
// family, "" for the others.
func (enc encoder) addrField(f model.Field) string {
	switch {
	case !enc.v6 && f == model.IPSaddr, enc.v6 && f == model.IP6Saddr:
		return "saddr"
	case !enc.v6 && f == model.IPDaddr, enc.v6 && f == model.IP6Daddr:
		return "daddr"
	}
	return ""
}

// addrLoad loads the source or destination address into register 1; an
// error for the other fields and those of the other family.
func (enc encoder) addrLoad(f model.Field) (nftnl.Payload, error) {
	field := enc.addrField(f)
	if field == "" {
		return nftnl.Payload{}, fmt.Errorf("field %s in a table of family %s", f, enc.ipX())
	}
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
	return p, nil
}

// addrIn encodes the match of an address with one address or prefix (a
// comparison) or with several (a lookup in an anonymous interval set), as
// nft does: nft writes a set of one as a comparison.
func (enc encoder) addrIn(st model.AddrIn) ([]nftnl.Expr, error) {
	if len(st.Values) == 0 {
		return nil, fmt.Errorf("empty set")
	}
	prefixes := make([]netip.Prefix, len(st.Values))
	for i, v := range st.Values {
		p, ok := v.AsPrefix()
		if !ok || !familyAddr(p.Addr(), enc.v6) || p.Masked() != p {
			return nil, fmt.Errorf("address %s in a table of family %s", v, enc.ipX())
		}
		prefixes[i] = p
	}
	op := uint32(nftnl.CmpEq)
	if st.Neg {
		op = nftnl.CmpNeq
	}
	load, err := enc.addrLoad(st.Field)
	if err != nil {
		return nil, err
	}
	if len(prefixes) == 1 {
		return prefixMatch(load, op, prefixes[0]), nil
	}
	set := enc.intervalSet(prefixes)
	return []nftnl.Expr{load, nftnl.Lookup{Sreg: nftnl.Reg1, Anonymous: &set, Invert: st.Neg}}, nil
}

// prefixMatch compares an address with a prefix as nft does: whole bytes
// by loading only those, other lengths through a mask.
func prefixMatch(load nftnl.Payload, op uint32, p netip.Prefix) []nftnl.Expr {
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
func (enc encoder) intervalSet(prefixes []netip.Prefix) nftnl.Set {
	type span struct{ from, to netip.Addr } // inclusive
	spans := make([]span, 0, len(prefixes))
	for _, p := range prefixes {
		spans = append(spans, span{p.Addr(), prefix.Last(p)})
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
	}
}

// numgenMap encodes `numgen random mod N vmap { 0 : goto A , 1 : goto B … }`.
func (enc encoder) numgenMap(st model.NumgenGoto) ([]nftnl.Expr, error) {
	if len(st.Chains) == 0 {
		return nil, fmt.Errorf("numgen map without chains")
	}
	elems := make([]nftnl.Element, len(st.Chains))
	for i, chain := range st.Chains {
		elems[i] = nftnl.Element{Key: binary.NativeEndian.AppendUint32(nil, uint32(i)), Verdict: &nftnl.Verdict{Code: nftnl.VerdictGoto, Chain: chain}}
	}
	set := nftnl.Set{
		Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetMap,
		KeyType: nftnl.TypeInteger, KeyLen: 4, DataType: nftnl.TypeVerdict,
		Userdata: udataNumgenMap, Elements: elems,
	}
	return []nftnl.Expr{
		nftnl.Numgen{Dreg: nftnl.Reg1, Modulus: uint32(len(st.Chains))},
		nftnl.Lookup{Sreg: nftnl.Reg1, Anonymous: &set, IsMap: true},
	}, nil
}

// typeInetService is nft's inet_service data type; a concatenation's type
// is its fields' types, 6 bits each, the first highest.
const typeInetService = 13

// udataNumgenDNATMap is the user data nft 1.0.6 stores with the anonymous
// map of `dnat ip addr . port to numgen random mod N map { … }`: the key's
// byte order host, the data's big endian, no data interval.
var udataNumgenDNATMap = []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 6, 4, 0, 0, 0, 0}

// numgenDNAT encodes `dnat ip|ip6 addr . port to numgen random mod N map
// { 0 : ADDR . PORT , … }` as nft does: the number picks an element of an
// anonymous map whose value, address then port (padded to 4 bytes), fills
// register 1 and the next word, from which the DNAT takes them.
func (enc encoder) numgenDNAT(st model.NumgenDNAT) ([]nftnl.Expr, error) {
	if len(st.Targets) == 0 || (st.Family == model.IPv6) != enc.v6 {
		return nil, fmt.Errorf("numgen dnat of %d targets in family %s", len(st.Targets), st.Family)
	}
	elems := make([]nftnl.Element, len(st.Targets))
	for i, t := range st.Targets {
		if !familyAddr(t.Addr(), enc.v6) {
			return nil, fmt.Errorf("dnat to %s", t)
		}
		data := binary.BigEndian.AppendUint16(t.Addr().AsSlice(), t.Port())
		elems[i] = nftnl.Element{Key: binary.NativeEndian.AppendUint32(nil, uint32(i)), Data: append(data, 0, 0)}
	}
	set := nftnl.Set{
		Flags:   nftnl.SetAnonymous | nftnl.SetConstant | nftnl.SetMap,
		KeyType: nftnl.TypeInteger, KeyLen: 4,
		DataType: enc.addrType()<<6 | typeInetService, DataLen: uint32(enc.addrLen() + 4),
		Userdata: udataNumgenDNATMap, Elements: elems,
	}
	portReg := uint32(nftnl.Reg32x01)
	if enc.v6 {
		portReg = nftnl.Reg2
	}
	return []nftnl.Expr{
		nftnl.Numgen{Dreg: nftnl.Reg1, Modulus: uint32(len(st.Targets))},
		nftnl.Lookup{Sreg: nftnl.Reg1, Anonymous: &set, IsMap: true, Dreg: nftnl.Reg1},
		nftnl.DNAT{Family: enc.family, RegAddr: nftnl.Reg1, RegProto: portReg},
	}, nil
}
