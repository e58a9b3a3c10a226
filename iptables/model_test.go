package iptables

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// model is an in-memory model of the tables as `iptables-restore --noflush`
// leaves them, limited to what this package writes: user chains and their
// rules, by table. Built-in chains and their jumps are not modelled.
type model map[string]map[string][]string

func newModel() model { return model{} }

func (m model) clone() model {
	c := model{}
	for t, chains := range m {
		c[t] = map[string][]string{}
		for name, rules := range chains {
			c[t][name] = slices.Clone(rules)
		}
	}
	return c
}

// builtinTargets are the targets that are not chains.
var builtinTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "REJECT": true, "RETURN": true,
	"MARK": true, "MASQUERADE": true, "DNAT": true, "SNAT": true,
}

// applyRestore applies restore input to m with --noflush semantics and
// returns the new state; m is not modified. Within a table, ":C" creates C
// or flushes it, "-A C" appends (C must exist), "-X C" deletes C (it must
// exist and be empty), "-S" lists and changes nothing; at COMMIT every jump
// must name a built-in target or an existing chain of the table, and no rule
// may jump to a deleted chain. A table that fails leaves m unchanged, as a
// failed restore does.
func applyRestore(m model, text []byte) (model, error) {
	out := m.clone()
	var (
		tableName string
		work      map[string][]string
	)
	for n, line := range strings.Split(string(text), "\n") {
		lineNo := n + 1
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if tableName == "" {
			name, ok := strings.CutPrefix(line, "*")
			if !ok || name == "" {
				return m, fmt.Errorf("line %d: %q outside a table", lineNo, line)
			}
			tableName = name
			work = map[string][]string{}
			for c, rules := range out[name] {
				work[c] = slices.Clone(rules)
			}
			continue
		}
		if line == "COMMIT" {
			if err := checkJumps(work); err != nil {
				return m, fmt.Errorf("table %s: %v", tableName, err)
			}
			out[tableName] = work
			tableName, work = "", nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			f := strings.Fields(line[1:])
			if len(f) != 3 || f[1] != "-" || f[2] != "[0:0]" {
				return m, fmt.Errorf("line %d: bad chain line %q", lineNo, line)
			}
			work[f[0]] = []string{}
			continue
		}
		args, err := tokenize(line)
		if err != nil {
			return m, fmt.Errorf("line %d: %v", lineNo, err)
		}
		switch {
		case len(args) == 1 && args[0] == "-S":
		case len(args) == 2 && args[0] == "-X":
			rules, ok := work[args[1]]
			switch {
			case !ok:
				return m, fmt.Errorf("line %d: -X %s: no such chain", lineNo, args[1])
			case len(rules) > 0:
				return m, fmt.Errorf("line %d: -X %s: chain not empty", lineNo, args[1])
			}
			delete(work, args[1])
		case len(args) >= 2 && args[0] == "-A":
			if _, ok := work[args[1]]; !ok {
				return m, fmt.Errorf("line %d: -A %s: no such chain", lineNo, args[1])
			}
			rest, _ := strings.CutPrefix(line, "-A "+args[1])
			work[args[1]] = append(work[args[1]], strings.TrimPrefix(rest, " "))
		default:
			return m, fmt.Errorf("line %d: unexpected %q", lineNo, line)
		}
	}
	if tableName != "" {
		return m, fmt.Errorf("table %s: no COMMIT", tableName)
	}
	return out, nil
}

func checkJumps(chains map[string][]string) error {
	for _, name := range slices.Sorted(maps.Keys(chains)) {
		for _, rule := range chains[name] {
			args, err := tokenize(rule)
			if err != nil {
				return err
			}
			for i, a := range args {
				if (a == "-j" || a == "-g") && i+1 < len(args) {
					t := args[i+1]
					if _, ok := chains[t]; !ok && !builtinTargets[t] {
						return fmt.Errorf("chain %s: jump to missing chain %s in %q", name, t, rule)
					}
				}
			}
		}
	}
	return nil
}

// tokenize splits a line as iptables-restore does: on spaces, with double
// quotes grouping. A backslash, a stray quote or an unterminated quote is an
// error here (the renderer never writes them).
func tokenize(line string) ([]string, error) {
	var (
		args   []string
		cur    strings.Builder
		quoted bool
		inTok  bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' || c == '\'' || c == '\t' || c == '\r' || c < 0x20 || c >= 0x7f:
			return nil, fmt.Errorf("byte %q at %d in %q", c, i, line)
		case c == '"':
			if !quoted && inTok {
				return nil, fmt.Errorf("quote inside a token in %q", line)
			}
			quoted = !quoted
			inTok = true
			if !quoted {
				if i+1 < len(line) && line[i+1] != ' ' {
					return nil, fmt.Errorf("quote followed by %q in %q", line[i+1], line)
				}
			}
		case c == ' ' && !quoted:
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

// chainsOf lists table's chains, sorted.
func (m model) chainsOf(table string) []string { return slices.Sorted(maps.Keys(m[table])) }

// String renders the model like iptables-save, for failure messages.
func (m model) String() string {
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(m)) {
		b.WriteString("*" + t + "\n")
		for _, c := range m.chainsOf(t) {
			b.WriteString(":" + c + "\n")
		}
		for _, c := range m.chainsOf(t) {
			for _, r := range m[t][c] {
				b.WriteString("-A " + c + " " + r + "\n")
			}
		}
	}
	return b.String()
}
