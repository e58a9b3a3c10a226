package model

import (
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// Script is the table as one `nft -f` script that replaces it whole in one
// transaction: the table added and deleted (so that nothing of an earlier
// content stays), then added again with its sets, chains, rules and, per
// set, all of its elements in one statement, which nft parses far faster
// than one statement per element.
func (t *Table) Script() string {
	var b strings.Builder
	t.writeDefinitions(&b)
	t.writeElements(&b, t.Family.String()+" "+t.Name)
	return b.String()
}

// Definitions is Script without the elements that ElementBatch sends: the
// table replaced by one whose sets and maps are empty but for those of
// one-field interval sets (which netlink would have to encode as nft's
// interval-end pairs; they hold configuration, not Services).
func (t *Table) Definitions() string {
	var b strings.Builder
	t.writeDefinitions(&b)
	(&Table{Family: t.Family, Name: t.Name, Elements: t.elements(false)}).writeElements(&b, t.Family.String()+" "+t.Name)
	return b.String()
}

// Redefinitions is Definitions for a table that exists and holds elements:
// the table, its sets and chains added (which leaves those that exist as
// they are, elements included), every chain flushed and its rules added,
// the one-field interval sets flushed and their elements added; one
// transaction. Elements that ElementBatch sends stay as they were (see
// ElementBatch.Flush); so do Dynamic sets' elements, and the sets and
// chains that t does not have.
func (t *Table) Redefinitions() string {
	var b strings.Builder
	fam := t.Family.String() + " " + t.Name
	b.WriteString("add table " + fam + " {" + commentClause(t.Comment) + " }\n")
	t.writeSetsAndChains(&b, fam)
	for _, c := range t.Chains {
		b.WriteString("flush chain " + fam + " " + c.Name + "\n")
	}
	t.writeRules(&b, fam)
	encodes := t.netlinkSets()
	for _, s := range t.Sets {
		if !encodes[s.Name] && !s.Dynamic {
			b.WriteString("flush set " + fam + " " + s.Name + "\n")
		}
	}
	(&Table{Family: t.Family, Name: t.Name, Elements: t.elements(false)}).writeElements(&b, fam)
	return b.String()
}

// NetlinkSets are the sets whose elements Definitions and Redefinitions
// leave to ElementBatch, in the table's order. A Dynamic set is not one of
// them: its elements are the packet path's, and neither flushes them.
func (t *Table) NetlinkSets() []string {
	var names []string
	for _, s := range t.Sets {
		if t.netlinkEncodes(s.Name) && !s.Dynamic {
			names = append(names, s.Name)
		}
	}
	return names
}

// NetlinkElements are the elements that Definitions leaves out.
func (t *Table) NetlinkElements() []Element { return t.elements(true) }

// NftElements are the elements that Definitions writes: those of one-field
// interval sets.
func (t *Table) NftElements() []Element { return t.elements(false) }

// elements are t's elements that ElementBatch encodes (netlink) or that
// nft writes (not netlink: those of the one-field interval sets), in
// order: a part of t.Elements when they are one run of it (the flat layout
// puts its configuration first), else a copy. The caller must not modify
// them. An element of a set that t does not have is one that ElementBatch
// encodes, and refuses. A table has few one-field interval sets, and
// another set's name mostly differs from theirs in length, so each element
// costs a comparison or two of lengths.
func (t *Table) elements(netlink bool) []Element {
	var nft []string
	for _, s := range t.Sets {
		if !s.netlinkEncoded() {
			nft = append(nft, s.Name)
		}
	}
	keep := func(e *Element) bool { return slices.Contains(nft, e.Set) != netlink }
	start, end := -1, -1
	for i := range t.Elements {
		if !keep(&t.Elements[i]) {
			continue
		}
		if start >= 0 && end != i {
			return t.copyElements(keep)
		}
		if start < 0 {
			start = i
		}
		end = i + 1
	}
	if start < 0 {
		return nil
	}
	return t.Elements[start:end:end]
}

func (t *Table) copyElements(keep func(*Element) bool) []Element {
	var out []Element
	for i := range t.Elements {
		if keep(&t.Elements[i]) {
			out = append(out, t.Elements[i])
		}
	}
	return out
}

// netlinkSets reports, by set name, whether ElementBatch encodes a set's
// elements (netlinkEncodes).
func (t *Table) netlinkSets() map[string]bool {
	encodes := make(map[string]bool, len(t.Sets))
	for _, s := range t.Sets {
		encodes[s.Name] = t.netlinkEncodes(s.Name)
	}
	return encodes
}

// netlinkEncodes reports whether ElementBatch encodes the elements of a
// set: all but those of one-field interval sets.
func (t *Table) netlinkEncodes(set string) bool {
	for _, s := range t.Sets {
		if s.Name == set {
			return s.netlinkEncoded()
		}
	}
	return false
}

// netlinkEncoded reports whether ElementBatch encodes s's elements.
func (s *Set) netlinkEncoded() bool { return !s.Interval || len(s.Key) > 1 }

func (t *Table) writeDefinitions(b *strings.Builder) {
	fam := t.Family.String() + " " + t.Name
	b.WriteString("add table " + fam + "\ndelete table " + fam + "\n")
	b.WriteString("add table " + fam + " {" + commentClause(t.Comment) + " }\n")
	t.writeSetsAndChains(b, fam)
	t.writeRules(b, fam)
}

// writeSetsAndChains adds t's sets and chains (without rules).
func (t *Table) writeSetsAndChains(b *strings.Builder, fam string) {
	for _, s := range t.Sets {
		kind := "set"
		if s.IsMap() {
			kind = "map"
		}
		b.WriteString("add " + kind + " " + fam + " " + s.Name + " {")
		s.writeBody(b)
		b.WriteString(" }\n")
	}
	for _, c := range t.Chains {
		b.WriteString("add chain " + fam + " " + c.Name + " {")
		if c.Base != nil {
			b.WriteString(" type " + c.Base.Type + " hook " + c.Base.Hook + " priority " + t.priority(c.Base.Priority) + " ;")
		}
		b.WriteString(commentClause(c.Comment) + " }\n")
	}
}

// writeRules adds every chain's rules.
func (t *Table) writeRules(b *strings.Builder, fam string) {
	for _, c := range t.Chains {
		for _, r := range c.Rules {
			b.WriteString("add rule " + fam + " " + c.Name + " " + r.String())
			if r.Comment != "" {
				b.WriteString(" comment " + quote(r.Comment))
			}
			b.WriteByte('\n')
		}
	}
}

// writeElements writes one "add element" statement per set, its elements
// in the table's order.
func (t *Table) writeElements(b *strings.Builder, fam string) {
	bySet := map[string][]int{}
	var order []string
	for i, e := range t.Elements {
		if _, ok := bySet[e.Set]; !ok {
			order = append(order, e.Set)
		}
		bySet[e.Set] = append(bySet[e.Set], i)
	}
	var line []byte
	var buf []Datum
	for _, set := range order {
		line = append(line[:0], "add element "+fam+" "+set+" { "...)
		n := 0
		for _, i := range bySet[set] {
			e := &t.Elements[i]
			comment := strings.ReplaceAll(e.Comment, `"`, "'")
			_, _, own := e.rowComments()
			for r := range e.Len() {
				if n++; n > 1 {
					line = append(line, ", "...)
				}
				if own {
					comment = strings.ReplaceAll(e.rowComment(r), `"`, "'")
				}
				line = e.appendRowText(line, r, comment, &buf)
			}
		}
		b.Write(append(line, " }\n"...))
	}
}

// priority is a chain priority as a number, as knftables writes it: nft
// 1.0.6 refuses "dstnat" in the output hook.
func (t *Table) priority(p string) string {
	if n, err := knftables.ParsePriority(t.knftFamily(), p); err == nil {
		return strconv.Itoa(n)
	}
	return p
}

func commentClause(c string) string {
	if c == "" {
		return ""
	}
	return " comment " + quote(c) + " ;"
}

// quote makes a comment an nft string: nft has no escape for a double
// quote, so one becomes a single quote.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, "'") + `"` }

// appendRowText appends row r of e (a block's, or e itself) as nft writes
// an element, with comment, e's comment made an nft string's content. A
// row that e's Source makes is made in buf.
func (e *Element) appendRowText(b []byte, r int, comment string, buf *[]Datum) []byte {
	rowKey, value := e.row(r, buf)
	b = appendData(b, e.Key)
	if len(e.Key) > 0 && len(rowKey) > 0 {
		b = append(b, " . "...)
	}
	b = appendData(b, rowKey)
	if comment != "" {
		b = append(append(append(b, ` comment "`...), comment...), '"')
	}
	if len(value) > 0 {
		b = appendData(append(b, " : "...), value)
	}
	if e.Verdict != nil {
		b = e.Verdict.appendText(append(b, " : "...))
	}
	return b
}
