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
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/healthcheck"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/source"
	"github.com/svcproxy/svcproxy/state"
)

// Mode is one kind of reference proxy: a kernel backend.
type Mode struct {
	// Name answers /proxyMode: "iptables" or "nftables".
	Name string
	// Render writes exactly what a full sync of rs with opts would apply,
	// for --dry-run, and returns the render's warnings (what it could not
	// write), which --dry-run logs on stderr as a sync would. It must need
	// neither root nor the kernel.
	Render func(w io.Writer, rs *ruleset.Ruleset, opts *Options) ([]svcproxy.Warning, error)
	// NewBackend makes the backend of one family, as opts say.
	NewBackend func(family v1.IPFamily, opts *Options) (engine.Backend, error)
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
	opts, err := ParseOptions(mode.Name+"-proxy", args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	log := newLogger(opts.LogFormat, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if opts.Cleanup {
		return cleanup(ctx, mode, opts, log)
	}
	for _, n := range opts.Notices {
		log.Warn(n)
	}
	p := &proxy{mode: mode, opts: opts, log: log, metrics: newMetrics()}
	if opts.ConfigFile != "" && !opts.DryRun && !opts.Once {
		// From the start, as kube-proxy: a change while it starts counts.
		if p.config, err = watchConfig(opts.ConfigFile); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailed
		}
		defer p.config.w.Close() // serve's watch closes it too
	}
	if code := p.start(ctx, stderr); code != exitOK {
		return code
	}
	if opts.DryRun || opts.Once {
		if err := p.waitForAPI(ctx, source.DefaultSyncTimeout); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailed
		}
	}
	if opts.DryRun {
		if err := p.dryRun(stdout); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailed
		}
		return exitOK
	}
	// As kube-proxy: the conntrack settings first, then the backends,
	// which follow nf_conntrack_tcp_be_liberal as they find it.
	applyConntrackSizing(log, opts.Conntrack)
	opts.TCPBeLiberal = readTCPBeLiberal()
	if opts.TCPBeLiberal && mode.Name == "iptables" {
		log.Info("nf_conntrack_tcp_be_liberal set, not installing DROP rules for INVALID packets")
	}
	eng, closeAll, err := p.newEngine()
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailed
	}
	defer closeAll()
	if err := p.allowLocalhostNodePorts(); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailed
	}
	if opts.Once {
		if err := eng.Sync(ctx); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitFailed
		}
		return exitOK
	}
	return p.serve(ctx, eng)
}

// start reads the input (manifests, or the API server's caches) into a new
// State, and for the API server keeps it up to date.
func (p *proxy) start(ctx context.Context, stderr io.Writer) int {
	opts := p.opts
	if opts.Manifests != "" {
		p.watcher = newManifestWatcher(opts.Manifests, manifestSettle)
		p.watcher.MaxFileSize = opts.ManifestMaxFileSize
		if p.watcher.MaxFileSize <= 0 {
			p.watcher.MaxFileSize = -1 // no limit
		}
		in, err := p.watcher.Read()
		if err != nil {
			fmt.Fprintf(stderr, "bad manifests: %v\n", err)
			return exitBadArgs
		}
		p.watcher.applied = in
		objs, warnings := in.Objects, in.Warnings
		hints := opts.NodeIPs
		if len(hints) == 0 {
			hints = nodeAddresses(objs.Nodes, opts.NodeName)
		}
		if err := p.newState(hints); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return exitBadArgs
		}
		p.metrics.recordManifests(nil, in, p.families)
		p.logWarnings(append(warnings, p.state.Replace(*objs)...))
		return exitOK
	}
	p.reach = &reachability{log: p.log, now: time.Now}
	client, err := clientFromKubeconfig(opts.Kubeconfig, p.reach)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	hints := opts.NodeIPs
	if len(hints) == 0 {
		getCtx, cancel := context.WithTimeout(ctx, nodeGetTimeout)
		node, err := client.CoreV1().Nodes().Get(getCtx, opts.NodeName, metav1.GetOptions{})
		cancel()
		if err != nil {
			p.log.Warn("cannot read this node's addresses", "node", opts.NodeName, "err", err)
		} else {
			hints = nodeAddresses([]*v1.Node{node}, opts.NodeName)
		}
	}
	if err := p.newState(hints); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	p.api, err = source.Start(ctx, client, p.state, source.Options{OnChange: p.request, OnWarnings: p.logWarnings,
		OnEvent: func(obj any) { p.metrics.recordEvent(obj, p.families) }})
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitBadArgs
	}
	return exitOK
}

// nodeGetTimeout bounds the read of this node's addresses at start, so
// that an API server that does not answer does not hold the start up.
const nodeGetTimeout = 10 * time.Second

// waitForAPI waits until the API server's first lists have reached the
// state (at once with --manifests), or at most timeout (0: until ctx is
// done). It logs once that it waits, and what the server serves.
func (p *proxy) waitForAPI(ctx context.Context, timeout time.Duration) error {
	if p.api == nil {
		return nil
	}
	select {
	case <-p.api.Synced():
	default:
		p.log.Info("waiting for the API server's first lists before the first sync; the rules in the kernel stay as they are")
		var expired <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-p.api.Synced():
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			return fmt.Errorf("the API server's first lists did not arrive within %v", timeout)
		}
	}
	if !p.api.ServiceCIDRs() {
		p.log.Info("the API server serves no networking.k8s.io/v1 ServiceCIDRs: the Service CIDRs are --service-cluster-ip-range's alone")
	}
	return nil
}

// newState makes the proxy's State, for the IP families that the options
// and the node's addresses (hints) give.
func (p *proxy) newState(hints []netip.Addr) error {
	if _, err := state.ConfigFrom(p.baseConfig()); err != nil {
		return err // a configuration error, at start rather than at the first sync
	}
	st, err := state.New(p.opts.families(familyHints(hints)), p.opts.NodeName, servicemap.Filter{})
	if err != nil {
		return err
	}
	p.useState(st)
	p.warnNodePortAddresses(hints)
	return nil
}

// useState makes the proxy serve st.
func (p *proxy) useState(st *state.State) {
	p.state, p.families = st, st.Families()
	p.builder, _ = state.NewBuilder(p.rulesetConfig) // fails for a nil ConfigFunc only
}

// build builds the Rulesets of snap and logs the new build warnings.
func (p *proxy) build(snap state.Snapshot) (engine.Desired, error) {
	built, err := p.builder.Build(snap)
	if err != nil {
		return engine.Desired{}, err
	}
	p.logWarnings(built.Warnings)
	return engine.Desired{Rulesets: built.Rulesets, Triggers: built.Triggers, TriggersByFamily: built.TriggersByFamily}, nil
}

func cleanup(ctx context.Context, mode Mode, opts *Options, log *slog.Logger) int {
	code := exitOK
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if opts.IPFamily == "ipv4" && f == v1.IPv6Protocol || opts.IPFamily == "ipv6" && f == v1.IPv4Protocol {
			continue
		}
		b, err := mode.NewBackend(f, opts)
		if err == nil {
			err = errors.Join(b.Cleanup(ctx), b.Close())
		}
		if err != nil {
			log.Error("cleanup failed", "family", f, "err", err)
			code = exitFailed
		}
	}
	return code
}

type proxy struct {
	mode     Mode
	opts     *Options
	log      *slog.Logger
	metrics  *metrics
	state    *state.State
	families []v1.IPFamily
	// watcher reads the --manifests; nil with --kubeconfig.
	watcher *manifestWatcher
	// config watches the --config file; nil without one.
	config *configWatcher
	// api watches the --kubeconfig's API server, and reach logs when it
	// goes away and comes back; nil with --manifests.
	api   *source.Watcher
	reach *reachability
	// engine syncs the backends once made; requests made before go
	// nowhere, as the engine's first sync reads the latest state.
	eng atomic.Pointer[engine.Engine]

	// builder builds the Rulesets of the state.
	builder *state.Builder

	// What follows is used by the engine's goroutine only (its Source and
	// OnSync).
	//
	// nodePortAddrs are the addresses where the health check node ports
	// listen (healthCheckAddresses), as of the last snapshot built.
	nodePortAddrs []netip.Addr
	// localAddrs lists the node's addresses for --nodeport-addresses;
	// nil means interfaceAddrs.
	localAddrs func() ([]netip.Addr, error)
	// syncingReload is the number of manifest reloads (reloads) that the
	// state of the sync under way holds: the synced log line says it, so
	// that a reader can tell the sync that applied a reload from one that
	// had started before it.
	syncingReload int64
	// reloads counts the manifest reloads applied to the state; written
	// by the watcher, after State.Replace.
	reloads atomic.Int64
	// health serves the health check node ports; nil but in watch mode.
	health *healthcheck.NodePortServers
	// conflicts warns about frontends that Services share (node ports in
	// the manifests, external and load-balancer IPs from either source).
	conflicts *frontendConflicts
	// backends are the engine's; counterErr is, per family, the nfacct
	// error last logged (logCounterErrors).
	backends   map[v1.IPFamily]engine.Backend
	counterErr map[v1.IPFamily]string
}

// request asks the engine for a sync: the state changed.
func (p *proxy) request() {
	if e := p.eng.Load(); e != nil {
		e.Request()
	}
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

// rulesetConfig is the ruleset.Config of one family of snap, as the
// options say.
func (p *proxy) rulesetConfig(snap state.Snapshot, fam state.Family) (ruleset.Config, error) {
	config, err := state.ConfigFrom(p.baseConfig())
	if err != nil {
		return ruleset.Config{}, err
	}
	cfg, err := config(snap, fam)
	np := p.nodePortsOf(snap, fam.IPFamily)
	cfg.NodePortAddresses, cfg.NoNodePortAddresses, cfg.LocalhostNodePorts = np.addrs, np.none, np.localhost
	cfg.NodeIP = p.primaryAddresses(snap)[fam.IPFamily]
	return cfg, err
}

// baseConfig is the ruleset.Config of both families that the options give
// (the NodePort addresses of each family are nodePortsOf's).
func (p *proxy) baseConfig() ruleset.Config {
	return ruleset.Config{
		MasqueradeAll:  p.opts.MasqueradeAll,
		MasqueradeMark: p.opts.MasqueradeMark,
		// Manifests come without the EndpointSlice controller: compute the
		// hints trafficDistribution asks for.
		ComputeHints:        p.opts.Manifests != "",
		LocalhostNodePorts:  p.opts.LocalhostNodePorts,
		ClusterCIDRs:        p.opts.ClusterCIDRs,
		RestrictExternalIPs: len(p.opts.AllowedExternalIPs) > 0,
		AllowedExternalIPs:  p.opts.AllowedExternalIPs,
		ServiceCIDRs:        p.opts.ServiceCIDRs,
		NodePortAddresses:   p.opts.NodeIPs,
	}
}

// readTCPBeLiberal reads nf_conntrack_tcp_be_liberal; unreadable, it is
// taken as unset (kube-proxy's reading too).
func readTCPBeLiberal() bool {
	v, err := conntrack.ReadSysctl(filepath.Join("/proc/sys", conntrack.SysctlTCPBeLiberal))
	return err == nil && v != 0
}

func (p *proxy) dryRun(w io.Writer) error {
	p.opts.TCPBeLiberal = p.opts.Conntrack != nil && p.opts.Conntrack.TCPBeLiberal
	desired, err := p.build(p.state.Snapshot())
	if err != nil {
		return err
	}
	for _, f := range p.families {
		warnings, err := p.mode.Render(w, desired.Rulesets[f], p.opts)
		if err != nil {
			return fmt.Errorf("render %s: %w", f, err)
		}
		p.logWarnings(warnings)
	}
	return nil
}

func (p *proxy) logWarnings(warnings []svcproxy.Warning) {
	for _, w := range warnings {
		p.log.Warn(w.String())
	}
}

// serve runs the engine, the file watchers and the HTTP servers until ctx
// is done, or until the --config file changes: then, as kube-proxy, it
// exits with an error (exitFailed) and the rules stay.
func (p *proxy) serve(ctx context.Context, eng *engine.Engine) int {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if p.config != nil {
		go p.config.run(ctx, p.log, stop)
	}
	p.health = healthcheck.NewNodePortServers(p.opts.Manifests != "", func() bool { return eng.Health().Healthy })
	defer p.health.Close()
	servers, err := p.startServers(eng)
	if err != nil {
		p.log.Error("cannot serve", "err", err)
		return exitFailed
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	p.conflicts = &frontendConflicts{}
	if p.watcher != nil {
		go p.watch(ctx, p.watcher, manifestPoll)
	}
	if err := p.waitForAPI(ctx, 0); err != nil {
		p.log.Info("stopping before the first sync: the rules stay in the kernel")
		return stopCode(ctx)
	}
	eng.Run(ctx)
	p.log.Info("stopping: the rules stay in the kernel")
	return stopCode(ctx)
}

// stopCode is the exit code of a proxy whose ctx is done: exitFailed when
// it was stopped by an error (the --config file changed), exitOK for a
// signal.
func stopCode(ctx context.Context) int {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return exitFailed
	}
	return exitOK
}

func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}
