package nftables

import (
	"maps"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/ruleset"
)

// renderResync renders rs into a table that exists and serves, as
// several transactions made by newTx, each of which leaves every Service
// port either as the table had it or as rs has it, so that no traffic is
// lost between them: the first rewrites the table's fixed objects and
// keeps the elements of its maps and sets; each of the next ones rewrites
// the chains and elements of at most chunk Service ports (an element the
// table holds is deleted and added again in the same transaction); the
// last deletes the elements rs does not have, flushes the chains it does
// not use (Result.Stale) and deletes its sets and maps that rs does not
// use. existing lists the table's objects, as for Render; elements are
// those of its maps and sets (knftables' ListElements). An element it
// cannot read is an error: Render then does the same in one transaction.
func renderResync[T txWriter](newTx func(*renderer) T, rs *ruleset.Ruleset, opts Options, existing map[string][]string, elements []*knftables.Element, chunk int) ([]T, Result, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return nil, Result{}, err
	}
	inTable := make(map[elemKey]bool, len(elements))
	for _, e := range elements {
		k, ok, err := r.parseElementKey(e)
		if err != nil {
			return nil, Result{}, err
		}
		if ok {
			inTable[k] = true
		}
	}
	exists := map[string]bool{}
	for _, name := range existing["chain"] {
		exists[name] = true
	}
	mayExist := func(chain string) bool { return exists[chain] }
	var res Result
	tx := newTx(r)
	r.fixed(tx, mayExist, true)
	txs := []T{tx}
	st := newFullState(r, rs, &res, mayExist, true)
	st.inTable = inTable
	all := rs.Services()
	if chunk < 1 {
		chunk = max(len(all), 1)
	}
	for start := 0; start < len(all); start += chunk {
		tx = newTx(r)
		txs = append(txs, tx)
		st.services(tx, all[start:min(start+chunk, len(all))])
	}
	tx = newTx(r)
	txs = append(txs, tx)
	for _, k := range slices.SortedFunc(maps.Keys(inTable), elemKey.compare) {
		if _, rendered := st.claims[k]; !rendered {
			r.deleteElement(tx, k)
		}
	}
	st.removeUnrendered(tx, existing)
	return txs, res, nil
}
