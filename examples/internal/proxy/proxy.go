package proxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/source"
	"github.com/svcproxy/svcproxy/state"
)

// Executor applies the Rulesets of one IP family to the kernel.
type Executor interface {
	// Sync applies rs, fully or incrementally as the executor sees fit, and
	// does a full sync after any failure. It reports whether the sync was a
	// full one.
	Sync(ctx context.Context, rs *ruleset.Ruleset) (full bool, err error)
	// RequestFullSync makes the next Sync a full one, which rewrites
	// everything the executor owns, repairing what others changed or
	// removed.
	RequestFullSync()
	// CheckState compares the kernel with the last sync cheaply and says
	// what it found missing, "" when nothing.
	CheckState(ctx context.Context) (string, error)
	// Cleanup removes everything the executor owns.
	Cleanup(ctx context.Context) error
}

// Mode is one kind of reference proxy: a kernel backend.
type Mode struct {
	// Name answers /proxyMode: "iptables" or "nftables".
	Name string
	// Render writes exactly what a full sync of rs would apply, for
	// --dry-run. It must need neither root nor the kernel.
	Render func(w io.Writer, rs *ruleset.Ruleset) error
	// NewExecutor makes the executor of one family.
	NewExecutor func(family v1.IPFamily) (Executor, error)
}

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitBadArgs = 2
)

// Main runs a reference proxy with the process's arguments and exits.
func Main(mode Mode) {
	os.Exit(Run(mode, os.Args[1:], os.Stdout, os.Stderr))
}

// Run runs a reference proxy and returns its exit code.
func Run(mode Mode, args []string, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	opts, err := ParseOptions(mode.Name+"-proxy", args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if opts.Cleanup {
		return cleanup(ctx, mode, opts, log)
	}
	p := &proxy{mode: mode, opts: opts, log: log, metrics: newMetrics()}
	p.loop = NewLoop(opts.MinSyncPeriod, opts.SyncPeriod, p.sync)
	if code := p.start(ctx, stderr); code != exitOK {
		return code
	}
	p.families = p.state.Families()
	if opts.DryRun {
		if err := p.dryRun(stdout); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailed
		}
		return exitOK
	}
	if err := p.makeExecutors(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailed
	}
	if err := p.allowLocalhostNodePorts(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailed
	}
	if cleaner, err := conntrack.NewNetlinkCleaner(nil); err != nil {
		p.log.Warn("stale UDP conntrack entries will not be cleaned up", "err", err)
	} else {
		defer cleaner.Close()
		p.cleaner = cleaner
	}

	if opts.Once {
		if err := p.sync(ctx, false); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailed
		}
		return exitOK
	}
	return p.serve(ctx)
}

// start reads the input (manifests, or the API server's caches) into a new
// State, and for the API server keeps it up to date.
func (p *proxy) start(ctx context.Context, stderr io.Writer) int {
	opts := p.opts
	if opts.Manifests != "" {
		p.watcher = newManifestWatcher(opts.Manifests, manifestSettle)
		in, err := p.watcher.load()
		if err != nil {
			fmt.Fprintf(stderr, "bad manifests: %v\n", err)
			return exitBadArgs
		}
		p.watcher.applied = in
		objs, warnings := in.objs, in.warnings
		hints := opts.NodeIPs
		if len(hints) == 0 {
			hints = nodeAddresses(objs.Nodes, opts.NodeName)
		}
		if p.state, err = state.New(opts.families(familyHints(hints)), opts.NodeName, servicemap.Filter{}); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitBadArgs
		}
		p.logWarnings(append(warnings, p.state.Replace(stateObjects(objs))...))
		return exitOK
	}
	client, err := clientFromKubeconfig(opts.Kubeconfig)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	hints := opts.NodeIPs
	if len(hints) == 0 {
		node, err := client.CoreV1().Nodes().Get(ctx, opts.NodeName, metav1.GetOptions{})
		if err != nil {
			p.log.Warn("cannot read this node's addresses", "node", opts.NodeName, "err", err)
		} else {
			hints = nodeAddresses([]*v1.Node{node}, opts.NodeName)
		}
	}
	if p.state, err = state.New(opts.families(familyHints(hints)), opts.NodeName, servicemap.Filter{}); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	serviceCIDRs, err := source.Watch(ctx, client, p.state, source.Options{OnChange: p.loop.Request, OnWarnings: p.logWarnings})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailed
	}
	if !serviceCIDRs {
		p.log.Info("the API server serves no networking.k8s.io/v1 ServiceCIDRs: the Service CIDRs are --service-cluster-ip-range's alone")
	}
	return exitOK
}

func cleanup(ctx context.Context, mode Mode, opts *Options, log *slog.Logger) int {
	code := exitOK
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if opts.IPFamily == "ipv4" && f == v1.IPv6Protocol || opts.IPFamily == "ipv6" && f == v1.IPv4Protocol {
			continue
		}
		e, err := mode.NewExecutor(f)
		if err == nil {
			err = e.Cleanup(ctx)
		}
		if err != nil {
			log.Error("cleanup failed", "family", f, "err", err)
			code = exitFailed
		}
	}
	return code
}

type proxy struct {
	mode      Mode
	opts      *Options
	log       *slog.Logger
	metrics   *metrics
	state     *state.State
	loop      *Loop
	families  []v1.IPFamily
	executors map[v1.IPFamily]Executor
	// watcher reads the --manifests; nil with --kubeconfig.
	watcher *manifestWatcher
	// cleaner deletes stale conntrack entries; nil in dry runs and when
	// netlink is unavailable.
	cleaner conntrack.Cleaner
	// applied is the last Ruleset applied per family, and cleanupPending
	// records a conntrack cleanup that failed and must be retried.
	applied        map[v1.IPFamily]*ruleset.Ruleset
	cleanupPending map[v1.IPFamily]bool
	// built is the Ruleset of the last snapshot per family, applied or
	// not: the next build updates it with the changes since.
	built map[v1.IPFamily]*ruleset.Ruleset

	// lastSuccess is the UnixNano time of the last successful sync, and
	// failing records that the last sync failed (the kernel's rules may be
	// missing or stale until a sync succeeds); both are read by /healthz.
	lastSuccess atomic.Int64
	// lastPeriodicFull is when a periodic sync last forced a full one.
	lastPeriodicFull time.Time
	failing          atomic.Bool
	// pendingTriggers are the trigger times of the changes not yet synced,
	// kept across failed syncs, for the programming latency.
	pendingTriggers []time.Time
	lastWarnings    map[string]bool
	health          *healthServers
}

// unionPrefixes returns the prefixes of a and b, sorted, each once.
func unionPrefixes(a, b []netip.Prefix) []netip.Prefix {
	all := slices.Concat(a, b)
	slices.SortFunc(all, netip.Prefix.Compare)
	return slices.Compact(all)
}

// routeLocalnet is the sysctl that lets packets to 127.0.0.0/8 be routed
// (DNATed to a pod), which NodePorts on 127.0.0.1 need.
const routeLocalnet = "/proc/sys/net/ipv4/conf/all/route_localnet"

// allowLocalhostNodePorts sets route_localnet when NodePorts are served on
// 127.0.0.1, as kube-proxy does. The filter table's localnet guard (see
// iptables.Names.Firewall) then drops what route_localnet would let in from
// elsewhere.
func (p *proxy) allowLocalhostNodePorts() error {
	if !p.opts.LocalhostNodePorts || !slices.Contains(p.families, v1.IPv4Protocol) {
		return nil
	}
	if err := os.WriteFile(routeLocalnet, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("localhost NodePorts: %w", err)
	}
	return nil
}

func (p *proxy) makeExecutors() error {
	p.executors = map[v1.IPFamily]Executor{}
	for _, f := range p.families {
		e, err := p.mode.NewExecutor(f)
		if err != nil {
			return fmt.Errorf("%s executor for %s: %w", p.mode.Name, f, err)
		}
		p.executors[f] = e
	}
	return nil
}

func (p *proxy) builder(f v1.IPFamily, snap state.Snapshot) (*ruleset.Builder, error) {
	cfg := ruleset.Config{
		Family:        f,
		Node:          snap.Node,
		MasqueradeAll: p.opts.MasqueradeAll,
		// Manifests come without the EndpointSlice controller: compute the
		// hints trafficDistribution asks for.
		ComputeHints:       p.opts.Manifests != "",
		LocalhostNodePorts: p.opts.LocalhostNodePorts,
	}
	cfg.ClusterCIDRs = ofFamily(p.opts.ClusterCIDRs, f)
	cfg.RestrictExternalIPs = len(p.opts.AllowedExternalIPs) > 0
	cfg.AllowedExternalIPs = ofFamily(p.opts.AllowedExternalIPs, f)
	cfg.ServiceCIDRs = ofFamily(unionPrefixes(p.opts.ServiceCIDRs, snap.ServiceCIDRs), f)
	cfg.NodePortAddresses = ofFamily(p.nodePortAddresses(snap), f)
	if cfg.LocalhostNodePorts && f == v1.IPv4Protocol && len(cfg.NodePortAddresses) > 0 {
		cfg.NodePortAddresses = append(cfg.NodePortAddresses, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	}
	return ruleset.NewBuilder(cfg)
}

// build computes the Ruleset of every family from one snapshot, rebuilding
// only the Service ports that changed since the previous one (all of them
// the first time, and when the ruleset Config changed).
func (p *proxy) build(snap state.Snapshot) (map[v1.IPFamily]*ruleset.Ruleset, error) {
	out := map[v1.IPFamily]*ruleset.Ruleset{}
	var warnings []svcproxy.Warning
	for _, f := range p.families {
		b, err := p.builder(f, snap)
		if err != nil {
			return nil, err
		}
		fam, _ := snap.Family(f)
		rs, _, w := b.Update(p.built[f], fam.Services, fam.Endpoints)
		warnings = append(warnings, w...)
		out[f] = rs
	}
	p.built = out
	p.logBuildWarnings(warnings)
	return out, nil
}

func (p *proxy) dryRun(w io.Writer) error {
	rulesets, err := p.build(p.state.Snapshot())
	if err != nil {
		return err
	}
	for _, f := range p.families {
		if err := p.mode.Render(w, rulesets[f]); err != nil {
			return fmt.Errorf("render %s: %w", f, err)
		}
	}
	return nil
}

// fullSyncPeriod is how often a periodic sync is a full one whatever the
// check finds, as kube-proxy's FullSyncPeriod: it rewrites what no check
// looks at (the Service ports' own rules and the maps' elements).
const fullSyncPeriod = time.Hour

// sync builds the Rulesets from the current state and applies them. A
// periodic sync first checks the kernel's rules (Executor.CheckState) and
// makes a full sync of each family where something is missing, and of every
// family once per fullSyncPeriod: it rewrites all the rules, repairing what
// others flushed or deleted. Until a sync succeeds after a failed one,
// /healthz reports unhealthy.
func (p *proxy) sync(ctx context.Context, periodic bool) error {
	start := time.Now()
	if periodic {
		p.repairIfNeeded(ctx, start)
	}
	rulesets, snap, anyFull, err := p.apply(ctx)
	if err != nil {
		p.failing.Store(true)
		p.metrics.syncFailures.Inc()
		p.log.Error("sync failed", "periodic", periodic, "duration", time.Since(start), "err", err)
		return err
	}
	end := time.Now()
	p.recordSuccess(start, end, anyFull)
	if p.health != nil {
		p.health.update(rulesets, p.nodePortAddresses(snap))
	}
	p.log.Info("synced", "mode", p.mode.Name, "families", p.families, "full", anyFull, "periodic", periodic, "duration", end.Sub(start))
	return nil
}

// repairIfNeeded asks the executors for a full sync where the kernel's
// rules differ from the last sync, or when the last full one is older than
// fullSyncPeriod.
func (p *proxy) repairIfNeeded(ctx context.Context, now time.Time) {
	if now.Sub(p.lastPeriodicFull) >= fullSyncPeriod {
		p.lastPeriodicFull = now
		p.metrics.periodicFullSyncs.Inc()
		for _, f := range p.families {
			p.executors[f].RequestFullSync()
		}
		return
	}
	for _, f := range p.families {
		missing, err := p.executors[f].CheckState(ctx)
		if missing == "" && err == nil {
			continue
		}
		p.failing.Store(true) // the rules are known to be missing until the repair succeeds
		p.metrics.driftRepairs.Inc()
		p.log.Warn("rules changed behind the proxy's back: full sync", "family", f, "missing", missing, "err", err)
		p.executors[f].RequestFullSync()
	}
}

// apply builds the Rulesets of the current state and has every family's
// executor apply its own. It returns the snapshot they were built from and
// reports whether any executor did a full sync.
func (p *proxy) apply(ctx context.Context) (map[v1.IPFamily]*ruleset.Ruleset, state.Snapshot, bool, error) {
	services, eps := p.state.Pending()
	p.metrics.serviceChangesPending.Set(float64(services))
	p.metrics.endpointChangesPending.Set(float64(eps))

	snap := p.state.Snapshot()
	p.pendingTriggers = append(p.pendingTriggers, snap.TriggerTimes...)
	rulesets, err := p.build(snap)
	if err != nil {
		return nil, snap, false, err
	}
	var errs []error
	anyFull := false
	for _, f := range p.families {
		full, err := p.executors[f].Sync(ctx, rulesets[f])
		if err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", f, err))
			continue
		}
		anyFull = anyFull || full
		p.cleanConntrack(f, rulesets[f])
	}
	return rulesets, snap, anyFull, errors.Join(errs...)
}

// recordSuccess updates the metrics and health of a sync that succeeded.
func (p *proxy) recordSuccess(start, end time.Time, full bool) {
	p.metrics.syncDuration.Observe(end.Sub(start).Seconds())
	if full {
		p.metrics.syncFullDuration.Observe(end.Sub(start).Seconds())
	} else {
		p.metrics.syncPartialDuration.Observe(end.Sub(start).Seconds())
	}
	p.metrics.lastSync.Set(float64(end.Unix()))
	p.lastSuccess.Store(end.UnixNano())
	p.failing.Store(false)
	for _, t := range p.pendingTriggers {
		if !t.After(end) {
			p.metrics.programmingDuration.Observe(end.Sub(t).Seconds())
		}
	}
	p.pendingTriggers = p.pendingTriggers[:0]
}

// cleanConntrack deletes the UDP conntrack entries that the rules just
// applied no longer match: entries that still send a client to an endpoint
// that is gone, or to a Service that is gone.
func (p *proxy) cleanConntrack(f v1.IPFamily, rs *ruleset.Ruleset) {
	if p.applied == nil {
		p.applied, p.cleanupPending = map[v1.IPFamily]*ruleset.Ruleset{}, map[v1.IPFamily]bool{}
	}
	prev := p.applied[f]
	p.applied[f] = rs
	if p.cleaner == nil {
		return
	}
	opts := conntrack.Options{Previous: prev}
	if !p.cleanupPending[f] && !conntrack.NeedsCleanup(ruleset.Diff(prev, rs), opts) {
		return
	}
	res, err := p.cleaner.Clean(f, conntrack.StaleFilters(rs, opts))
	p.cleanupPending[f] = err != nil
	if err != nil {
		p.log.Error("conntrack cleanup failed; retrying on the next sync", "family", f, "err", err)
		return
	}
	if res.Deleted > 0 {
		p.log.Info("deleted stale conntrack entries", "family", f, "deleted", res.Deleted)
	}
}

func (p *proxy) logWarnings(warnings []svcproxy.Warning) {
	for _, w := range warnings {
		p.log.Warn(w.String())
	}
}

// logBuildWarnings logs the warnings of a build that the previous build did
// not give, so that a steady bad object is reported once, not every sync (a
// build warns only about the Service ports it rebuilt: those that changed).
func (p *proxy) logBuildWarnings(warnings []svcproxy.Warning) {
	now := map[string]bool{}
	for _, w := range warnings {
		s := w.String()
		if !now[s] && !p.lastWarnings[s] {
			p.log.Warn(s)
		}
		now[s] = true
	}
	p.lastWarnings = now
}

// serve runs the sync loop, the file watcher and the HTTP servers until ctx
// is done.
func (p *proxy) serve(ctx context.Context) int {
	p.lastSuccess.Store(time.Now().UnixNano())
	// The first sync is a full one: the first forced one is due an hour on.
	p.lastPeriodicFull = time.Now()
	p.health = newHealthServers(p.log, p.opts.Manifests != "")
	defer p.health.close()
	servers, err := p.startServers()
	if err != nil {
		p.log.Error("cannot serve", "err", err)
		return exitFailed
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	if p.watcher != nil {
		go p.watch(ctx, p.watcher, manifestPoll)
	}
	p.loop.Run(ctx)
	p.log.Info("stopping: the rules stay in the kernel")
	return exitOK
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}
