package nftables

import (
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// txWriter is what the renderers write to: a knftables.Transaction, or an
// opRecorder for the netlink path.
type txWriter interface {
	Add(knftables.Object)
	Flush(knftables.Object)
	Delete(knftables.Object)
}

type opVerb uint8

const (
	opAdd opVerb = iota
	opFlush
	opDelete
)

// op is one operation of a transaction.
type op struct {
	verb opVerb
	obj  knftables.Object
	// stmts are the statements of an added rule, when the renderer
	// recorded them (see addRule).
	stmts []model.Stmt
	// elem is the typed key and verdict of an element's addition or
	// deletion (see renderer.addElement).
	elem *typedElement
}

// typedElement is an element of the maps and sets that hold Service ports'
// elements: its key, and for a map element of an addition its verdict.
type typedElement struct {
	key     elemKey
	verdict model.Verdict
}

// opRecorder records the operations a renderer writes, to be applied over
// netlink or replayed into a knftables.Transaction.
type opRecorder struct{ ops []op }

func (r *opRecorder) Add(o knftables.Object)    { r.ops = append(r.ops, op{verb: opAdd, obj: o}) }
func (r *opRecorder) Flush(o knftables.Object)  { r.ops = append(r.ops, op{verb: opFlush, obj: o}) }
func (r *opRecorder) Delete(o knftables.Object) { r.ops = append(r.ops, op{verb: opDelete, obj: o}) }

// addRule records the addition of rule, whose statements are stmts.
func (r *opRecorder) addRule(rule *knftables.Rule, stmts []model.Stmt) {
	r.ops = append(r.ops, op{verb: opAdd, obj: rule, stmts: stmts})
}

// replay writes the recorded operations to tx.
func (r *opRecorder) replay(tx txWriter) {
	for _, o := range r.ops {
		switch o.verb {
		case opAdd:
			tx.Add(o.obj)
		case opFlush:
			tx.Flush(o.obj)
		case opDelete:
			tx.Delete(o.obj)
		}
	}
}
