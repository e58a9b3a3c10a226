package nfttrace

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// selKind is what a selector reads from the packet.
type selKind uint8

const (
	selSaddr selKind = iota + 1
	selDaddr
	selL4proto
	selDport
	selSport
	selMark
	selNumgen
	// selOrigDaddr and selOrigDport read the destination the flow had
	// before any NAT (`ct original ip daddr`, `ct original proto-dst`).
	selOrigDaddr
	selOrigDport
	// selJHash is the kernel's jhash of inner selectors' values
	// (`jhash SELECTORS mod N seed S [offset O]`).
	selJHash
)

// selector reads one value from the packet: `ip daddr`, `meta l4proto`,
// `th dport` (`tcp dport` also requires TCP), `meta mark [& MASK]`,
// `numgen random mod N [offset M]`.
type selector struct {
	kind  selKind
	typ   dataType
	proto uint64 // for tcp/udp/sctp dport: the protocol it requires
	mask  uint64 // for meta mark & MASK
	mod   uint64 // numgen, jhash
	off   uint64 // numgen, jhash offset
	// jhash: the selectors hashed, and the seed.
	inner []selector
	seed  uint32
}

// exprKind is the kind of one expression of a rule.
type exprKind uint8

const (
	exprMatch   exprKind = iota + 1 // SELECTORS [!=] VALUE|{ SET }|@SET
	exprVmap                        // SELECTORS vmap @MAP|{ MAP }
	exprFib                         // fib saddr|daddr type [!=] local
	exprCtNew                       // ct state [!=] STATES
	exprMarkSet                     // meta mark set meta mark OP VALUE | VALUE
	exprUpdate                      // update|add @SET { SELECTORS [timeout T] [: SELECTORS] }
	exprDelete                      // delete @MAP { SELECTORS : SELECTORS }
	exprDnat                        // dnat [ip|ip6] to ADDR[:PORT]
	exprDnatMap                     // dnat [ip|ip6] to SELECTORS map @MAP
	exprCtDNAT                      // ct status [!=] dnat
	exprMasq                        // masquerade [flags]
	exprCounter                     // counter [packets N bytes M]
)

type expr struct {
	kind exprKind
	sels []selector
	neg  bool
	// The set or map: a named one (setName, found by resolve) or an
	// anonymous one (set.name "").
	setName string
	set     *set
	// fib: whether saddr (else daddr) is local; ct: whether the states
	// hold "new".
	saddr, isNew bool
	markOp       string // "set", "or", "xor", "and"
	markVal      uint64
	dnat         netip.AddrPort // port 0: keep the destination port
	// dnat to two maps (`dnat to K map @a : K2 map @p`): the port's key
	// and map; the address map is setName.
	portSels    []selector
	portSetName string
	portSet     *set
	// update and delete: the selectors of a map element's value, and the
	// element's timeout (0: the set's own).
	vals    []selector
	timeout time.Duration
}

// rule is one rule: expressions in order, then a verdict.
type rule struct {
	line    int
	text    string
	comment string
	exprs   []expr
	verdict verdict
	numgen  *selector // the rule's numgen, which the evaluator forks on
}

// parseRule reads one rule of a table of family.
func parseRule(family string, toks []token) (*rule, error) {
	toks = stripNewlines(toks)
	if len(toks) == 0 {
		return nil, fmt.Errorf("an empty rule")
	}
	r := &rule{line: toks[0].line}
	if n := len(toks); n >= 2 && toks[n-2].is("comment") && toks[n-1].quoted {
		r.comment, toks = toks[n-1].text, toks[:n-2]
	}
	r.text = words(toks)
	p := ruleParser{family: family, toks: toks, r: r}
	if err := p.parse(); err != nil {
		return nil, lineError(toks[0], "rule %q: %v", r.text, err)
	}
	return r, nil
}

type ruleParser struct {
	family string
	toks   []token
	i      int
	r      *rule
}

func (p *ruleParser) peek(k int) token {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return token{}
}

func (p *ruleParser) parse() error {
	for p.i < len(p.toks) {
		if p.r.verdict.kind != verdictNone {
			return fmt.Errorf("%q after the verdict", p.peek(0).text)
		}
		v, n, ok, err := parseVerdict(p.toks[p.i:])
		if err != nil {
			return err
		}
		if ok {
			p.r.verdict, p.i = v, p.i+n
			continue
		}
		if err := p.statement(); err != nil {
			return err
		}
	}
	return nil
}

// statement reads one expression or statement.
func (p *ruleParser) statement() error {
	w := p.peek(0)
	switch {
	case w.quoted:
		return fmt.Errorf("unexpected string %q", w.text)
	case w.is("reject"):
		if p.i+1 < len(p.toks) {
			return fmt.Errorf("reject options (%q) are not supported", p.peek(1).text)
		}
		p.r.verdict, p.i = verdict{kind: verdictReject}, p.i+1
		return nil
	case w.is("fib"):
		return p.fib()
	case w.is("ct") && p.peek(1).is("original"):
		return p.relational()
	case w.is("ct"):
		return p.ct()
	case w.is("dnat"):
		return p.dnat()
	case w.is("masquerade"):
		p.i++
		for p.peek(0).is("fully-random") || p.peek(0).is("random") || p.peek(0).is("persistent") || p.peek(0).is(",") {
			p.i++
		}
		p.r.exprs = append(p.r.exprs, expr{kind: exprMasq})
		return nil
	case w.is("counter"):
		p.i++
		if p.peek(0).is("packets") && p.peek(2).is("bytes") {
			p.i += 4
		}
		p.r.exprs = append(p.r.exprs, expr{kind: exprCounter})
		return nil
	case w.is("update") || w.is("add") || w.is("delete"):
		return p.update()
	}
	return p.relational()
}

// selector reads one selector at p.i.
func (p *ruleParser) selector() (selector, error) {
	if p.peek(0).is("ct") && p.peek(1).is("original") {
		return p.ctOriginal()
	}
	if p.peek(0).is("jhash") {
		return p.jhash()
	}
	w, f := p.peek(0).text, p.peek(1).text
	p.i += 2
	switch {
	case (w == "ip" || w == "ip6") && (f == "saddr" || f == "daddr"):
		if w != p.family {
			return selector{}, fmt.Errorf("%s %s in a table of family %s", w, f, p.family)
		}
		typ := typeIPv4
		if w == "ip6" {
			typ = typeIPv6
		}
		return selector{kind: map[string]selKind{"saddr": selSaddr, "daddr": selDaddr}[f], typ: typ}, nil
	case w == "meta" && f == "l4proto":
		return selector{kind: selL4proto, typ: typeProto}, nil
	case (w == "th" || w == "tcp" || w == "udp" || w == "sctp") && (f == "dport" || f == "sport"):
		return selector{kind: map[string]selKind{"dport": selDport, "sport": selSport}[f], typ: typePort, proto: protocols[w]}, nil
	case w == "meta" && f == "mark":
		return p.mark()
	case w == "mark":
		p.i--
		return p.mark()
	case w == "numgen" && f == "random" && p.peek(0).is("mod"):
		mod, err := strconv.ParseUint(p.peek(1).text, 10, 32)
		if err != nil || mod == 0 {
			return selector{}, fmt.Errorf("numgen modulus %q", p.peek(1).text)
		}
		p.i += 2
		s := selector{kind: selNumgen, typ: typeInt, mod: mod}
		if p.peek(0).is("offset") {
			if s.off, err = strconv.ParseUint(p.peek(1).text, 10, 32); err != nil {
				return selector{}, fmt.Errorf("numgen offset %q", p.peek(1).text)
			}
			p.i += 2
		}
		return s, nil
	}
	return selector{}, fmt.Errorf("unknown expression %q", strings.TrimSpace(w+" "+f))
}

// mark reads the meta mark selector with an optional mask ("& MASK",
// "and MASK"); p.i is past "meta mark" or "mark".
func (p *ruleParser) mark() (selector, error) {
	s := selector{kind: selMark, typ: typeMark}
	if p.peek(0).is("&") || p.peek(0).is("and") {
		m, err := parseLiteral(typeMark, p.peek(1).text)
		if err != nil {
			return selector{}, err
		}
		s.mask, p.i = m.lo.num, p.i+2
	}
	return s, nil
}

// relational reads SELECTOR [. SELECTOR ...] followed by vmap, set, a
// comparison or a value.
func (p *ruleParser) relational() error {
	var sels []selector
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
		sels = append(sels, s)
		if !p.peek(0).is(".") {
			break
		}
		p.i++
	}
	e := expr{kind: exprMatch, sels: sels}
	switch w := p.peek(0); {
	case w.is("vmap"):
		p.i++
		e.kind = exprVmap
		return p.setRef(&e, true)
	case w.is("set") && len(sels) == 1 && sels[0].kind == selMark && sels[0].mask == 0:
		p.i++
		return p.markSet()
	case w.is("!=") || w.is("=="):
		e.neg = w.is("!=")
		p.i++
	}
	return p.setRef(&e, false)
}

// setRef reads @NAME, an anonymous set or map in braces, or (for a match of
// one selector) a literal, into e.
func (p *ruleParser) setRef(e *expr, isMap bool) error {
	w := p.peek(0)
	keys := make([]dataType, len(e.sels))
	for i, s := range e.sels {
		keys[i] = s.typ
	}
	switch {
	case len(w.text) > 1 && w.text[0] == '@' && !w.quoted:
		e.setName, p.i = w.text[1:], p.i+1
	case w.is("{"):
		inside, rest, err := braced(p.toks[p.i:])
		if err != nil {
			return err
		}
		e.set = &set{keys: keys, isMap: isMap}
		if err := e.set.changeElements(w, inside, true); err != nil {
			return err
		}
		p.i = len(p.toks) - len(rest)
	case !isMap && len(keys) == 1 && w.text != "":
		e.set = &set{keys: keys}
		if err := e.set.changeElements(w, []token{w}, true); err != nil {
			return err
		}
		p.i++
	default:
		return fmt.Errorf("want a set, a map or a value, have %q", w.text)
	}
	p.r.exprs = append(p.r.exprs, *e)
	return nil
}

// markSet reads "meta mark OP VALUE" or "VALUE" after "meta mark set".
func (p *ruleParser) markSet() error {
	e := expr{kind: exprMarkSet, markOp: "set"}
	if p.peek(0).is("meta") && p.peek(1).is("mark") {
		p.i += 2
	} else if p.peek(0).is("mark") {
		p.i++
	} else {
		v, err := parseLiteral(typeMark, p.peek(0).text)
		if err != nil {
			return err
		}
		e.markVal, p.i = v.lo.num, p.i+1
		p.r.exprs = append(p.r.exprs, e)
		return nil
	}
	ops := map[string]string{"or": "or", "|": "or", "xor": "xor", "^": "xor", "and": "and", "&": "and"}
	op, ok := ops[p.peek(0).text]
	if !ok {
		return fmt.Errorf("mark operation %q", p.peek(0).text)
	}
	v, err := parseLiteral(typeMark, p.peek(1).text)
	if err != nil {
		return err
	}
	e.markOp, e.markVal, p.i = op, v.lo.num, p.i+2
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// fib reads "fib saddr|daddr type [!=] local".
func (p *ruleParser) fib() error {
	e := expr{kind: exprFib, saddr: p.peek(1).is("saddr")}
	if !(p.peek(1).is("saddr") || p.peek(1).is("daddr")) || !p.peek(2).is("type") {
		return fmt.Errorf("unknown fib expression %q", words(p.toks[p.i:min(p.i+4, len(p.toks))]))
	}
	p.i += 3
	if p.peek(0).is("!=") {
		e.neg, p.i = true, p.i+1
	}
	if !p.peek(0).is("local") {
		return fmt.Errorf("fib type %q: only local is supported", p.peek(0).text)
	}
	p.i++
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// ct reads "ct state [!=] STATE[,STATE...]" or "ct status [!=] dnat".
func (p *ruleParser) ct() error {
	if p.peek(1).is("status") {
		p.i += 2
		return p.ctStatus()
	}
	if !p.peek(1).is("state") {
		return fmt.Errorf("unknown ct expression %q", p.peek(1).text)
	}
	e := expr{kind: exprCtNew}
	p.i += 2
	if p.peek(0).is("!=") {
		e.neg, p.i = true, p.i+1
	}
	states := map[string]bool{"new": true, "established": true, "related": true, "invalid": true, "untracked": true}
	seen := false
	for p.i < len(p.toks) && (states[p.peek(0).text] || p.peek(0).is(",")) {
		e.isNew = e.isNew || p.peek(0).is("new")
		seen = seen || !p.peek(0).is(",")
		p.i++
	}
	if !seen {
		return fmt.Errorf("ct state %q", p.peek(0).text)
	}
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// dnat reads "dnat [ip|ip6] to ADDR[:PORT]" or "dnat [ip|ip6] to
// SELECTORS map @MAP|{ … }"; kube-proxy's script writes "dnat ip addr .
// port to", which nft lists as "dnat ip to".
func (p *ruleParser) dnat() error {
	p.i++
	if (p.peek(0).is("ip") || p.peek(0).is("ip6")) && p.peek(1).is("to") {
		p.i++
	} else if (p.peek(0).is("ip") || p.peek(0).is("ip6")) && p.peek(1).is("addr") && p.peek(2).is(".") && p.peek(3).is("port") && p.peek(4).is("to") {
		p.i += 4
	}
	if !p.peek(0).is("to") {
		return fmt.Errorf("dnat without \"to\"")
	}
	s := p.peek(1).text
	p.i++
	e := expr{kind: exprDnat}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		e.dnat = ap
	} else if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		e.dnat = netip.AddrPortFrom(a, 0)
	} else {
		return p.dnatMap()
	}
	p.i++
	if e.dnat.Addr().Is4() != (p.family == "ip") {
		return fmt.Errorf("dnat to %s in a table of family %s", s, p.family)
	}
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// ctOriginal reads "ct original ip daddr", "ct original ip6 daddr" or
// "ct original proto-dst" at p.i.
func (p *ruleParser) ctOriginal() (selector, error) {
	w, f := p.peek(2).text, p.peek(3).text
	switch {
	case w == "proto-dst":
		p.i += 3
		return selector{kind: selOrigDport, typ: typePort}, nil
	case (w == "ip" || w == "ip6") && f == "daddr" && w == p.family:
		p.i += 4
		typ := typeIPv4
		if w == "ip6" {
			typ = typeIPv6
		}
		return selector{kind: selOrigDaddr, typ: typ}, nil
	}
	return selector{}, fmt.Errorf("unknown expression %q", "ct original "+w)
}

// jhash reads "jhash SELECTOR [. SELECTOR ...] mod N [seed S] [offset O]"
// at p.i.
func (p *ruleParser) jhash() (selector, error) {
	p.i++
	s := selector{kind: selJHash, typ: typeInt}
	for {
		in, err := p.selector()
		if err != nil {
			return selector{}, err
		}
		if in.kind == selNumgen || in.kind == selJHash {
			return selector{}, fmt.Errorf("jhash of %q", "numgen or jhash")
		}
		s.inner = append(s.inner, in)
		if !p.peek(0).is(".") {
			break
		}
		p.i++
	}
	if !p.peek(0).is("mod") {
		return selector{}, fmt.Errorf("jhash without a modulus")
	}
	mod, err := strconv.ParseUint(p.peek(1).text, 0, 32)
	if err != nil || mod == 0 {
		return selector{}, fmt.Errorf("jhash modulus %q", p.peek(1).text)
	}
	s.mod, p.i = mod, p.i+2
	for p.peek(0).is("seed") || p.peek(0).is("offset") {
		n, err := strconv.ParseUint(p.peek(1).text, 0, 32)
		if err != nil {
			return selector{}, fmt.Errorf("jhash %s %q", p.peek(0).text, p.peek(1).text)
		}
		if p.peek(0).is("seed") {
			s.seed = uint32(n)
		} else {
			s.off = n
		}
		p.i += 2
	}
	return s, nil
}

// update reads "update|add @SET { SELECTORS [timeout T] [: SELECTORS] }"
// or "delete @MAP { SELECTORS : SELECTORS }".
func (p *ruleParser) update() error {
	kind, name := exprUpdate, p.peek(1).text
	if p.peek(0).is("delete") {
		kind = exprDelete
	}
	if len(name) < 2 || name[0] != '@' || !p.peek(2).is("{") {
		return fmt.Errorf("want \"%s @SET { KEY }\"", p.peek(0).text)
	}
	p.i += 3
	e := expr{kind: kind, setName: name[1:]}
	var err error
	if e.sels, err = p.selectorList(); err != nil {
		return err
	}
	if p.peek(0).is("timeout") {
		if e.timeout, err = parseDuration(p.peek(1).text); err != nil || kind == exprDelete {
			return fmt.Errorf("timeout %q", p.peek(1).text)
		}
		p.i += 2
	}
	if p.peek(0).is(":") {
		p.i++
		if e.vals, err = p.selectorList(); err != nil {
			return err
		}
	}
	if !p.peek(0).is("}") {
		return fmt.Errorf("want \"}\" after the element, have %q", p.peek(0).text)
	}
	p.i++
	p.r.exprs = append(p.r.exprs, e)
	return nil
}

// selectorList reads "SELECTOR [. SELECTOR ...]".
func (p *ruleParser) selectorList() ([]selector, error) {
	var sels []selector
	for {
		s, err := p.selector()
		if err != nil {
			return nil, err
		}
		if s.kind == selNumgen {
			return nil, fmt.Errorf("numgen in a dynamic set's element")
		}
		sels = append(sels, s)
		if !p.peek(0).is(".") {
			return sels, nil
		}
		p.i++
	}
}
