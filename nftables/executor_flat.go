package nftables

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/netnsrun"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// dialFlatIn opens the flat layout's netlink socket in ns, or in the
// calling thread's namespace when ns is nil.
func dialFlatIn(ns *netnsrun.Namespace) (*FlatNetlink, error) {
	if ns == nil {
		return DialFlatNetlink()
	}
	var conn *FlatNetlink
	err := ns.Do(func() error {
		var err error
		conn, err = DialFlatNetlink()
		return err
	})
	return conn, err
}

// syncFlat is sync for the flat layout.
func (e *Executor) syncFlat(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	var fallback error
	if e.last != nil && e.flatState != nil {
		res, err := e.syncFlatChanges(ctx, rs)
		if err == nil {
			return res, nil
		}
		fallback = err
	} else {
		fallback = fmt.Errorf("%w: no ruleset applied yet", svcproxy.ErrFullSyncNeeded)
	}
	res, err := e.syncFlatFull(ctx, rs)
	res.Fallback = fallback
	return res, err
}

// syncFlatChanges applies the changes from the last Ruleset to rs in one
// transaction. After a failure the Executor's state no longer matches the
// table: the next sync is a full one.
func (e *Executor) syncFlatChanges(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	tx := e.nft.NewTransaction()
	ch, err := RenderFlatChanges(tx, e.flatState, e.last, rs)
	if err != nil {
		return outcome{}, err
	}
	e.last = nil
	res := outcome{warnings: ch.Warnings, SyncDetails: SyncDetails{Operations: tx.NumOperations()}}
	switch {
	case tx.NumOperations() == 0:
	case ch.ElementsOnly && e.flatNL != nil:
		if err := e.flatNL.Apply(ch); err != nil {
			return outcome{}, fmt.Errorf("nftables: incremental sync of the flat layout over netlink: %w", err)
		}
		res.Transactions, res.Netlink = 1, true
	default:
		if e.flatNL != nil && !ch.ElementsOnly {
			res.NotNetlink = errors.New("the flat layout's rules change: an endpoint count appears in or leaves a target group")
		}
		if err := e.nft.Run(ctx, tx); err != nil {
			return outcome{}, fmt.Errorf("nftables: incremental sync of the flat layout: %w", err)
		}
		res.Transactions = 1
	}
	e.last = rs
	return res, nil
}

// syncFlatFull writes the whole flat table of rs.
func (e *Executor) syncFlatFull(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	e.last, e.flatState = nil, nil
	var notNetlink error
	if e.flatNL != nil {
		existing, err := e.listAll(ctx)
		switch {
		case knftables.IsNotFound(err), err == nil && len(existing) == 0:
			return e.loadFlat(ctx, rs)
		case err != nil:
			return outcome{full: true}, fmt.Errorf("nftables: listing table %s %s: %w", Family(e.cfg.Family), e.table, err)
		}
		res, err := e.resyncFlat(ctx, rs, existing)
		if err == nil {
			return res, nil
		}
		notNetlink = err
	}
	tx := e.nft.NewTransaction()
	e.replaceTable(tx)
	st, rendered := RenderFlat(tx, rs, e.cfg.Options)
	if err := e.nft.Run(ctx, tx); err != nil {
		return outcome{full: true}, fmt.Errorf("nftables: full sync of the flat layout: %w", err)
	}
	e.last, e.flatState = rs, st
	res := outcome{full: true, warnings: rendered.Warnings, SyncDetails: SyncDetails{Operations: tx.NumOperations(), Transactions: 1}}
	res.NotNetlink = notNetlink
	return res, nil
}

// resyncFlat rewrites the loaded flat table for rs (FlatResync): its
// definitions through nft, with the chains, sets and maps of existing (the
// table's) that rs does not use deleted, its other elements, their sets
// flushed first, over netlink. On failure the caller replaces the table.
func (e *Executor) resyncFlat(ctx context.Context, rs *ruleset.Ruleset, existing map[string][]string) (outcome, error) {
	st, t, rendered := flatTable(rs, e.cfg.Options)
	local := map[string]bool{}
	for _, s := range t.Sets {
		local[s.Name] = s.Interval && len(s.Key) == 1
	}
	tx := e.nft.NewTransaction()
	for _, o := range flatDefinitionObjects(st.configTable(t)) {
		tx.Add(o)
		switch o := o.(type) {
		case *knftables.Chain:
			tx.Flush(o)
		case *knftables.Set:
			if local[o.Name] { // the netlink sets keep their elements until Load flushes them
				tx.Flush(o)
			}
		}
	}
	deleteUnused(tx, t, existing)
	if err := e.nft.Run(ctx, tx); err != nil {
		return outcome{}, fmt.Errorf("resync of the flat layout, definitions: %w", err)
	}
	n, elements, err := e.flatNL.load(FlatLoad{table: t, resync: true})
	if err != nil {
		return outcome{}, fmt.Errorf("resync of the flat layout, elements over netlink: %w", err)
	}
	e.last, e.flatState = rs, st
	res := outcome{full: true, warnings: rendered.Warnings}
	res.Operations, res.Transactions, res.Netlink = tx.NumOperations()+elements, 1+n, true
	return res, nil
}

// deleteUnused adds to tx, after t's definitions (which rewrite every chain
// that t has), the deletion of the chains, sets and maps of existing that
// t does not have: those of endpoint counts or affinity classes that an
// earlier Ruleset used. Their chains are all flushed before any is
// deleted, so that none is still referenced.
func deleteUnused(tx *knftables.Transaction, t *model.Table, existing map[string][]string) {
	used := map[string]bool{}
	for _, c := range t.Chains {
		used["chain "+c.Name] = true
	}
	for _, s := range t.Sets {
		used["set "+s.Name], used["map "+s.Name] = true, true
	}
	var chains []*knftables.Chain
	for _, name := range existing["chain"] {
		if !used["chain "+name] {
			c := &knftables.Chain{Name: name}
			chains = append(chains, c)
			tx.Flush(c)
		}
	}
	for _, c := range chains {
		tx.Delete(c)
	}
	for _, name := range existing["set"] {
		if !used["set "+name] {
			tx.Delete(&knftables.Set{Name: name})
		}
	}
	for _, name := range existing["map"] {
		if !used["map "+name] {
			tx.Delete(&knftables.Map{Name: name})
		}
	}
}

// loadFlat writes the flat table of rs into no table: its definitions
// through nft, its other elements over netlink.
func (e *Executor) loadFlat(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	st, t, rendered := flatTable(rs, e.cfg.Options)
	tx := e.nft.NewTransaction()
	e.replaceTable(tx)
	for _, o := range flatDefinitionObjects(st.configTable(t)) {
		tx.Add(o)
	}
	if err := e.nft.Run(ctx, tx); err != nil {
		return outcome{full: true}, fmt.Errorf("nftables: full sync of the flat layout, definitions: %w", err)
	}
	load := FlatLoad{table: t}
	n, elements, err := e.flatNL.load(load)
	if err != nil {
		return outcome{full: true}, fmt.Errorf("nftables: full sync of the flat layout, elements over netlink: %w", err)
	}
	e.last, e.flatState = rs, st
	res := outcome{full: true, warnings: rendered.Warnings}
	res.Operations, res.Transactions, res.Netlink = tx.NumOperations()+elements, 1+n, n > 0
	return res, nil
}

// replaceTable adds to tx the deletion of the Executor's table, whether or
// not it exists, so that what tx adds next replaces it whole.
func (e *Executor) replaceTable(tx *knftables.Transaction) {
	t := &knftables.Table{Family: Family(e.cfg.Family), Name: e.table}
	tx.Add(t)
	tx.Delete(t)
}

// flatDefinitionObjects are the objects of t that FlatNetlink.Load does
// not write: the table, its sets, chains and rules, and the elements of
// one-field interval sets, which hold the configuration (model.Table's
// Definitions as knftables objects).
func flatDefinitionObjects(t *model.Table) []knftables.Object {
	defs := &model.Table{Family: t.Family, Name: t.Name, Comment: t.Comment, Sets: t.Sets, Chains: t.Chains, Elements: t.NftElements()}
	return defs.Objects()
}

// checkFlat is CheckState for the flat layout: the base chains and the
// fixed regular chains, which always hold rules, and the fixed sets.
func (e *Executor) checkFlat(ctx context.Context) (string, error) {
	r := newFlatRenderer(e.last.Config(), e.cfg.Options)
	var chains []string
	for _, c := range append(r.flatBaseChains(), r.flatFixedChains()...) {
		chains = append(chains, c.Name)
	}
	var sets []string
	for _, s := range r.flatFixedSets() {
		sets = append(sets, s.Name)
	}
	return e.checkNames(ctx, chains, sets)
}
