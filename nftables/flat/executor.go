package flat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftexec"
	"github.com/svcproxy/svcproxy/ruleset"
)

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	// Family is the IP family of the Rulesets the Executor applies.
	Family v1.IPFamily
	// Options are passed to the renderings.
	Options Options
	// NewInterface returns the knftables.Interface for a family and table.
	// nil means nftables.Open's checks of nft and the kernel. Tests pass
	// knftables fakes.
	NewInterface func(family knftables.Family, table string) (knftables.Interface, error)
	// Netlink sends elements over netfilter netlink sockets of the
	// Executor's own instead of nft, which reads every chain and set of
	// the table before each transaction. A table that does not exist yet
	// is written as its definitions in one nft transaction and then its
	// other elements over netlink in one transaction (in as few as the
	// socket's send buffer takes when it could not be raised; until the
	// last, the table serves only the Service ports whose elements are
	// in). A full sync of a loaded table (Resync) rewrites its definitions
	// in one nft transaction and then flushes and refills its element sets
	// in one netlink transaction; without a socket, or when that fails
	// (SyncDetails.NotNetlink says why), a full sync replaces the table
	// whole in one nft transaction. An incremental sync is one
	// transaction: over netlink when it changes elements only, through nft
	// when it changes rules (an endpoint count appears in or leaves a
	// target group). NewExecutor opens the sockets in the network
	// namespace of NetNS, or else of the calling thread, which must be the
	// one nft works in; Close closes them.
	Netlink bool
	// NetNS, when not "", is the path of the network namespace to apply
	// the rules in, such as /run/netns/NAME or /proc/PID/ns/net; "" means
	// the caller's. NewExecutor opens it and keeps it open until Close;
	// nft then runs from a thread locked and moved into it, and the
	// netlink sockets are opened in it, so that the process itself stays
	// in its own namespace.
	NetNS string
}

// Executor applies Rulesets of one IP family to one flat table: a full
// sync the first time, after a failure and when the Ruleset's Config
// changes; otherwise only the changes since the last Ruleset it applied
// (ExecutorConfig.Netlink says how each goes to the kernel). The layout
// flushes no chains, so SyncResult.NextSync is 0. It implements
// engine.Backend. Its methods are safe for concurrent use; they run one at
// a time.
type Executor struct {
	cfg ExecutorConfig
	// t is the table, its nft interface, the listing socket of
	// ExecutorConfig.Netlink and the namespace of ExecutorConfig.NetNS.
	t *nftexec.Table

	// mu is held by every exported method but NewExecutor and guards
	// what follows.
	mu sync.Mutex
	// last is the last Ruleset applied; nil forces a full sync.
	last *ruleset.Ruleset
	// state is what RenderChanges knows of the table, nil before a full
	// sync.
	state *State
	// nl is the element socket of ExecutorConfig.Netlink, or nil.
	nl *Netlink
	// expected is what the deep check compares the table with: what a
	// full sync of expectedFor leaves there.
	expected    nftexec.Expected
	expectedFor *ruleset.Ruleset
}

// errNotMade is the error of an Executor that NewExecutor did not make.
var errNotMade = errors.New("nftables/flat: Executor not made by NewExecutor")

// made reports whether NewExecutor made e: the methods of a nil or zero
// Executor fail (RequestFullSync does nothing) and touch no kernel.
func (e *Executor) made() bool { return e != nil && e.t != nil }

// SyncDetails is what one sync did: the svcproxy.SyncResult that Sync
// returns, and this backend's own account of it (Apply returns both).
type SyncDetails struct {
	svcproxy.SyncResult
	// Fallback is why an incremental sync was not possible or failed, when
	// a full sync replaced it; nil otherwise.
	Fallback error
	// Operations is the number of operations applied, elements sent over
	// netlink included (0 when there was nothing to do).
	Operations int
	// Transactions is the number of transactions applied.
	Transactions int
	// Netlink reports a sync that sent elements over netlink (see
	// ExecutorConfig.Netlink). NotNetlink is why an incremental sync, or a
	// full one of a loaded table, went through nft instead, when the
	// netlink path was asked for.
	Netlink    bool
	NotNetlink error
}

// outcome is what the steps of a sync report, before Sync turns it into a
// svcproxy.SyncResult.
type outcome struct {
	full     bool
	warnings []svcproxy.Warning
	SyncDetails
}

// NewExecutor returns an Executor for the table of cfg.Options in
// cfg.Family. With a nil cfg.NewInterface it checks nft and the kernel,
// and so fails with a clear error when either is too old.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	t, err := nftexec.OpenTable(nftexec.Config{
		Family:       cfg.Family,
		Name:         cmp.Or(cfg.Options.Table, DefaultTable),
		NewInterface: cfg.NewInterface,
		Netlink:      cfg.Netlink,
		NetNS:        cfg.NetNS,
	})
	if err != nil {
		return nil, err
	}
	e := &Executor{cfg: cfg, t: t}
	if cfg.Netlink {
		err := t.InNamespace(func() error {
			var err error
			e.nl, err = DialNetlink()
			return err
		})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("nftables: %w", err)
		}
	}
	return e, nil
}

// Close releases the netlink sockets of ExecutorConfig.Netlink and the
// network namespace of ExecutorConfig.NetNS. The tables stay as they are.
// The next Sync is a full one, through nft only; with a NetNS it fails.
func (e *Executor) Close() error {
	if !e.made() {
		return errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last, e.state = nil, nil
	var errs []error
	if e.nl != nil {
		errs = append(errs, e.nl.Close())
		e.nl = nil
	}
	errs = append(errs, e.t.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nftables: closing the executor: %w", err)
	}
	return nil
}

// Sync makes the table hold rs. It applies only the changes since the last
// Ruleset it applied when it can, and falls back at once to a full sync
// when it cannot (first sync, Config change) or when the incremental
// transaction fails. When the full sync fails too, the error is returned
// and the next Sync is a full one again.
func (e *Executor) Sync(ctx context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	d, err := e.Apply(ctx, rs)
	return d.SyncResult, err
}

// Apply is Sync, and returns this backend's account of the sync too.
func (e *Executor) Apply(ctx context.Context, rs *ruleset.Ruleset) (SyncDetails, error) {
	if !e.made() {
		return SyncDetails{}, errNotMade
	}
	if f := rs.Config().Family; f != e.cfg.Family {
		return SyncDetails{}, fmt.Errorf("nftables: ruleset is %s, executor is %s", f, e.cfg.Family)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	res, err := e.sync(ctx, rs)
	out := res.SyncDetails
	out.Full, out.Warnings = res.full, res.warnings
	return out, err
}

// RequestFullSync makes the next Sync a full one, e.g. to repair a table
// that something else changed.
func (e *Executor) RequestFullSync() {
	if !e.made() {
		return
	}
	e.mu.Lock()
	e.last = nil
	e.mu.Unlock()
}

// Cleanup deletes the Executor's table in both IP families (a dual-stack
// proxy runs one Executor per family, and either one cleans up both). The
// next Sync is a full one.
func (e *Executor) Cleanup(ctx context.Context) error {
	if !e.made() {
		return errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last, e.state = nil, nil
	return e.t.Cleanup(ctx)
}

// sync is Sync with e.mu held.
func (e *Executor) sync(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	var fallback error
	if e.last != nil && e.state != nil {
		res, err := e.syncChanges(ctx, rs)
		if err == nil {
			if res.Transactions > 0 && !res.Netlink { // nft wrote rules
				e.learnRules()
			}
			return res, nil
		}
		fallback = err
	} else {
		fallback = fmt.Errorf("%w: no ruleset applied yet", svcproxy.ErrFullSyncNeeded)
	}
	e.t.ForgetRules()
	res, err := e.syncFull(ctx, rs)
	res.Fallback = fallback
	if err == nil {
		e.learnRules()
	}
	return res, err
}

// learnRules has the table read the rules of every chain of the flat
// layout (a few dozen) for the deep check to compare them with later
// (nftexec.Table.LearnRules).
func (e *Executor) learnRules() {
	if e.t.NL == nil || e.state == nil {
		return
	}
	e.t.ForgetRules()
	var chains []string
	for _, c := range e.state.table().Chains {
		chains = append(chains, c.Name)
	}
	e.t.LearnRules(chains)
}

// syncChanges applies the changes from the last Ruleset to rs in one
// transaction. After a failure the Executor's state no longer matches the
// table: the next sync is a full one.
func (e *Executor) syncChanges(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	tx := e.t.NFT.NewTransaction()
	ch, err := RenderChanges(tx, e.state, e.last, rs)
	if err != nil {
		return outcome{}, err
	}
	e.last = nil
	res := outcome{warnings: ch.Warnings, SyncDetails: SyncDetails{Operations: tx.NumOperations()}}
	switch {
	case tx.NumOperations() == 0:
	case ch.ElementsOnly && e.nl != nil:
		if err := e.nl.Apply(ch); err != nil {
			return outcome{}, fmt.Errorf("nftables: incremental sync of the flat layout over netlink: %w", err)
		}
		res.Transactions, res.Netlink = 1, true
	default:
		if e.nl != nil && !ch.ElementsOnly {
			res.NotNetlink = errors.New("the flat layout's rules change: an endpoint count appears in or leaves a target group")
		}
		if err := e.t.NFT.Run(ctx, tx); err != nil {
			return outcome{}, fmt.Errorf("nftables: incremental sync of the flat layout: %w", err)
		}
		res.Transactions = 1
	}
	e.last = rs
	return res, nil
}

// syncFull writes the whole flat table of rs.
func (e *Executor) syncFull(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	e.last, e.state = nil, nil
	var notNetlink error
	if e.nl != nil {
		existing, err := e.t.ListAll(ctx)
		switch {
		case knftables.IsNotFound(err), err == nil && len(existing) == 0:
			return e.load(ctx, rs)
		case err != nil:
			return outcome{full: true}, fmt.Errorf("nftables: listing table %s %s: %w", nftexec.Family(e.cfg.Family), e.t.Name, err)
		}
		res, err := e.resync(ctx, rs, existing)
		if err == nil {
			return res, nil
		}
		notNetlink = err
	}
	tx := e.t.NFT.NewTransaction()
	e.t.Replace(tx)
	st, rendered := Render(tx, rs, e.cfg.Options)
	if err := e.t.NFT.Run(ctx, tx); err != nil {
		return outcome{full: true}, fmt.Errorf("nftables: full sync of the flat layout: %w", err)
	}
	e.last, e.state = rs, st
	res := outcome{full: true, warnings: rendered.Warnings, SyncDetails: SyncDetails{Operations: tx.NumOperations(), Transactions: 1}}
	res.NotNetlink = notNetlink
	return res, nil
}

// resync rewrites the loaded flat table for rs (Resync): its
// definitions through nft, with the chains, sets and maps of existing (the
// table's) that rs does not use deleted, its other elements, their sets
// flushed first, over netlink. On failure the caller replaces the table.
func (e *Executor) resync(ctx context.Context, rs *ruleset.Ruleset, existing map[string][]string) (outcome, error) {
	st, t, rendered := flatTable(rs, e.cfg.Options)
	local := map[string]bool{}
	for _, s := range t.Sets {
		local[s.Name] = s.Interval && len(s.Key) == 1
	}
	tx := e.t.NFT.NewTransaction()
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
	if err := e.t.NFT.Run(ctx, tx); err != nil {
		return outcome{}, fmt.Errorf("resync of the flat layout, definitions: %w", err)
	}
	n, elements, err := e.nl.load(Load{table: t, resync: true})
	if err != nil {
		return outcome{}, fmt.Errorf("resync of the flat layout, elements over netlink: %w", err)
	}
	e.last, e.state = rs, st
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

// load writes the flat table of rs into no table: its definitions
// through nft, its other elements over netlink.
func (e *Executor) load(ctx context.Context, rs *ruleset.Ruleset) (outcome, error) {
	st, t, rendered := flatTable(rs, e.cfg.Options)
	tx := e.t.NFT.NewTransaction()
	e.t.Replace(tx)
	for _, o := range flatDefinitionObjects(st.configTable(t)) {
		tx.Add(o)
	}
	if err := e.t.NFT.Run(ctx, tx); err != nil {
		return outcome{full: true}, fmt.Errorf("nftables: full sync of the flat layout, definitions: %w", err)
	}
	load := Load{table: t}
	n, elements, err := e.nl.load(load)
	if err != nil {
		return outcome{full: true}, fmt.Errorf("nftables: full sync of the flat layout, elements over netlink: %w", err)
	}
	e.last, e.state = rs, st
	res := outcome{full: true, warnings: rendered.Warnings}
	res.Operations, res.Transactions, res.Netlink = tx.NumOperations()+elements, 1+n, n > 0
	return res, nil
}

// flatDefinitionObjects are the objects of t that Netlink.Load does
// not write: the table, its sets, chains and rules, and the elements of
// one-field interval sets, which hold the configuration (model.Table's
// Definitions as knftables objects).
func flatDefinitionObjects(t *model.Table) []knftables.Object {
	defs := &model.Table{Family: t.Family, Name: t.Name, Comment: t.Comment, Sets: t.Sets, Chains: t.Chains, Elements: t.NftElements()}
	return defs.Objects()
}
