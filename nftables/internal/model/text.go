package model

import (
	"sigs.k8s.io/knftables"
)

// Objects returns the table as knftables objects, in the order they must be
// added: the table, its sets and maps, its chains, its rules, its elements.
// Added to a knftables.Transaction they make the `nft -f` script of the
// table.
func (t *Table) Objects() []knftables.Object {
	objs := []knftables.Object{&knftables.Table{Family: t.knftFamily(), Name: t.Name, Comment: optional(t.Comment)}}
	for _, s := range t.Sets {
		objs = append(objs, t.SetObject(s))
	}
	for _, c := range t.Chains {
		objs = append(objs, t.ChainObject(c))
	}
	for _, c := range t.Chains {
		objs = append(objs, t.RuleObjects(c)...)
	}
	for _, e := range t.Elements {
		objs = append(objs, t.ElementObject(e))
	}
	return objs
}

func (t *Table) knftFamily() knftables.Family { return knftables.Family(t.Family.String()) }

// SetObject is the knftables Set or Map that declares s.
func (t *Table) SetObject(s *Set) knftables.Object {
	var flags []knftables.SetFlag
	if s.Interval {
		flags = []knftables.SetFlag{knftables.IntervalFlag}
	}
	if s.Dynamic {
		flags = append(flags, knftables.DynamicFlag, knftables.TimeoutFlag)
	}
	var size *uint64
	if s.Size > 0 {
		n := uint64(s.Size)
		size = &n
	}
	if s.IsMap() {
		return &knftables.Map{Family: t.knftFamily(), Table: t.Name, Name: s.Name,
			TypeOf: Concat(s.Key).String() + " : " + Concat(s.Value).String(), Flags: flags, Size: size, Comment: optional(s.Comment)}
	}
	return &knftables.Set{Family: t.knftFamily(), Table: t.Name, Name: s.Name,
		TypeOf: Concat(s.Key).String(), Flags: flags, Size: size, Comment: optional(s.Comment)}
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

// ElementObject is the knftables Element of e.
func (t *Table) ElementObject(e Element) *knftables.Element {
	ke := &knftables.Element{Family: t.knftFamily(), Table: t.Name, Key: datumStrings(e.Key), Comment: optional(e.Comment)}
	if len(e.Value) > 0 {
		ke.Map, ke.Value = e.Set, datumStrings(e.Value)
	} else {
		ke.Set = e.Set
	}
	return ke
}

func datumStrings(ds []Datum) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
