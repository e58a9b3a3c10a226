package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Defaults of Config, kube-proxy's.
const (
	DefaultSyncPeriod     = 30 * time.Second
	DefaultFullSyncPeriod = time.Hour
)

// Config configures an Engine.
type Config struct {
	// Backends are the data planes, one per IP family synced.
	Backends map[v1.IPFamily]Backend
	// Provider gives the state each sync applies.
	Provider Provider
	// MinSyncPeriod: a sync never starts closer than this after the start
	// of the last sync that did more than check: a periodic sync that
	// found no drift and nothing to change is a check, and a change that
	// comes right after it syncs at once. 0 means no floor (failed syncs
	// are still retried no sooner than 50 ms).
	MinSyncPeriod time.Duration
	// SyncPeriod: this long after the end of the previous periodic sync, a
	// periodic sync checks every Backend's state (Backend.CheckState),
	// makes the next Sync of each family where something is missing a
	// full one, and syncs. While changes keep coming (a Request within
	// the last second, or twice MinSyncPeriod when longer) the check is
	// put off to the next periodic sync, for at most one period: a
	// check at 10,000 Services takes long enough to delay the changes
	// that come during it. /healthz fails
	// when the last success is older than twice this. 0 means
	// DefaultSyncPeriod.
	SyncPeriod time.Duration
	// FullSyncPeriod: a periodic sync at least this long after the last
	// forced one (or the engine's start) is full in every family, whatever
	// the check finds: it rewrites what no check reads. 0 means
	// DefaultFullSyncPeriod.
	FullSyncPeriod time.Duration
	// RetryInterval is the first wait before retrying a failed sync; it
	// doubles with each consecutive failure, up to SyncPeriod. 0 means
	// MinSyncPeriod.
	RetryInterval time.Duration
	// Conntrack, when not nil, deletes the UDP conntrack entries that a
	// sync made stale (see conntrack.StaleFilters). The engine keeps, per
	// family, the Ruleset conntrack was last cleaned against, so that the
	// frontends of a Service deleted before its EndpointSlices are cleaned
	// too, and a cleanup that fails is retried on the next sync.
	Conntrack conntrack.Cleaner
	// ConntrackSCTP cleans SCTP entries too (conntrack.Options.SCTP).
	ConntrackSCTP bool
	// Registerer, when not nil, gets the engine's metrics: kube-proxy's
	// kubeproxy_sync_proxy_rules_* and kubeproxy_network_programming_*
	// ones, with kube-proxy's ip_family label where kube-proxy has it, and
	// svcproxy_sync_drift_repairs_total (by family and svcproxy.DriftKind)
	// and svcproxy_sync_periodic_full_total.
	Registerer prometheus.Registerer
	// OnSync, when not nil, is called after every sync, from the goroutine
	// that syncs, with what happened. The engine logs nothing.
	OnSync func(SyncEvent)
	// OnHealthChange, when not nil, is called with the engine's Health
	// each time it becomes Failing or stops being so, and at the first
	// successful sync: from the goroutine that syncs, at once (a drift the
	// periodic check finds makes it Failing before the repair starts, the
	// repair's success ends that), so that a caller can log or record what
	// /healthz answers from when. It must not block.
	OnHealthChange func(Health)
	// Clock is the time source; nil means the system's.
	Clock Clock
}

// SyncEvent is what one sync did, for Config.OnSync.
type SyncEvent struct {
	// Start and End are when the sync started and ended.
	Start, End time.Time
	// Periodic is true for a periodic sync, and ForcedFull when
	// FullSyncPeriod made it full in every family. CheckDeferred: the
	// periodic sync put its check off, as changes were coming (see
	// Config.SyncPeriod).
	Periodic, ForcedFull, CheckDeferred bool
	// Drift has, for each family whose state the periodic check found
	// changed (and so synced fully), what it found first, or, of Kind
	// svcproxy.DriftCheckFailed, why the check failed.
	Drift map[v1.IPFamily]svcproxy.Drift
	// Rulesets is the state synced; nil when the Provider failed (a nil
	// Ruleset reads as empty).
	Rulesets map[v1.IPFamily]*ruleset.Ruleset
	// Results are the results of the families that synced.
	Results map[v1.IPFamily]svcproxy.SyncResult
	// Full is true when any family's sync was full.
	Full bool
	// Durations are, per family that synced, how long its sync took: the
	// part every family shares (the state check, the Provider) and its
	// own (its Backend's Sync and conntrack cleanup), kube-proxy's
	// per-family sync latency.
	Durations map[v1.IPFamily]time.Duration
	// Conntrack has the conntrack cleanups of the sync, per family.
	Conntrack map[v1.IPFamily]ConntrackCleanup
	// Err is nil when every family synced, and says what failed otherwise;
	// a failed sync is retried, unless Err wraps ruleset.ErrConfig: a
	// configuration error waits for the next Request.
	Err error
}

// ConntrackCleanup is one family's conntrack cleanup after a sync.
type ConntrackCleanup struct {
	conntrack.CleanResult
	// Err is why the cleanup failed; it is retried on the next sync.
	Err error
}

// Engine keeps data planes in sync with a Provider: it runs the Provider and
// the Backends on changes (Request) and periodically, coalescing requests
// under Config.MinSyncPeriod, repairing state changed behind its back,
// retrying failed syncs with a back-off, cleaning stale conntrack entries
// and keeping the health and metrics of it all.
type Engine struct {
	cfg      Config
	clock    Clock
	families []v1.IPFamily
	metrics  *metrics
	loop     *loop
	// started is when New made the Engine: change times before it are
	// not observed.
	started time.Time

	// runMu makes syncs run one at a time; it guards what follows.
	runMu sync.Mutex
	// lastForcedFull is when FullSyncPeriod last forced a full sync.
	lastForcedFull time.Time
	// checkOwed is when the periodic check now put off first came due;
	// zero when none is owed.
	checkOwed time.Time
	// triggers are, per family, the change times not yet observed by a
	// successful sync of that family.
	triggers map[v1.IPFamily][]time.Time

	// reqMu guards lastRequest, when Request was last called.
	reqMu       sync.Mutex
	lastRequest time.Time
	// cleaned is, per family, the Ruleset that conntrack was last cleaned
	// against (or found clean for).
	cleaned map[v1.IPFamily]*ruleset.Ruleset
	// lastSynced are the Rulesets of the last successful sync.
	lastSynced map[v1.IPFamily]*ruleset.Ruleset

	healthMu    sync.Mutex
	lastSuccess time.Time
	failing     bool
	// synced is true from the first successful sync.
	synced bool
}

// New returns an Engine for cfg. Its metrics are registered with
// cfg.Registerer when it is set.
func New(cfg Config) (*Engine, error) {
	if len(cfg.Backends) == 0 || cfg.Provider == nil {
		return nil, errors.New("engine: Config needs Backends and a Provider")
	}
	switch p := cfg.Provider.(type) {
	case ProviderFunc:
		if p == nil {
			return nil, errors.New("engine: a nil ProviderFunc")
		}
	case StateProvider:
		if err := p.check(); err != nil {
			return nil, err
		}
	case *StateProvider:
		if p == nil {
			return nil, errors.New("engine: a nil *StateProvider")
		}
		if err := p.check(); err != nil {
			return nil, err
		}
	}
	for f, b := range cfg.Backends {
		if (f != v1.IPv4Protocol && f != v1.IPv6Protocol) || b == nil {
			return nil, fmt.Errorf("engine: bad Backend for IP family %q", f)
		}
	}
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = DefaultSyncPeriod
	}
	if cfg.FullSyncPeriod <= 0 {
		cfg.FullSyncPeriod = DefaultFullSyncPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	cfg.Backends = maps.Clone(cfg.Backends)
	e := &Engine{
		cfg: cfg, clock: cfg.Clock, metrics: newMetrics(),
		families: slices.Sorted(maps.Keys(cfg.Backends)),
		cleaned:  map[v1.IPFamily]*ruleset.Ruleset{},
		triggers: map[v1.IPFamily][]time.Time{},
	}
	for _, f := range e.families {
		e.metrics.exportFamily(f)
	}
	if cfg.Registerer != nil {
		if err := e.metrics.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	now := e.clock.Now()
	e.started, e.lastSuccess, e.lastForcedFull = now, now, now
	e.loop = newLoop(cfg.MinSyncPeriod, cfg.SyncPeriod, cfg.RetryInterval, e.clock, e.runInLoop)
	return e, nil
}

// Request asks for a sync of the latest state: the Provider changed. It never
// blocks; requests made while a sync is pending or running are coalesced
// into one later sync.
func (e *Engine) Request() {
	if e.made() {
		now := e.clock.Now()
		e.reqMu.Lock()
		e.lastRequest = now
		e.reqMu.Unlock()
		for _, f := range e.families {
			e.metrics.lastQueued.WithLabelValues(string(f)).Set(float64(now.UnixNano()) / 1e9)
		}
		e.loop.request()
	}
}

// errNotMade is the error of an Engine that New did not make.
var errNotMade = errors.New("engine: Engine not made by New")

// made reports whether New made e: a nil or zero Engine syncs nothing,
// its Sync fails, its Run returns at once and it is never healthy.
func (e *Engine) made() bool { return e != nil && e.loop != nil }

// Run syncs at once, then on requests, periodically and to retry failures,
// until ctx is done.
func (e *Engine) Run(ctx context.Context) {
	if e.made() {
		e.loop.run(ctx)
	}
}

// Sync runs one sync now, as the first one of Run (not periodic), and
// returns its error. It waits for a sync of Run in progress.
func (e *Engine) Sync(ctx context.Context) error {
	if !e.made() {
		return errNotMade
	}
	_, err := e.run(ctx, false)
	return err
}

// Close closes every Backend; call it after Run has returned.
func (e *Engine) Close() error {
	if !e.made() {
		return errNotMade
	}
	var errs []error
	for _, f := range e.families {
		if err := e.cfg.Backends[f].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the %s backend: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// runInLoop is run for the loop, which also needs to know whether the run
// only checked: a periodic run that found no drift and synced the same
// Rulesets as the last successful sync, so that it does not delay the next
// change by MinSyncPeriod (a check is not a sync).
func (e *Engine) runInLoop(ctx context.Context, periodic bool) (time.Duration, bool, error) {
	return e.runEvent(ctx, periodic)
}

// sameRulesets reports whether a and b hold equal Rulesets for the same
// families (ruleset.Diff: at once for the same value, quick for one
// updated from the other).
func sameRulesets(a, b map[v1.IPFamily]*ruleset.Ruleset) bool {
	if len(a) != len(b) {
		return false
	}
	for f, rs := range a {
		if o, ok := b[f]; !ok || rs == nil || o == nil || !ruleset.Diff(rs, o).Empty() {
			return false
		}
	}
	return true
}

// run is one sync: a periodic one first checks the Backends' state. It
// returns when the next sync is due without a change (the earliest
// NextSync of the results, 0 when none).
func (e *Engine) run(ctx context.Context, periodic bool) (time.Duration, error) {
	again, _, err := e.runEvent(ctx, periodic)
	return again, err
}

// runEvent is run, which also reports whether the run only checked (see
// runInLoop).
func (e *Engine) runEvent(ctx context.Context, periodic bool) (again time.Duration, checked bool, err error) {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	ev := SyncEvent{Start: e.clock.Now(), Periodic: periodic}
	if periodic {
		if e.deferCheck(ev.Start) {
			ev.CheckDeferred = true
		} else {
			e.checkState(ctx, &ev)
		}
	}
	again = e.apply(ctx, &ev)
	ev.End = e.clock.Now()
	e.record(&ev)
	if ev.Err == nil {
		checked = periodic && !ev.ForcedFull && len(ev.Drift) == 0 && !ev.Full && sameRulesets(e.lastSynced, ev.Rulesets)
		e.lastSynced = ev.Rulesets
	}
	if e.cfg.OnSync != nil {
		e.cfg.OnSync(ev)
	}
	return again, checked, ev.Err
}

// Putting off the periodic check while changes come (Config.SyncPeriod).
const (
	// minCheckQuiet is the least time without a Request after which the
	// data plane counts as quiet; twice MinSyncPeriod when longer.
	minCheckQuiet = time.Second
	// maxCheckDeferrals is how many periods a check may be put off: under
	// a steady stream of changes it runs every maxCheckDeferrals+1
	// periods. One keeps a drift found within two periods.
	maxCheckDeferrals = 1
)

// deferCheck reports whether the periodic sync starting at now puts its
// check off: a Request came within the quiet time, and the check has not
// been put off for maxCheckDeferrals periods already.
func (e *Engine) deferCheck(now time.Time) bool {
	e.reqMu.Lock()
	last := e.lastRequest
	e.reqMu.Unlock()
	quiet := max(2*e.cfg.MinSyncPeriod, minCheckQuiet)
	if last.IsZero() || now.Sub(last) >= quiet {
		e.checkOwed = time.Time{}
		return false
	}
	if e.checkOwed.IsZero() {
		e.checkOwed = now
	}
	if now.Sub(e.checkOwed) >= maxCheckDeferrals*e.cfg.SyncPeriod {
		e.checkOwed = time.Time{}
		return false
	}
	return true
}

// checkState makes every family's next Sync a full one when FullSyncPeriod
// has passed, and otherwise each family's whose state the Backend finds
// changed.
func (e *Engine) checkState(ctx context.Context, ev *SyncEvent) {
	if ev.Start.Sub(e.lastForcedFull) >= e.cfg.FullSyncPeriod {
		e.lastForcedFull = ev.Start
		ev.ForcedFull = true
		e.metrics.periodicFullSyncs.Inc()
		for _, f := range e.families {
			e.cfg.Backends[f].RequestFullSync()
		}
		return
	}
	for _, f := range e.families {
		drift, err := e.cfg.Backends[f].CheckState(ctx)
		if !drift.Found() && err == nil {
			continue
		}
		if err != nil {
			drift = svcproxy.Drift{Kind: svcproxy.DriftCheckFailed, What: fmt.Sprintf("state check failed: %v", err)}
		}
		if !slices.Contains(svcproxy.DriftKinds(), drift.Kind) {
			drift.Kind = svcproxy.DriftOther // the metric's labels stay bounded
		}
		if ev.Drift == nil {
			ev.Drift = map[v1.IPFamily]svcproxy.Drift{}
		}
		ev.Drift[f] = drift
		e.setHealth(true, time.Time{}) // missing until the repair succeeds
		e.metrics.driftRepairs.WithLabelValues(string(f), string(drift.Kind)).Inc()
		e.cfg.Backends[f].RequestFullSync()
	}
}

// apply gets the desired state and has every family's Backend sync its
// Ruleset, then cleans conntrack where it synced. It returns the earliest
// NextSync of the results.
func (e *Engine) apply(ctx context.Context, ev *SyncEvent) time.Duration {
	desired, err := e.cfg.Provider.Desired(ctx)
	if err != nil {
		ev.Err = fmt.Errorf("getting the desired state: %w", err)
		return 0
	}
	for _, f := range e.families {
		if desired.TriggersByFamily != nil {
			e.triggers[f] = append(e.triggers[f], desired.TriggersByFamily[f]...)
		} else {
			e.triggers[f] = append(e.triggers[f], desired.Triggers...)
		}
	}
	ev.Rulesets = desired.Rulesets
	ev.Results = map[v1.IPFamily]svcproxy.SyncResult{}
	ev.Durations = map[v1.IPFamily]time.Duration{}
	shared := e.clock.Now().Sub(ev.Start)
	var errs []error
	var again time.Duration
	for _, f := range e.families {
		start := e.clock.Now()
		rs := desired.Rulesets[f]
		if rs == nil {
			errs = append(errs, fmt.Errorf("sync %s: the Provider gave no Ruleset", f))
			continue
		}
		res, err := e.cfg.Backends[f].Sync(ctx, rs)
		if err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", f, err))
			continue
		}
		ev.Results[f] = res
		ev.Full = ev.Full || res.Full
		if res.NextSync > 0 && (again == 0 || res.NextSync < again) {
			again = res.NextSync
		}
		e.cleanConntrack(f, rs, ev)
		ev.Durations[f] = shared + e.clock.Now().Sub(start)
	}
	ev.Err = errors.Join(errs...)
	return again
}

// record updates the health and metrics after a sync. The metrics of
// each family that synced are recorded, as kube-proxy's proxier of that
// family would, even when another family failed.
func (e *Engine) record(ev *SyncEvent) {
	for _, f := range e.families {
		res, ok := ev.Results[f]
		if !ok {
			continue
		}
		family := string(f)
		took := ev.Durations[f].Seconds()
		e.metrics.syncDuration.WithLabelValues(family).Observe(took)
		if res.Full {
			e.metrics.syncFullDuration.WithLabelValues(family).Observe(took)
		} else {
			e.metrics.syncPartialDuration.WithLabelValues(family).Observe(took)
		}
		e.metrics.lastSync.WithLabelValues(family).Set(float64(ev.End.Unix()))
		for _, t := range e.triggers[f] {
			if !t.Before(e.started) && !t.After(ev.End) {
				e.metrics.programmingDuration.WithLabelValues(family).Observe(ev.End.Sub(t).Seconds())
			}
		}
		e.triggers[f] = e.triggers[f][:0]
	}
	if ev.Err != nil {
		e.setHealth(true, time.Time{})
		e.metrics.syncFailures.Inc()
		return
	}
	e.setHealth(false, ev.End)
}
