package iptrace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Rules are the filter and nat tables of one IP family, as Parse read them.
// A Rules is immutable and safe for concurrent use.
type Rules struct {
	tables map[string]*table
}

// table is one table: its chains by name.
type table struct {
	name   string
	chains map[string]*chain
}

// chain is a built-in chain (with its policy) or a user chain.
type chain struct {
	name    string
	builtin bool
	policy  string // ACCEPT or DROP, for built-in chains
	rules   []*rule
}

// builtinChains are the built-in chains of the tables Evaluate follows.
var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
}

// Parse reads the iptables rules of one IP family as text: the output of
// iptables-save or ip6tables-save (with or without -c counters), or
// iptables-restore input (such as iptables.Render's), or several of them one
// after the other. The text is applied in order to empty tables, as
// `iptables-restore --noflush` applies it:
//
//   - "*TABLE" starts a table and "COMMIT" ends it; lines starting with "#"
//     and empty lines are skipped.
//   - ":CHAIN - [p:b]" creates a user chain, or flushes it if it exists;
//     ":BUILTIN POLICY [p:b]" sets a built-in chain's policy (ACCEPT or
//     DROP). Built-in chains exist from the start with policy ACCEPT.
//   - "-A CHAIN …" appends a rule, "-I CHAIN [N] …" inserts one (first by
//     default), "-N CHAIN" creates a chain, "-F [CHAIN]" flushes, "-X
//     CHAIN" deletes an empty chain that no rule jumps to, and "-S" (which
//     only lists) changes nothing. A rule may start with "[p:b]" counters.
//
// Only the filter and nat tables are read; the lines of other tables
// (raw, mangle, security) are skipped, and Evaluate does not model them.
//
// Each rule must use only the matches and targets that Evaluate models (see
// the package documentation); anything else, and any malformed line, is an
// error naming the line. At each COMMIT every jump must name a chain of
// its table.
func Parse(text []byte) (*Rules, error) {
	p := parser{rules: &Rules{tables: map[string]*table{}}}
	for name, chains := range builtinChains {
		t := &table{name: name, chains: map[string]*chain{}}
		for _, c := range chains {
			t.chains[c] = &chain{name: c, builtin: true, policy: "ACCEPT"}
		}
		p.rules.tables[name] = t
	}
	for i, line := range strings.Split(string(text), "\n") {
		if err := p.line(i+1, strings.TrimRight(line, "\r")); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	if p.table != "" {
		return nil, fmt.Errorf("table %s: no COMMIT", p.table)
	}
	return p.rules, nil
}

// parser holds the state of one Parse.
type parser struct {
	rules *Rules
	table string // the table being read, "" between tables
	skip  bool   // the table is not one Evaluate follows
	// added are the rules added since the table started: their jumps are
	// checked at COMMIT. Earlier rules need no check, since a chain that
	// a rule jumps to cannot be deleted.
	added []*rule
}

func (p *parser) line(n int, line string) error {
	trimmed := strings.TrimSpace(line)
	switch {
	case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		return nil
	case p.table == "":
		name, ok := strings.CutPrefix(trimmed, "*")
		if !ok || name == "" {
			return fmt.Errorf("%q outside a table", line)
		}
		p.table = name
		_, known := p.rules.tables[name]
		p.skip = !known
		return nil
	case trimmed == "COMMIT":
		t := p.table
		p.table = ""
		if p.skip {
			return nil
		}
		added := p.added
		p.added = nil
		return p.rules.tables[t].checkJumps(added)
	case p.skip:
		return nil
	case strings.HasPrefix(trimmed, ":"):
		return p.chainLine(trimmed)
	}
	return p.command(n, trimmed)
}

// chainLine handles ":CHAIN POLICY [p:b]".
func (p *parser) chainLine(line string) error {
	f := strings.Fields(line[1:])
	if len(f) < 2 || len(f) > 3 {
		return fmt.Errorf("bad chain line %q", line)
	}
	t := p.rules.tables[p.table]
	c, ok := t.chains[f[0]]
	switch {
	case ok && c.builtin:
		if f[1] != "ACCEPT" && f[1] != "DROP" {
			return fmt.Errorf("built-in chain %s: policy %q is not ACCEPT or DROP", f[0], f[1])
		}
		c.policy = f[1]
	case f[1] != "-":
		return fmt.Errorf("user chain %s has a policy %q", f[0], f[1])
	case ok:
		c.rules = nil
	default:
		t.chains[f[0]] = &chain{name: f[0]}
	}
	return nil
}

// command handles a line of arguments: -A, -I, -N, -F, -X, -S.
func (p *parser) command(n int, line string) error {
	if strings.HasPrefix(line, "[") { // "[packets:bytes] -A …"
		end := strings.IndexByte(line, ']')
		if end < 0 {
			return fmt.Errorf("unterminated counters in %q", line)
		}
		line = strings.TrimSpace(line[end+1:])
	}
	args, err := tokenize(line)
	if err != nil {
		return err
	}
	t := p.rules.tables[p.table]
	if len(args) == 1 && args[0] == "-S" {
		return nil
	}
	if len(args) < 2 {
		return fmt.Errorf("unexpected %q", line)
	}
	op, name, rest := args[0], args[1], args[2:]
	c, exists := t.chains[name]
	switch {
	case op == "-N" && len(rest) == 0:
		if exists {
			return fmt.Errorf("-N %s: chain exists", name)
		}
		t.chains[name] = &chain{name: name}
		return nil
	case op == "-F" && len(rest) == 0 && exists:
		c.rules = nil
		return nil
	case op == "-X" && len(rest) == 0 && exists:
		return t.deleteChain(c)
	case (op == "-A" || op == "-I") && exists:
		r, err := t.addRule(c, op, n, line, rest)
		if err == nil {
			p.added = append(p.added, r)
		}
		return err
	case !exists && (op == "-F" || op == "-X" || op == "-A" || op == "-I"):
		return fmt.Errorf("%s %s: no such chain in table %s", op, name, t.name)
	}
	return fmt.Errorf("unexpected %q", line)
}

// addRule parses a rule and appends it to c (-A) or inserts it (-I, at
// the position given first in args, if any), and returns it.
func (t *table) addRule(c *chain, op string, n int, line string, args []string) (*rule, error) {
	pos := len(c.rules)
	if op == "-I" {
		pos = 0
		if len(args) > 0 {
			if i, err := strconv.Atoi(args[0]); err == nil {
				if i < 1 || i > len(c.rules)+1 {
					return nil, fmt.Errorf("-I %s %d: no such position", c.name, i)
				}
				pos, args = i-1, args[1:]
			}
		}
	}
	r, err := parseRule(args)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", line, err)
	}
	r.chain, r.line, r.text = c.name, n, line
	if op == "-I" {
		r.text = "-A " + c.name + " " + strings.Join(quoteArgs(args), " ")
	}
	c.rules = slices.Insert(c.rules, pos, r)
	return r, nil
}

// deleteChain deletes c, which must be a user chain that is empty and that
// no rule jumps to.
func (t *table) deleteChain(c *chain) error {
	if c.builtin || len(c.rules) > 0 {
		return fmt.Errorf("-X %s: built-in or not empty", c.name)
	}
	for _, o := range t.chains {
		for _, r := range o.rules {
			if r.target.chain == c.name {
				return fmt.Errorf("-X %s: still jumped to from %s", c.name, o.name)
			}
		}
	}
	delete(t.chains, c.name)
	return nil
}

// checkJumps reports the first of rules whose jump names no chain of t.
func (t *table) checkJumps(rules []*rule) error {
	for _, r := range rules {
		if r.target.chain == "" {
			continue
		}
		if _, ok := t.chains[r.target.chain]; !ok {
			return fmt.Errorf("table %s, line %d: %q jumps to %s, no chain of the table", t.name, r.line, r.text, r.target.chain)
		}
	}
	return nil
}

// tokenize splits a line as iptables-restore does: on blanks, with double
// quotes grouping and a backslash escaping the next byte inside them.
func tokenize(line string) ([]string, error) {
	if !strings.ContainsAny(line, "\"\\") {
		return strings.Fields(line), nil
	}
	var (
		args   []string
		cur    strings.Builder
		quoted bool
		inTok  bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted = !quoted
			inTok = true
		case (c == ' ' || c == '\t') && !quoted:
			if inTok {
				args = append(args, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteByte(c)
			inTok = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if inTok {
		args = append(args, cur.String())
	}
	return args, nil
}

// quoteArgs quotes the arguments that hold a blank, as iptables-save does.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}
