package nftables

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/nftexec"
	"github.com/svcproxy/svcproxy/ruleset"
)

// DefaultStaleChainDelay is how long a flushed chain waits before it is
// deleted: kube-proxy's second.
const DefaultStaleChainDelay = time.Second

// MinKernel is the oldest kernel the nftables backend supports,
// kube-proxy's floor for its nftables mode ("major.minor").
const MinKernel = nftexec.MinKernel

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	// Family is the IP family of the Rulesets the Executor applies.
	Family v1.IPFamily
	// Options are passed to Render and RenderChanges.
	Options Options
	// NewInterface returns the knftables.Interface for a family and table.
	// nil means Open, which checks nft and the kernel. Tests pass
	// knftables fakes.
	NewInterface func(family knftables.Family, table string) (knftables.Interface, error)
	// StaleChainDelay is how long a stale chain stays flushed before it is
	// deleted; 0 means DefaultStaleChainDelay.
	StaleChainDelay time.Duration
	// Now is the clock that times stale chains; nil means time.Now.
	Now func() time.Time
	// FirstSyncChunk is the number of Service ports per transaction when
	// the table does not exist yet (see RenderNew); 0 means
	// DefaultFirstSyncChunk, or DefaultNetlinkFirstSyncChunk with Netlink;
	// a negative value one transaction.
	FirstSyncChunk int
	// Netlink applies incremental syncs through a netfilter netlink socket
	// of the Executor's own instead of nft, which reads every chain and set
	// of the table before each transaction: a change then costs what the
	// kernel's commit of it costs, not nft's reading of the table.
	// NewExecutor opens the socket in the network namespace of NetNS, or
	// else of the calling thread, which must be the one nft works in;
	// Close closes it. Changes
	// the netlink encoder does not know still go through nft
	// (SyncResult.NotNetlink). A first sync makes the table, its base
	// chains and maps with nft and adds the Service ports over netlink in
	// chunks of FirstSyncChunk; a full sync of an existing table (after a
	// restart, a failure or RequestFullSync) rewrites its fixed objects with
	// nft and then its Service ports over netlink in chunks too, each of
	// which leaves every Service port as it was or as it is to be, instead
	// of one nft transaction of the whole table. An incremental sync that
	// changes more than ChangeChunk Service ports goes in chunks too.
	Netlink bool
	// ChangeChunk bounds the transactions of an incremental sync over
	// netlink: one that changes more Service ports than ChangeChunk is
	// applied as several transactions of at most ChangeChunk changed ports
	// each (more when that many share a map or set element), each of which
	// leaves every Service port as it was or as it is to be. 0 means
	// DefaultChangeChunk; a negative value one transaction. Without Netlink
	// an incremental sync is one transaction.
	ChangeChunk int
	// NetNS, when not "", is the path of the network namespace to apply
	// the rules in, such as /run/netns/NAME or /proc/PID/ns/net; "" means
	// the caller's. NewExecutor opens it and keeps it open until Close;
	// nft then runs from a thread locked and moved into it, and the
	// netlink socket is opened in it, so that the process itself stays in
	// its own namespace. The interfaces NewInterface returns are used from
	// such a thread too.
	NetNS string
}

// DefaultChangeChunk is the number of changed Service ports per
// transaction of a large incremental sync over netlink. The kernel's time
// to commit one transaction grows faster than the transaction while each
// commit also checks the whole table, so a middle size is fastest
// (BENCHMARKS.md has the measurements).
//
// An incremental sync is never replaced by a full one because of its
// size: a full resync writes, for every Service port of the table, at
// least what a chunked incremental sync writes for a changed one, in
// transactions of the same bounded size.
const DefaultChangeChunk = 250

// DefaultFirstSyncChunk is the number of Service ports per transaction of a
// first sync through nft, which reads the growing table before each one.
const DefaultFirstSyncChunk = 1000

// DefaultNetlinkFirstSyncChunk is the number of Service ports per
// transaction of a first sync over netlink. The kernel's work per
// transaction grows faster than its size (binding each anonymous set walks
// the transaction) while each commit checks the whole table, so a middle
// size is fastest (BENCHMARKS.md has the measurements).
const DefaultNetlinkFirstSyncChunk = 250

// Executor applies Rulesets of one IP family to one nftables table through
// knftables: a full sync the first time, after a failure and when the
// Ruleset's Config changes; otherwise only the changes since the last
// Ruleset it applied, in kube-proxy's layout (flat.Executor syncs the flat
// one). It implements engine.Backend. Its methods are safe for concurrent use; they
// run one at a time.
type Executor struct {
	cfg ExecutorConfig
	// t is the table, its nft interface, the netlink socket of
	// ExecutorConfig.Netlink and the namespace of ExecutorConfig.NetNS.
	t *nftexec.Table

	// mu is held by every exported method but NewExecutor and guards
	// what follows.
	mu sync.Mutex
	// last is the last Ruleset applied; nil forces a full sync.
	last *ruleset.Ruleset
	// stale holds the flushed chains waiting to be deleted, with the time
	// they were flushed.
	stale map[string]time.Time
	// expected is what the deep check compares the table with: what a
	// full sync of expectedFor leaves there.
	expected    nftexec.Expected
	expectedFor *ruleset.Ruleset
	// anonSeq makes the names of the anonymous sets of each netlink batch
	// unique: it starts at a random number, so that another Executor of
	// the same table, before or after this one, does not use them.
	anonSeq uint64
}

// errNotMade is the error of an Executor that NewExecutor did not make.
var errNotMade = errors.New("nftables: Executor not made by NewExecutor")

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
	// Operations is the number of operations applied (0 when there was
	// nothing to do).
	Operations int
	// Transactions is the number of transactions applied: more than one
	// for a chunked sync (see ExecutorConfig.ChangeChunk and
	// FirstSyncChunk).
	Transactions int
	// StaleChains are the chains now flushed and waiting to be deleted;
	// DeletedChains the ones this sync deleted.
	StaleChains, DeletedChains int
	// Netlink reports a sync that went over netlink (see
	// ExecutorConfig.Netlink): an incremental one, or the Service ports of
	// a full one. NotNetlink is why an incremental one went through nft
	// instead, when the netlink path was asked for.
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
// cfg.Family. With a nil cfg.NewInterface it calls Open, and so fails
// with a clear error when nft or the kernel is too old.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	if cfg.StaleChainDelay == 0 {
		cfg.StaleChainDelay = DefaultStaleChainDelay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ChangeChunk == 0 {
		cfg.ChangeChunk = DefaultChangeChunk
	}
	switch {
	case cfg.FirstSyncChunk != 0:
	case cfg.Netlink:
		cfg.FirstSyncChunk = DefaultNetlinkFirstSyncChunk
	default:
		cfg.FirstSyncChunk = DefaultFirstSyncChunk
	}
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
	return &Executor{cfg: cfg, t: t, stale: map[string]time.Time{}, anonSeq: rand.Uint64()}, nil
}

// Close releases the netlink socket of ExecutorConfig.Netlink and the
// network namespace of ExecutorConfig.NetNS. The tables stay as they are.
// The next Sync is a full one, through nft only; with a NetNS it fails.
func (e *Executor) Close() error {
	if !e.made() {
		return errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last = nil
	if err := e.t.Close(); err != nil {
		return fmt.Errorf("nftables: closing the executor: %w", err)
	}
	return nil
}

// Sync makes the table hold rs. It applies only the changes since the last
// Ruleset it applied when it can, and falls back at once to a full sync
// when it cannot (first sync, Config change) or when the incremental
// transaction fails. When the full sync fails too, the error is returned and
// the next Sync is a full one again.
//
// Chains that rs no longer uses are flushed at once and deleted by the
// first Sync at least StaleChainDelay later: while some wait,
// SyncResult.NextSync says when that Sync is due.
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
	now := e.cfg.Now()
	res, err := e.sync(ctx, rs, now)
	out := res.SyncDetails
	out.Full, out.Warnings = res.full, res.warnings
	if err == nil {
		out.NextSync = e.nextSync(now)
	}
	return out, err
}

// sync is Sync with e.mu held.
func (e *Executor) sync(ctx context.Context, rs *ruleset.Ruleset, now time.Time) (outcome, error) {
	var fallback error
	if e.last != nil {
		res, err := e.syncChanges(ctx, rs, now)
		if err == nil {
			return res, nil
		}
		fallback = err
	} else {
		fallback = fmt.Errorf("%w: no ruleset applied yet", svcproxy.ErrFullSyncNeeded)
	}
	res, err := e.syncFull(ctx, rs, now)
	res.Fallback = fallback
	return res, err
}

// nextSync is how long after now the first stale chain may be deleted, at
// least a nanosecond; 0 when none waits.
func (e *Executor) nextSync(now time.Time) time.Duration {
	var next time.Duration
	for _, flushed := range e.stale {
		d := max(flushed.Add(e.cfg.StaleChainDelay).Sub(now), time.Nanosecond)
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

// RequestFullSync makes the next Sync a full one, e.g. to repair a table that
// something else changed.
func (e *Executor) RequestFullSync() {
	if !e.made() {
		return
	}
	e.mu.Lock()
	e.last = nil
	e.mu.Unlock()
}

func (e *Executor) syncChanges(ctx context.Context, rs *ruleset.Ruleset, now time.Time) (outcome, error) {
	var deletable []string
	for name, flushed := range e.stale {
		if now.Sub(flushed) >= e.cfg.StaleChainDelay {
			deletable = append(deletable, name)
		}
	}
	slices.Sort(deletable)
	chunk := -1
	if e.t.NL != nil {
		chunk = e.cfg.ChangeChunk
	}
	chunks, rendered, err := renderChangesChunked(newRecorder, e.last, rs, e.cfg.Options, deletable, chunk)
	if err != nil {
		return outcome{}, err
	}
	res := outcome{warnings: rendered.Warnings, SyncDetails: SyncDetails{DeletedChains: len(rendered.Deleted)}}
	if err := e.applyChanges(ctx, chunks, &res); err != nil {
		// The table holds some ports as before and others as rs has
		// them: the next sync is a full one.
		e.last = nil
		return outcome{}, err
	}
	// Deleted, in use again, or flushed again just now (and so in rendered.Stale).
	for _, name := range deletable {
		delete(e.stale, name)
	}
	for _, name := range rendered.Stale {
		e.stale[name] = now
	}
	e.last = rs
	res.StaleChains = len(e.stale)
	return res, nil
}

// applyChanges applies the transactions of an incremental sync in order,
// skipping empty ones, and counts them and their operations in res.
func (e *Executor) applyChanges(ctx context.Context, chunks []*opRecorder, res *outcome) error {
	for i, c := range chunks {
		if len(c.ops) == 0 {
			continue
		}
		what := "incremental sync"
		if len(chunks) > 1 {
			what = fmt.Sprintf("incremental sync (transaction %d of %d)", i+1, len(chunks))
		}
		netlink, notNetlink, err := e.apply(ctx, c, what)
		if err != nil {
			return err
		}
		res.Operations += len(c.ops)
		res.Transactions++
		res.Netlink = res.Netlink || netlink
		if res.NotNetlink == nil {
			res.NotNetlink = notNetlink
		}
	}
	return nil
}

// anonPrefix is the prefix of the anonymous sets' names of the next netlink
// batch.
func (e *Executor) anonPrefix() string {
	e.anonSeq++
	return fmt.Sprintf("__svcproxy-%016x-", e.anonSeq)
}

// apply applies one transaction: over netlink when the Executor has a
// socket and the encoder knows every operation, through nft otherwise. It
// reports whether it went over netlink, and if not, why.
func (e *Executor) apply(ctx context.Context, ops *opRecorder, what string) (netlink bool, notNetlink, err error) {
	if e.t.NL != nil {
		b, err := netlinkBatch(Family(e.cfg.Family), e.t.Name, ops.ops, e.anonPrefix())
		if err == nil {
			if err := e.t.NL.Send(b); err != nil {
				return true, nil, fmt.Errorf("nftables: %s over netlink: %w", what, err)
			}
			e.learnWritten(ops.ops)
			return true, nil, nil
		}
		notNetlink = err
	}
	tx := e.t.NFT.NewTransaction()
	ops.replay(knftWriter{tx: tx, table: tableRef(e.cfg.Family, e.t.Name)})
	if err := e.t.NFT.Run(ctx, tx); err != nil {
		return false, notNetlink, fmt.Errorf("nftables: %s: %w", what, err)
	}
	e.learnWritten(ops.ops)
	return false, notNetlink, nil
}

func (e *Executor) syncFull(ctx context.Context, rs *ruleset.Ruleset, now time.Time) (outcome, error) {
	e.last = nil
	e.t.ForgetRules()
	existing, err := e.t.ListAll(ctx)
	if err != nil {
		if !knftables.IsNotFound(err) {
			return outcome{full: true}, fmt.Errorf("nftables: listing table %s %s: %w", Family(e.cfg.Family), e.t.Name, err)
		}
		existing = map[string][]string{} // no table yet
	}
	if len(existing) > 0 && e.t.NL != nil {
		res, err := e.resync(ctx, rs, existing, now)
		if !errors.Is(err, errNoResync) {
			return res, err
		}
	}
	if len(existing) > 0 {
		// The table is there and serving: replace its content in one
		// transaction.
		tx := e.t.NFT.NewTransaction()
		rendered, err := Render(tx, rs, e.cfg.Options, existing)
		if err != nil {
			return outcome{full: true}, err
		}
		if err := e.t.NFT.Run(ctx, tx); err != nil {
			return outcome{full: true}, fmt.Errorf("nftables: full sync: %w", err)
		}
		e.finishFull(rs, rendered, now)
		return outcome{full: true, warnings: rendered.Warnings, SyncDetails: SyncDetails{Operations: tx.NumOperations(), Transactions: 1, StaleChains: len(e.stale)}}, nil
	}
	// A new table: nothing to keep serving while it fills, so in chunks,
	// as the kernel's time per transaction grows faster than its size. The
	// first makes the table, its base chains and maps, which only nft
	// writes; the others hold Service ports only, which go over netlink
	// when the Executor has a socket, without nft reading the growing table
	// before each one.
	chunks, rendered, err := renderNew(newRecorder, rs, e.cfg.Options, e.cfg.FirstSyncChunk)
	if err != nil {
		return outcome{full: true}, err
	}
	return e.applyFull(ctx, chunks, "full sync", rs, rendered, now)
}

// applyFull applies the transactions of a full sync in order and records
// it.
func (e *Executor) applyFull(ctx context.Context, chunks []*opRecorder, what string, rs *ruleset.Ruleset, rendered Result, now time.Time) (outcome, error) {
	res := outcome{full: true, warnings: rendered.Warnings}
	for i, c := range chunks {
		res.Operations += len(c.ops)
		res.Transactions++
		netlink, _, err := e.apply(ctx, c, fmt.Sprintf("%s (transaction %d of %d)", what, i+1, len(chunks)))
		if err != nil {
			return outcome{full: true}, err
		}
		res.Netlink = res.Netlink || netlink
	}
	e.finishFull(rs, rendered, now)
	res.StaleChains = len(e.stale)
	return res, nil
}

// errNoResync: the table's elements could not be read; a full sync of the
// existing table in one transaction replaces the resync.
var errNoResync = errors.New("no chunked resync")

// resync replaces the content of an existing table in chunks over netlink
// (see renderResync): the kernel applies one transaction of the whole table
// in a time that grows faster than the table, and in the meantime the
// table serves as it was.
func (e *Executor) resync(ctx context.Context, rs *ruleset.Ruleset, existing map[string][]string, now time.Time) (outcome, error) {
	r, err := newRenderer(rs.Config(), e.cfg.Options)
	if err != nil {
		return outcome{full: true}, err
	}
	var elements []*knftables.Element
	for _, name := range r.fixedSetsAndMaps() {
		kind := fixedKind(name)
		if name == setNodePortIPs || !slices.Contains(existing[kind], name) {
			continue
		}
		elems, err := e.t.NFT.ListElements(ctx, kind, name)
		if err != nil {
			return outcome{}, fmt.Errorf("%w: listing %s %s: %w", errNoResync, kind, name, err)
		}
		elements = append(elements, elems...)
	}
	chunks, rendered, err := renderResync(newRecorder, rs, e.cfg.Options, existing, elements, e.cfg.FirstSyncChunk)
	if err != nil {
		return outcome{}, fmt.Errorf("%w: %w", errNoResync, err)
	}
	return e.applyFull(ctx, chunks, "full sync of the existing table", rs, rendered, now)
}

// finishFull records a full sync of rs.
func (e *Executor) finishFull(rs *ruleset.Ruleset, rendered Result, now time.Time) {
	clear(e.stale)
	for _, name := range rendered.Stale {
		e.stale[name] = now
	}
	e.last = rs
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
	e.last = nil
	clear(e.stale)
	return e.t.Cleanup(ctx)
}

// Open returns a knftables.Interface for one table after checking that the
// host can run the nftables backend: nft 1.0.1 or newer (older versions
// parse the whole ruleset, and can crash on other programs' tables), which
// knftables.New checks along with nft's permissions, and a kernel of at
// least MinKernel.
func Open(family knftables.Family, table string) (knftables.Interface, error) {
	return nftexec.Open(family, table)
}

// Cleanup deletes the table (DefaultTable when "") in both IP families, as
// `kube-proxy --cleanup` does. A missing table is not an error.
func Cleanup(ctx context.Context, table string) error {
	if table == "" {
		table = DefaultTable
	}
	if !nftexec.ValidTableName(table) {
		return fmt.Errorf("nftables: invalid table name %q", table)
	}
	return nftexec.Cleanup(ctx, table, Open)
}
