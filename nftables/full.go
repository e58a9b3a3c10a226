package nftables

import (
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/names"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Render adds to tx the operations that make the table hold exactly the
// rules of rs, whatever it held before: the table, its base chains (deleted
// and created again, so that a change of priority applies), its fixed
// chains, sets and maps (flushed and filled), and the chains and elements of
// every Service port. Affinity sets are added but not flushed, so that
// sessions stay with their endpoints across full syncs.
//
// existing names the objects the table holds now, by type ("chain", "set",
// "map"), as knftables.Interface.ListAll returns them; an empty map means a
// table that does not exist yet. Chains in it that rs does not use are
// flushed and reported in Result.Stale; sets and maps that rs does not use
// are deleted; chains that rs uses are flushed before they are written, new
// ones are only added. nil means unknown: every chain rs uses is flushed, and
// nothing else is.
//
// Every object names its family and table, so tx may come from an Interface
// with no default table, or from one whose default table is the one
// rendered.
//
// Render is pure: it only appends to tx.
func Render(tx *knftables.Transaction, rs *ruleset.Ruleset, opts Options, existing map[string][]string) (Result, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return Result{}, err
	}
	var res Result
	// Chains that exist are flushed; new ones are empty already, and a
	// flush per chain would double the size of a first sync.
	exists := map[string]bool{}
	for _, name := range existing["chain"] {
		exists[name] = true
	}
	mayExist := func(chain string) bool { return existing == nil || exists[chain] }
	w := r.knftWriter(tx)
	r.fixed(w, mayExist, false)
	st := newFullState(r, rs, &res, mayExist, existing != nil)
	st.services(w, rs.Services())

	if existing != nil {
		st.removeUnrendered(w, existing)
	}
	return res, nil
}

// RenderNew renders rs into a table that does not exist yet, as several
// transactions made by newTx: the first creates the table and its fixed
// objects, each of the others adds the chains, rules and elements of at most
// chunk Service ports. The kernel and nft take more than linear time in the
// size of one transaction, but between two transactions the table serves
// only the Service ports added so far: use it for a first sync only.
// chunk < 1 means one transaction for everything.
func RenderNew(newTx func() *knftables.Transaction, rs *ruleset.Ruleset, opts Options, chunk int) ([]*knftables.Transaction, Result, error) {
	var txs []*knftables.Transaction
	_, res, err := renderNew(func(r *renderer) knftWriter {
		txs = append(txs, newTx())
		return r.knftWriter(txs[len(txs)-1])
	}, rs, opts, chunk)
	if err != nil {
		return nil, Result{}, err
	}
	return txs, res, nil
}

// renderNew is RenderNew into the transactions that newTx makes for the
// renderer.
func renderNew[T txWriter](newTx func(*renderer) T, rs *ruleset.Ruleset, opts Options, chunk int) ([]T, Result, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return nil, Result{}, err
	}
	var res Result
	tx := newTx(r)
	r.fixed(tx, func(string) bool { return false }, false)
	txs := []T{tx}
	st := newFullState(r, rs, &res, func(string) bool { return false }, false)
	all := rs.Services()
	if chunk < 1 {
		chunk = max(len(all), 1)
	}
	for start := 0; start < len(all); start += chunk {
		if start > 0 || len(all) > chunk {
			tx = newTx(r)
			txs = append(txs, tx)
		}
		st.services(tx, all[start:min(start+chunk, len(all))])
	}
	return txs, res, nil
}

// fullState is what the services of a full render of rs share: who claimed
// each element, which objects were written.
type fullState struct {
	r      *renderer
	rs     *ruleset.Ruleset
	res    *Result
	flush  func(chain string) bool
	claims map[elemKey]*ruleset.Service
	// rendered are the chains and sets written ("chain NAME", "set
	// NAME"), for removeUnrendered; nil when nothing is to be removed.
	rendered map[string]bool
	// inTable are the elements the maps and sets hold already, when they
	// are not flushed (renderResync): each is replaced, by a delete and an
	// add, rather than added.
	inTable map[elemKey]bool
}

// newFullState is the state of a full render of rs. removeUnrendered
// names what it will be given, if anything: the objects of a table that
// exists, of which those the render does not write are removed.
func newFullState(r *renderer, rs *ruleset.Ruleset, res *Result, flush func(string) bool, removeUnrendered bool) *fullState {
	st := &fullState{r: r, rs: rs, res: res, flush: flush,
		// About three elements per Service port: its cluster IP's, its
		// map element, an external one.
		claims: make(map[elemKey]*ruleset.Service, 3*len(rs.Services()))}
	if removeUnrendered {
		st.rendered = map[string]bool{}
	}
	return st
}

// removeUnrendered flushes the chains of existing (see Render) that st did
// not write, reporting them as stale, and deletes its sets and maps that st
// did not write. st must have been made to remove them (newFullState).
func (st *fullState) removeUnrendered(tx txWriter, existing map[string][]string) {
	r := st.r
	rendered := st.rendered
	for _, name := range r.fixedSetsAndMaps() {
		rendered["set "+name] = true
		rendered["map "+name] = true
	}
	for _, name := range fixedChains {
		rendered["chain "+name] = true
	}
	for _, bc := range baseChains {
		rendered["chain "+bc.Name] = true
	}
	for _, name := range sortedCopy(existing["chain"]) {
		if !rendered["chain "+name] {
			tx.write(chainOp(opFlush, chainRef(name)))
			st.res.Stale = append(st.res.Stale, name)
		}
	}
	// Anonymous sets ("__set0") belong to rules, not to us.
	for _, kind := range []string{"set", "map"} {
		for _, name := range sortedCopy(existing[kind]) {
			if !rendered[kind+" "+name] && !strings.HasPrefix(name, "__") {
				tx.write(setOp(opDelete, &model.Set{Name: name}, kind == "map"))
			}
		}
	}
}

// services writes the affinity sets, chains, rules and elements of svcs.
func (st *fullState) services(tx txWriter, svcs []*ruleset.Service) {
	r := st.r
	var elems []claimedElem
	for _, s := range svcs {
		if !names.Safe(s.Name) {
			st.res.Warnings = append(st.res.Warnings, names.UnsafeWarning(s))
			continue
		}
		for _, set := range r.affinitySets(s) {
			tx.write(setOp(opAdd, set, false))
			if st.rendered != nil {
				st.rendered["set "+set.Name] = true
			}
		}
		chains := r.chains(s)
		for i := range chains {
			c := &chains[i].decl
			tx.write(chainOp(opAdd, c))
			if st.flush(c.Name) {
				tx.write(chainOp(opFlush, c))
			}
			if st.rendered != nil {
				st.rendered["chain "+c.Name] = true
			}
		}
		for i := range chains {
			r.writeRules(tx, &chains[i])
		}
		r.elements(s, func(k elemKey, v verdict, kind ruleset.FrontendKind) {
			if !owns(st.rs, s, k, kind) {
				if w, ok := notOwnedWarning(st.rs, s, k, kind); ok && !slices.Contains(st.res.Warnings, w) {
					st.res.Warnings = append(st.res.Warnings, w) // one per destination, not per element
				}
				return
			}
			if _, dup := st.claims[k]; dup {
				return
			}
			st.claims[k] = s
			elems = append(elems, claimedElem{k, claim{s, v}})
		})
	}
	for _, e := range elems {
		if st.inTable[e.key] {
			r.deleteElement(tx, e.key)
		}
		r.addElement(tx, e.key, e.claim)
	}
}

// Script is the nft script that Render writes for rs into a table that does
// not exist yet: what a dry run prints. It needs no nft binary.
func Script(rs *ruleset.Ruleset, opts Options) (string, Result, error) {
	tx := knftables.NewFake("", "").NewTransaction()
	res, err := Render(tx, rs, opts, map[string][]string{})
	if err != nil {
		return "", Result{}, err
	}
	return tx.String(), res, nil
}
