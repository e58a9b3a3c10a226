package nftables

import (
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// txWriter is what the renderers write to: typed operations on the objects
// of the table (nftables/internal/model), which an opRecorder records (for
// netlink, or for a knftables transaction later) and a knftWriter writes to
// a knftables transaction at once.
type txWriter interface {
	write(op)
}

type opVerb uint8

const (
	opAdd opVerb = iota
	opFlush
	opDelete
)

// opKind is the kind of object an op works on.
type opKind uint8

const (
	kindTable opKind = iota + 1
	kindChain
	kindRule
	kindSet
	kindMap
	kindSetElement
	kindMapElement
)

// op is one operation of a transaction on one object of the table, a typed
// value: an addition carries the object's whole declaration; a flush or a
// delete only needs its name (an element's: its key).
type op struct {
	verb opVerb
	kind opKind
	// table is the table (kindTable).
	table *model.Table
	// chain is the chain (kindChain), or the chain a rule is appended to
	// (kindRule).
	chain *model.Chain
	// rule is the rule of kindRule, appended to chain.
	rule *ruleDef
	// set is the set (kindSet) or map (kindMap).
	set *model.Set
	// elem is the element of kindSetElement and kindMapElement.
	elem *model.Element
}

// chainOp is an operation on a chain; a flush or a delete uses only its
// name.
func chainOp(verb opVerb, c *model.Chain) op { return op{verb: verb, kind: kindChain, chain: c} }

// ruleOp appends ru to chain.
func ruleOp(chain *model.Chain, ru *ruleDef) op {
	return op{verb: opAdd, kind: kindRule, chain: chain, rule: ru}
}

// setOp is an operation on a set, or a map when isMap; a flush or a delete
// uses only its name.
func setOp(verb opVerb, s *model.Set, isMap bool) op {
	if isMap {
		return op{verb: verb, kind: kindMap, set: s}
	}
	return op{verb: verb, kind: kindSet, set: s}
}

// elementOp is an operation on an element of a set, or of a map when
// isMap; a delete uses only its key.
func elementOp(verb opVerb, e *model.Element, isMap bool) op {
	if isMap {
		return op{verb: verb, kind: kindMapElement, elem: e}
	}
	return op{verb: verb, kind: kindSetElement, elem: e}
}

// opRecorder records the operations a renderer writes, to be applied over
// netlink or replayed into a knftables transaction.
type opRecorder struct{ ops []op }

// newRecorder is an empty opRecorder, for a renderer.
func newRecorder(*renderer) *opRecorder { return &opRecorder{} }

func (r *opRecorder) write(o op) { r.ops = append(r.ops, o) }

// replay writes the recorded operations to tx.
func (r *opRecorder) replay(tx txWriter) {
	for _, o := range r.ops {
		tx.write(o)
	}
}

// knftWriter writes operations to a knftables transaction, as the
// knftables objects that the model makes of them.
type knftWriter struct {
	tx *knftables.Transaction
	// table holds the family and name of the table (nothing else).
	table *model.Table
}

// knftWriter writes to tx on the renderer's table.
func (r *renderer) knftWriter(tx *knftables.Transaction) knftWriter {
	return knftWriter{tx: tx, table: r.tableRef}
}

// tableRef is the table of a family and a name, declared with nothing in
// it.
func tableRef(family v1.IPFamily, name string) *model.Table {
	if family == v1.IPv6Protocol {
		return &model.Table{Family: model.IPv6, Name: name}
	}
	return &model.Table{Family: model.IPv4, Name: name}
}

func (w knftWriter) write(o op) {
	obj := w.object(o)
	switch o.verb {
	case opAdd:
		w.tx.Add(obj)
	case opFlush:
		w.tx.Flush(obj)
	case opDelete:
		w.tx.Delete(obj)
	}
}

// object is the knftables object of o.
func (w knftWriter) object(o op) knftables.Object {
	t, add := w.table, o.verb == opAdd
	switch o.kind {
	case kindTable:
		return o.table.TableObject()
	case kindChain:
		if add {
			return t.ChainObject(o.chain)
		}
		return t.ChainName(o.chain.Name)
	case kindRule:
		return t.PrintedRuleObject(o.chain.Name, o.rule.rule, o.rule.text)
	case kindSet, kindMap:
		if add {
			return t.SetObject(o.set)
		}
		return t.SetName(o.set.Name, o.kind == kindMap)
	default: // kindSetElement, kindMapElement
		if add {
			return t.ElementObject(*o.elem)
		}
		return t.ElementKey(*o.elem, o.kind == kindMapElement)
	}
}
