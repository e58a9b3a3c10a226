package flat

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// LimitTransactions bounds the transactions of n to bytes, as a
// socket whose send buffer could not be raised.
func LimitTransactions(n *Netlink, bytes int) { n.conn.LimitTransactions(bytes) }

// SplitDiff renders the whole flat table of rs with its Service ports
// in one range, one by one, and split into k, in blocks; and describes the
// first difference of script, elements set by set, warnings or state, or
// of the definitions written from the configuration's elements alone
// (configTable) and from all, or returns "".
func SplitDiff(rs *ruleset.Ruleset, opts Options, k int) string {
	st1, t1, r1 := flatTableIn(rs, opts, parallel.Split(rs.Len(), 1), false)
	stk, tk, rk := flatTableIn(rs, opts, parallel.Split(rs.Len(), k), true)
	switch {
	case t1.Script() != tk.Script():
		return fmt.Sprintf("script in one range:\n%s\nin %d:\n%s", t1.Script(), k, tk.Script())
	case elementsBySet(t1) != elementsBySet(tk):
		return fmt.Sprintf("elements in one range:\n%s\nin %d:\n%s", elementsBySet(t1), k, elementsBySet(tk))
	case commentOverBound(tk) != "":
		return commentOverBound(tk)
	case fmt.Sprint(r1.Warnings) != fmt.Sprint(rk.Warnings):
		return fmt.Sprintf("warnings in one range %v, in %d %v", r1.Warnings, k, rk.Warnings)
	case !maps.Equal(st1.counts, stk.counts), !maps.Equal(st1.affinity, stk.affinity):
		return fmt.Sprintf("counts in one range %v %v, in %d %v %v", st1.counts, st1.affinity, k, stk.counts, stk.affinity)
	case !slices.Equal(st1.hairpin.v4.keys, stk.hairpin.v4.keys), !slices.Equal(st1.hairpin.v4.uses, stk.hairpin.v4.uses),
		!slices.Equal(st1.hairpin.v6.keys, stk.hairpin.v6.keys), !slices.Equal(st1.hairpin.v6.uses, stk.hairpin.v6.uses):
		return fmt.Sprintf("hairpin uses in one range %v, in %d %v", st1.hairpin, k, stk.hairpin)
	case stk.configTable(tk).Definitions() != tk.Definitions(), stk.configTable(tk).Redefinitions() != tk.Redefinitions():
		return fmt.Sprintf("definitions of the configuration's elements:\n%s\nof all:\n%s", stk.configTable(tk).Definitions(), tk.Definitions())
	}
	return ""
}

// commentOverBound describes a row of a block of t whose comment is longer
// than its block's bound (model.RowComments), which the netlink messages'
// sizes count on, or returns "".
func commentOverBound(t *model.Table) string {
	for _, e := range t.Elements {
		c, ok := e.Source.(model.RowComments)
		if !ok {
			continue
		}
		for i := range e.Rows {
			if len(c.RowComment(i)) > c.MaxCommentLen() {
				return fmt.Sprintf("%s row %d: comment %q over its block's bound %d", e.Set, i, c.RowComment(i), c.MaxCommentLen())
			}
		}
	}
	return ""
}

// elementsBySet lists t's elements, each block's rows one by one, set by
// set in the order the sets first appear, with their comments.
func elementsBySet(t *model.Table) string {
	es := model.Expand(t.Elements)
	var sets []string
	for _, e := range es {
		if !slices.Contains(sets, e.Set) {
			sets = append(sets, e.Set)
		}
	}
	var b strings.Builder
	for _, set := range sets {
		for _, e := range es {
			if e.Set == set {
				fmt.Fprintf(&b, "%s %v : %v %v %q\n", e.Set, e.Key, e.Value, e.Verdict, e.Comment)
			}
		}
	}
	return b.String()
}

// OwnershipDiff describes a frontend of rs whose owner the whole table's
// ownership names otherwise than ruleset.Ruleset's index does, or returns
// "".
func OwnershipDiff(rs *ruleset.Ruleset) string {
	whole, asked := wholeTableOwnership(rs), ownership{rs: rs}
	for _, s := range rs.Services() {
		for _, f := range s.Frontends() {
			if w, a := whole.owns(s, f), asked.owns(s, f); w != a {
				return fmt.Sprintf("%v of %v: whole table %v, Ruleset %v", f, s.Name, w, a)
			}
		}
	}
	return ""
}
