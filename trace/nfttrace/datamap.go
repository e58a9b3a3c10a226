package nfttrace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// parseTypeof reads "typeof EXPR . EXPR [: verdict | : EXPR . EXPR]", the
// type of a set or map given by the expressions that fill it, in a table of
// family.
func parseTypeof(family string, toks []token) (setType, error) {
	key, value, isMap := splitColon(toks)
	typ := setType{isMap: isMap}
	var err error
	if typ.keys, err = selectorTypes(family, key); err != nil {
		return setType{}, err
	}
	if !isMap || len(value) == 1 && value[0].is("verdict") {
		return typ, nil
	}
	if typ.values, err = selectorTypes(family, value); err != nil {
		return setType{}, err
	}
	return typ, nil
}

// selectorTypes reads the data types of a concatenation of selectors.
func selectorTypes(family string, toks []token) ([]dataType, error) {
	p := ruleParser{family: family, toks: toks, r: &rule{}}
	var out []dataType
	for {
		s, err := p.selector()
		if err != nil {
			return nil, fmt.Errorf("typeof %q: %w", words(toks), err)
		}
		out = append(out, s.typ)
		if !p.peek(0).is(".") {
			break
		}
		p.i++
	}
	if p.i != len(toks) {
		return nil, fmt.Errorf("typeof %q: unexpected %q", words(toks), p.peek(0).text)
	}
	return out, nil
}

// parseData reads a data map's value "V1 . V2", single values of types.
func parseData(types []dataType, toks []token) ([]datum, error) {
	if len(toks) != 2*len(types)-1 {
		return nil, fmt.Errorf("want a value of %d fields, have %q", len(types), words(toks))
	}
	out := make([]datum, len(types))
	for i, typ := range types {
		if i > 0 && !toks[2*i-1].is(".") {
			return nil, fmt.Errorf("want a value of %d fields, have %q", len(types), words(toks))
		}
		iv, err := parseLiteral(typ, toks[2*i].text)
		if err != nil {
			return nil, err
		}
		if iv.lo != iv.hi {
			return nil, fmt.Errorf("a range %q as a map's value", toks[2*i].text)
		}
		out[i] = iv.lo
	}
	return out, nil
}

// dnatMap reads "SELECTOR [. SELECTOR ...] map @MAP" after "dnat [ip|ip6]
// to": a DNAT to the address and port that a data map gives for the key.
func (p *ruleParser) dnatMap() error {
	e := expr{kind: exprDnatMap}
	for {
		s, err := p.selector()
		if err != nil {
			return err
		}
		if s.kind == selNumgen {
			if p.r.numgen != nil {
				return fmt.Errorf("two numgen expressions")
			}
			p.r.numgen = &s
		}
		e.sels = append(e.sels, s)
		if !p.peek(0).is(".") {
			break
		}
		p.i++
	}
	if p.peek(0).is("map") && p.peek(1).is("{") {
		return p.anonymousDNATMap(e)
	}
	name, err := p.mapName()
	if err != nil {
		return err
	}
	e.setName = name
	if p.peek(0).is(":") {
		p.i++
		if e.portSels, err = p.selectorList(); err != nil {
			return err
		}
		if e.portSetName, err = p.mapName(); err != nil {
			return err
		}
	}
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// anonymousDNATMap reads "map { KEY : ADDR . PORT, ... }" at p.i, after
// the key's selectors (in e): kube-proxy's nftables mode writes a Service's
// endpoints so, keyed by "numgen random mod N", with no endpoint chains
// when no ClientIP affinity applies.
func (p *ruleParser) anonymousDNATMap(e expr) error {
	p.i++
	keys := make([]dataType, len(e.sels))
	for i, s := range e.sels {
		keys[i] = s.typ
	}
	addr := typeIPv4
	if p.family == "ip6" {
		addr = typeIPv6
	}
	inside, rest, err := braced(p.toks[p.i:])
	if err != nil {
		return err
	}
	e.set = &set{keys: keys, isMap: true, values: []dataType{addr, typePort}}
	if err := e.set.changeElements(p.toks[p.i], inside, true); err != nil {
		return err
	}
	p.i = len(p.toks) - len(rest)
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// mapName reads "map @MAP" at p.i. nft lists a dnat to two maps with the
// first map's name and the colon glued to the next word ("@a:ip6"), which
// mapName splits.
func (p *ruleParser) mapName() (string, error) {
	name := p.peek(1).text
	if !p.peek(0).is("map") || len(name) < 2 || name[0] != '@' || p.peek(1).quoted {
		return "", fmt.Errorf("dnat to a key: want \"map @MAP\", have %q", p.peek(0).text)
	}
	if before, after, ok := strings.Cut(name, ":"); ok && len(before) > 1 {
		at := p.toks[p.i+1]
		glued := []token{{text: before, line: at.line}, {text: ":", line: at.line}}
		if after != "" {
			glued = append(glued, token{text: after, line: at.line})
		}
		p.toks = slices.Concat(p.toks[:p.i+1], glued, p.toks[p.i+2:])
		name = before
	}
	p.i += 2
	return name[1:], nil
}

// checkDNATMap checks that e's map is a data map from its key to an
// address and a port of family.
func checkDNATMap(family string, e *expr) error {
	addr := typeIPv4
	if family == "ip6" {
		addr = typeIPv6
	}
	if e.portSet != nil {
		return checkDNATMaps(addr, e)
	}
	if len(e.set.values) != 2 || e.set.values[0] != addr || e.set.values[1] != typePort {
		return fmt.Errorf("%s: dnat needs a map to an address and a port of family %s", e.set.name, family)
	}
	return nil
}

// ctStatus reads "ct status [!=] dnat" (p.i past "ct status"): whether
// conntrack holds a destination NAT for the flow.
func (p *ruleParser) ctStatus() error {
	e := expr{kind: exprCtDNAT}
	if p.peek(0).is("!=") {
		e.neg, p.i = true, p.i+1
	}
	if !p.peek(0).is("dnat") || p.peek(1).is(",") {
		return fmt.Errorf("ct status %q: only dnat is supported", p.peek(0).text)
	}
	p.i++
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// dnatTo is the address and port a data map's element gives.
func dnatTo(el *element) netip.AddrPort {
	return netip.AddrPortFrom(el.data[0].addr, uint16(el.data[1].num))
}

// checkDNATMaps checks a dnat to two maps: an address map of family's
// addresses, and a port map from the port selectors to ports.
func checkDNATMaps(addr dataType, e *expr) error {
	if len(e.set.values) != 1 || e.set.values[0] != addr {
		return fmt.Errorf("%s: dnat needs a map to an address", e.set.name)
	}
	keys := make([]dataType, len(e.portSels))
	for i, s := range e.portSels {
		keys[i] = s.typ
	}
	ps := e.portSet
	if !ps.isMap || !slices.Equal(ps.keys, keys) || len(ps.values) != 1 || ps.values[0] != typePort {
		return fmt.Errorf("%s: dnat needs a map from %v to a port", ps.name, keys)
	}
	return nil
}
