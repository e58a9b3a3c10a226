package model

import (
	"time"

	"sigs.k8s.io/knftables"
)

// Objects returns the table as knftables objects, in the order they must be
// added: the table, its sets and maps, its chains, its rules, its elements.
// Added to a knftables.Transaction they make the `nft -f` script of the
// table.
func (t *Table) Objects() []knftables.Object {
	objs := []knftables.Object{t.TableObject()}
	for _, s := range t.Sets {
		objs = append(objs, t.SetObject(s))
	}
	for _, c := range t.Chains {
		objs = append(objs, t.ChainObject(c))
	}
	for _, c := range t.Chains {
		objs = append(objs, t.RuleObjects(c)...)
	}
	for _, e := range Expand(t.Elements) {
		objs = append(objs, t.ElementObject(e))
	}
	return objs
}

func (t *Table) knftFamily() knftables.Family { return knftables.Family(t.Family.String()) }

// TableObject is the knftables Table that declares t (without what it
// holds).
func (t *Table) TableObject() *knftables.Table {
	return &knftables.Table{Family: t.knftFamily(), Name: t.Name, Comment: optional(t.Comment)}
}

// SetObject is the knftables Set or Map that declares s.
func (t *Table) SetObject(s *Set) knftables.Object {
	keyword, types := s.declaration()
	var typ, typeOf string
	if keyword == "type" {
		typ = types
	} else {
		typeOf = types
	}
	var timeout *time.Duration
	if s.Timeout != 0 {
		timeout = &s.Timeout
	}
	var size *uint64
	if s.Size > 0 {
		n := uint64(s.Size)
		size = &n
	}
	if s.IsMap() {
		return &knftables.Map{Family: t.knftFamily(), Table: t.Name, Name: s.Name,
			Type: typ, TypeOf: typeOf, Flags: s.flags(), Timeout: timeout, Size: size, Comment: optional(s.Comment)}
	}
	return &knftables.Set{Family: t.knftFamily(), Table: t.Name, Name: s.Name,
		Type: typ, TypeOf: typeOf, Flags: s.flags(), Timeout: timeout, Size: size, Comment: optional(s.Comment)}
}

// SetName is the knftables Set (or, if isMap, Map) of that name, without a
// declaration: what a flush or a delete names.
func (t *Table) SetName(name string, isMap bool) knftables.Object {
	if isMap {
		return &knftables.Map{Family: t.knftFamily(), Table: t.Name, Name: name}
	}
	return &knftables.Set{Family: t.knftFamily(), Table: t.Name, Name: name}
}

// ChainObject is the knftables Chain that declares c (without its rules).
func (t *Table) ChainObject(c *Chain) *knftables.Chain {
	kc := &knftables.Chain{Family: t.knftFamily(), Table: t.Name, Name: c.Name, Comment: optional(c.Comment)}
	if c.Base != nil {
		typ, hook, prio := knftables.BaseChainType(c.Base.Type), knftables.BaseChainHook(c.Base.Hook), knftables.BaseChainPriority(c.Base.Priority)
		kc.Type, kc.Hook, kc.Priority = &typ, &hook, &prio
	}
	return kc
}

// ChainName is the knftables Chain of that name, without a declaration:
// what a flush or a delete names.
func (t *Table) ChainName(name string) *knftables.Chain {
	return &knftables.Chain{Family: t.knftFamily(), Table: t.Name, Name: name}
}

// PrintedRuleObject is the knftables Rule of r in chain, whose text, r's
// String, the caller printed already.
func (t *Table) PrintedRuleObject(chain string, r Rule, text string) *knftables.Rule {
	return &knftables.Rule{Family: t.knftFamily(), Table: t.Name, Chain: chain, Rule: text, Comment: optional(r.Comment)}
}

// RuleObjects are the knftables Rules of c, in order.
func (t *Table) RuleObjects(c *Chain) []knftables.Object {
	objs := make([]knftables.Object, len(c.Rules))
	for i, r := range c.Rules {
		objs[i] = &knftables.Rule{Family: t.knftFamily(), Table: t.Name, Chain: c.Name, Rule: r.String(), Comment: optional(r.Comment)}
	}
	return objs
}

// String is the rule's statements as nft reads them.
func (r Rule) String() string { return string(r.AppendText(make([]byte, 0, 48*len(r.Stmts)))) }

// AppendText appends the rule's statements as nft reads them to b.
func (r Rule) AppendText(b []byte) []byte {
	for i, s := range r.Stmts {
		if i > 0 {
			b = append(b, ' ')
		}
		if a, ok := s.(textAppender); ok {
			b = a.appendText(b)
		} else {
			b = append(b, s.String()...)
		}
	}
	return b
}

// ElementObject is the knftables Element of e, which is not a block (see
// Expand).
func (t *Table) ElementObject(e Element) *knftables.Element {
	ke := &knftables.Element{Family: t.knftFamily(), Table: t.Name, Comment: optional(e.Comment)}
	fields := elementStrings(e)
	ke.Key = fields[:len(e.Key):len(e.Key)]
	switch {
	case e.Verdict != nil, len(e.Value) > 0:
		ke.Map, ke.Value = e.Set, fields[len(e.Key):]
	default:
		ke.Set = e.Set
	}
	return ke
}

// ElementKey is the knftables Element of e's key alone, in the set or (if
// isMap) the map e.Set: what a delete names.
func (t *Table) ElementKey(e Element, isMap bool) *knftables.Element {
	ke := &knftables.Element{Family: t.knftFamily(), Table: t.Name}
	ke.Key = elementStrings(Element{Key: e.Key})
	if isMap {
		ke.Map = e.Set
	} else {
		ke.Set = e.Set
	}
	return ke
}

// elementStrings are the fields of e's key, then those of its value (or
// its verdict), as nft prints them: substrings of one string, printed in
// one buffer.
func elementStrings(e Element) []string {
	n := len(e.Key) + len(e.Value)
	if e.Verdict != nil {
		n++
	}
	var buf [96]byte
	var endBuf [8]int
	b, ends := buf[:0], endBuf[:0]
	for _, ds := range [2][]Datum{e.Key, e.Value} {
		for _, d := range ds {
			b = d.appendTo(b)
			ends = append(ends, len(b))
		}
	}
	if e.Verdict != nil {
		b = e.Verdict.appendText(b)
		ends = append(ends, len(b))
	}
	all := string(b)
	out := make([]string, n)
	start := 0
	for i, end := range ends {
		out[i] = all[start:end]
		start = end
	}
	return out
}

// optional is s, or nil for "". It allocates only for a non-empty s.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	p := new(string)
	*p = s
	return p
}
