package nfttrace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Table is one nftables table, as Parse read it. Its methods do not change
// it: a Table may be evaluated from several goroutines at once.
type Table struct {
	family string // "ip" or "ip6"
	name   string
	chains map[string]*chain
	// order is the chains' names in the order they were added: base chains
	// of equal hook and priority run in this order.
	order []string
	sets  map[string]*set
	// hooks are the base chains of each hook, in the order they run.
	hooks map[string][]*chain
}

type chain struct {
	name  string
	base  *baseSpec // nil for a regular chain
	rules []*rule
}

// baseSpec is the hook of a base chain.
type baseSpec struct {
	typ, hook string
	priority  int
	policy    verdictKind // verdictAccept or verdictDrop
}

// set is a named set or map.
type set struct {
	name  string
	keys  []dataType
	isMap bool
	// values are the fields of a data map's values (nil for a set or a
	// verdict map).
	values  []dataType
	timeout time.Duration
	// elems are the elements in the order they were added; exact holds
	// those of single values by their key (keyString), ranged the others
	// (prefixes and ranges), which a lookup scans.
	elems  []*element
	exact  map[string]*element
	ranged []*element
}

// element is one element of a set or map (or of an anonymous one).
type element struct {
	key     []interval
	value   verdict // of a verdict map's element
	data    []datum // of a data map's element
	comment string
	text    string
	line    int
}

func (s *set) find(key []datum) *element {
	if e := s.exact[keyString(key)]; e != nil {
		return e
	}
	for _, e := range s.ranged {
		if e.matches(key) {
			return e
		}
	}
	return nil
}

// keyString encodes a key for the index of a set's elements.
func keyString(key []datum) string {
	b := make([]byte, 0, len(key)*17)
	for _, d := range key {
		if d.addr.IsValid() {
			a := d.addr.As16()
			b = append(b, 1)
			b = append(b, a[:]...)
		} else {
			b = append(b, 0, byte(d.num>>56), byte(d.num>>48), byte(d.num>>40), byte(d.num>>32), byte(d.num>>24), byte(d.num>>16), byte(d.num>>8), byte(d.num))
		}
	}
	return string(b)
}

// single is the key of e when each of its fields is one value.
func (e *element) single() ([]datum, bool) {
	key := make([]datum, len(e.key))
	for i, iv := range e.key {
		if iv.lo != iv.hi {
			return nil, false
		}
		key[i] = iv.lo
	}
	return key, true
}

func (e *element) matches(key []datum) bool {
	if len(key) != len(e.key) {
		return false
	}
	for i, d := range key {
		if !e.key[i].contains(d) {
			return false
		}
	}
	return true
}

// Family is the table's family, "ip" or "ip6"; Name its name.
func (t *Table) Family() string {
	if t == nil {
		return ""
	}
	return t.family
}

// Name is the table's name.
func (t *Table) Name() string {
	if t == nil {
		return ""
	}
	return t.name
}

// Parse reads one table of family ip or ip6 written either way nft writes
// it:
//
//   - as `nft list table` prints it ("table ip kube-proxy { ... }");
//   - as commands, one a line, as nft -f reads them and as knftables'
//     Transaction.String and Fake.Dump write them ("add table ...", "add
//     chain ...", "add rule ...", "add element ...", and "flush" and
//     "delete" of chains, sets, maps and elements, applied in order);
//   - as `nft -j list table` prints it (JSON, schema version 1), whose
//     errors name the object (kind, chain, handle) instead of a line.
//
// Anything it does not know (a statement, an expression, a data type, a
// second table) is an error that names its line: it never guesses.
func Parse(text string) (*Table, error) {
	if rest, ok := strings.CutPrefix(strings.TrimSpace(text), "{"); ok && strings.HasPrefix(strings.TrimSpace(rest), `"`) {
		return parseJSON(text) // an object with members: nft's syntax has no `{"`
	}
	toks, err := tokenize(text)
	if err != nil {
		return nil, fmt.Errorf("nfttrace: %w", err)
	}
	t := &Table{chains: map[string]*chain{}, sets: map[string]*set{}}
	stmts := statements(toks)
	if len(stmts) > 0 && stmts[0][0].is("table") {
		err = t.parseBlock(stmts)
	} else {
		err = t.parseCommands(stmts)
	}
	if err != nil {
		return nil, fmt.Errorf("nfttrace: %w", err)
	}
	if t.name == "" {
		return nil, fmt.Errorf("nfttrace: no table")
	}
	if err := t.resolve(); err != nil {
		return nil, fmt.Errorf("nfttrace: %w", err)
	}
	return t, nil
}

// lineError is an error about the statement that starts with tok.
func lineError(tok token, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", tok.line, fmt.Sprintf(format, args...))
}

// useTable checks that family and name are those of the table, or makes
// them so for the first one.
func (t *Table) useTable(at token, family, name string) error {
	if family != "ip" && family != "ip6" {
		return lineError(at, "family %q is not ip or ip6", family)
	}
	if t.name == "" {
		t.family, t.name = family, name
		return nil
	}
	if t.family != family || t.name != name {
		return lineError(at, "a second table %s %s (the first is %s %s)", family, name, t.family, t.name)
	}
	return nil
}

// braced returns the tokens inside the braces that toks start with, and
// the tokens after the closing brace.
func braced(toks []token) (inside, rest []token, err error) {
	if len(toks) == 0 || !toks[0].is("{") {
		return nil, nil, fmt.Errorf("want \"{\"")
	}
	depth := 0
	for i, tok := range toks {
		switch {
		case tok.is("{"):
			depth++
		case tok.is("}"):
			depth--
			if depth == 0 {
				return toks[1:i], toks[i+1:], nil
			}
		}
	}
	return nil, nil, fmt.Errorf("unbalanced \"{\"")
}

// parseBlock reads `table FAMILY NAME { ... }`.
func (t *Table) parseBlock(stmts [][]token) error {
	for _, st := range stmts {
		if len(st) < 4 || !st[0].is("table") {
			return lineError(st[0], "want \"table FAMILY NAME { ... }\", have %q", words(st))
		}
		if err := t.useTable(st[0], st[1].text, st[2].text); err != nil {
			return err
		}
		body, rest, err := braced(st[3:])
		if err != nil || len(stripNewlines(rest)) > 0 {
			return lineError(st[0], "table %s: want one block in braces", st[2].text)
		}
		for _, item := range statements(body) {
			if err := t.parseBlockItem(item); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseBlockItem reads one item of a table block: a set, map or chain
// block, or the table's comment or flags.
func (t *Table) parseBlockItem(item []token) error {
	kw := item[0]
	switch {
	case kw.is("comment") || kw.is("flags"):
		return nil
	case (kw.is("set") || kw.is("map") || kw.is("chain")) && len(item) >= 3:
		body, rest, err := braced(item[2:])
		if err != nil || len(stripNewlines(rest)) > 0 {
			return lineError(kw, "%s %s: want one block in braces", kw.text, item[1].text)
		}
		if kw.is("chain") {
			return t.addChain(kw, item[1].text, body, true)
		}
		return t.addSet(kw, item[1].text, kw.is("map"), body)
	}
	return lineError(kw, "unknown table item %q", words(item))
}

// parseCommands reads commands: VERB OBJECT FAMILY TABLE [NAME] [REST].
func (t *Table) parseCommands(stmts [][]token) error {
	for _, st := range stmts {
		if len(st) < 4 {
			return lineError(st[0], "unknown command %q", words(st))
		}
		verb, obj := st[0].text, st[1].text
		if obj == "table" {
			if err := t.useTable(st[0], st[2].text, st[3].text); err != nil {
				return err
			}
			switch verb {
			case "add", "create":
			case "delete", "destroy":
				*t = Table{family: t.family, name: t.name, chains: map[string]*chain{}, sets: map[string]*set{}}
			default:
				return lineError(st[0], "unknown command \"%s table\"", verb)
			}
			continue
		}
		if len(st) < 5 {
			return lineError(st[0], "unknown command %q", words(st))
		}
		if err := t.useTable(st[0], st[2].text, st[3].text); err != nil {
			return err
		}
		if err := t.command(st[0], verb, obj, st[4].text, st[5:]); err != nil {
			return err
		}
	}
	return nil
}

// command applies one command to a chain, set, map, rule or element.
func (t *Table) command(at token, verb, obj, name string, rest []token) error {
	switch verb + " " + obj {
	case "add chain", "create chain":
		return t.addChain(at, name, rest, false)
	case "add set", "create set", "add map", "create map":
		return t.addSet(at, name, obj == "map", rest)
	case "flush chain":
		c, err := t.chain(at, name)
		if err == nil {
			c.rules = nil
		}
		return err
	case "delete chain", "destroy chain":
		delete(t.chains, name)
		t.order = slices.DeleteFunc(t.order, func(n string) bool { return n == name })
		return nil
	case "flush set", "flush map":
		s, err := t.set(at, name)
		if err == nil {
			s.elems, s.exact, s.ranged = nil, nil, nil
		}
		return err
	case "delete set", "destroy set", "delete map", "destroy map":
		delete(t.sets, name)
		return nil
	case "add rule", "insert rule":
		return t.addRule(at, name, rest, verb == "insert")
	case "add element", "create element", "delete element", "destroy element":
		s, err := t.set(at, name)
		if err != nil {
			return err
		}
		inside, after, err := braced(rest)
		if err != nil || len(after) > 0 {
			return lineError(at, "%s element %s: want the elements in braces", verb, name)
		}
		return s.changeElements(at, inside, verb == "add" || verb == "create")
	}
	return lineError(at, "unknown command \"%s %s\"", verb, obj)
}

func (t *Table) chain(at token, name string) (*chain, error) {
	c := t.chains[name]
	if c == nil {
		return nil, lineError(at, "no chain %s", name)
	}
	return c, nil
}

func (t *Table) set(at token, name string) (*set, error) {
	s := t.sets[name]
	if s == nil {
		return nil, lineError(at, "no set or map %s", name)
	}
	return s, nil
}

// addChain adds a chain (if new) and reads its block: the hook, policy and
// comment, and (for a listed chain, withRules) its rules.
func (t *Table) addChain(at token, name string, block []token, withRules bool) error {
	c := t.chains[name]
	if c == nil {
		c = &chain{name: name}
		t.chains[name] = c
		t.order = append(t.order, name)
	}
	if !withRules && len(block) > 0 {
		inside, after, err := braced(block)
		if err != nil || len(after) > 0 {
			return lineError(at, "chain %s: want its specification in braces", name)
		}
		block = inside
	}
	for _, st := range statements(block) {
		kw := st[0]
		switch {
		case kw.is("type"):
			b, err := parseHook(st)
			if err != nil {
				return lineError(kw, "chain %s: %v", name, err)
			}
			c.base = b
		case kw.is("policy") && len(st) == 2 && c.base != nil:
			v, _, ok, _ := parseVerdict(st[1:])
			if !ok || (v.kind != verdictAccept && v.kind != verdictDrop) {
				return lineError(kw, "chain %s: policy %q", name, st[1].text)
			}
			c.base.policy = v.kind
		case kw.is("comment"):
		case withRules:
			r, err := parseRule(t.family, st)
			if err != nil {
				return err
			}
			c.rules = append(c.rules, r)
		default:
			return lineError(kw, "chain %s: unknown %q", name, words(st))
		}
	}
	return nil
}

// addRule appends (or, for insert, prepends) a rule to a chain.
func (t *Table) addRule(at token, chainName string, toks []token, insert bool) error {
	c, err := t.chain(at, chainName)
	if err != nil {
		return err
	}
	if len(toks) > 0 && (toks[0].is("index") || toks[0].is("handle") || toks[0].is("position")) {
		return lineError(at, "rule positions (%s) are not supported", toks[0].text)
	}
	if len(toks) == 0 {
		return lineError(at, "empty rule in chain %s", chainName)
	}
	r, err := parseRule(t.family, toks)
	if err != nil {
		return err
	}
	if insert {
		c.rules = append([]*rule{r}, c.rules...)
	} else {
		c.rules = append(c.rules, r)
	}
	return nil
}

// standardPriorities are nft's priority names for the ip and ip6 families.
var standardPriorities = map[string]int{"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}

// parseHook reads "type T hook H [device D] priority P" (P a number, a name
// or "name +/- n").
func parseHook(st []token) (*baseSpec, error) {
	if len(st) < 6 || !st[2].is("hook") {
		return nil, fmt.Errorf("want \"type T hook H priority P\", have %q", words(st))
	}
	b := &baseSpec{typ: st[1].text, hook: st[3].text, policy: verdictAccept}
	rest := st[4:]
	if rest[0].is("device") {
		return nil, fmt.Errorf("device hooks are not supported")
	}
	if !rest[0].is("priority") {
		return nil, fmt.Errorf("want \"priority\", have %q", rest[0].text)
	}
	p, err := parsePriority(rest[1:])
	if err != nil {
		return nil, err
	}
	b.priority = p
	switch b.hook {
	case "prerouting", "input", "forward", "output", "postrouting":
	default:
		return nil, fmt.Errorf("unknown hook %q", b.hook)
	}
	if b.typ != "filter" && b.typ != "nat" {
		return nil, fmt.Errorf("unknown chain type %q", b.typ)
	}
	return b, nil
}

func parsePriority(toks []token) (int, error) {
	expr := strings.ReplaceAll(words(toks), " ", "")
	if n, err := strconv.Atoi(expr); err == nil {
		return n, nil
	}
	for name, base := range standardPriorities {
		rest, ok := strings.CutPrefix(expr, name)
		if !ok {
			continue
		}
		if rest == "" {
			return base, nil
		}
		if n, err := strconv.Atoi(rest); err == nil && (rest[0] == '+' || rest[0] == '-') {
			return base + n, nil
		}
	}
	return 0, fmt.Errorf("unknown priority %q", expr)
}
