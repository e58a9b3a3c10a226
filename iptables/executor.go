package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/netnsrun"
	"github.com/svcproxy/svcproxy/internal/nfacct"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Command is one command an Executor runs.
type Command struct {
	// Name is the program: "iptables-restore", "ip6tables", …
	Name string
	Args []string
	// Stdin is the command's standard input (none when nil).
	Stdin []byte
	// Stdout receives the command's standard output (discarded when nil).
	Stdout io.Writer
	// CPU, when not nil, receives the CPU time (user and system) the
	// command used, when the Runner can tell (ExecRunner can).
	CPU *time.Duration
}

func (c Command) String() string { return strings.Join(append([]string{c.Name}, c.Args...), " ") }

// Runner runs commands. ExecRunner runs them for real; tests fake it.
// A command that runs and exits non-zero is reported as a *CommandError.
type Runner interface {
	Run(ctx context.Context, cmd Command) error
}

// CommandError is the error of a command that failed.
type CommandError struct {
	// Command is the command line.
	Command string
	// ExitCode is the exit status, or -1 when the command did not exit
	// normally (not found, killed, cancelled).
	ExitCode int
	// Stderr is the end of its standard error.
	Stderr string
	Err    error
}

func (e *CommandError) Error() string {
	if e == nil {
		return "<nil>"
	}
	msg := fmt.Sprintf("%s: %v", e.Command, e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *CommandError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// exitCode is err's exit status, or -1.
func exitCode(err error) int {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce.ExitCode
	}
	return -1
}

// ExecRunner runs commands with os/exec. Each command line is prefixed with
// Prefix, such as {"ip", "netns", "exec", "ns1"} to run it in a network
// namespace.
type ExecRunner struct {
	Prefix []string
}

// maxStderr bounds how much standard error a CommandError keeps.
const maxStderr = 4096

// Run runs cmd and waits for it; cancelling ctx kills it.
func (r ExecRunner) Run(ctx context.Context, cmd Command) error {
	argv := append(slices.Clone(r.Prefix), cmd.Name)
	argv = append(argv, cmd.Args...)
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if cmd.Stdin != nil {
		c.Stdin = bytes.NewReader(cmd.Stdin)
	}
	c.Stdout = cmd.Stdout
	var stderr tailBuffer
	c.Stderr = &stderr
	err := c.Run()
	if cmd.CPU != nil && c.ProcessState != nil {
		*cmd.CPU = c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		return &CommandError{Command: strings.Join(argv, " "), ExitCode: code, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return nil
}

// tailBuffer keeps the last maxStderr bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > maxStderr {
		t.b = append(t.b[:0], t.b[len(t.b)-maxStderr:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	// Family is the IP family of the Rulesets it syncs: IPv4 uses
	// iptables and iptables-restore, IPv6 ip6tables and
	// ip6tables-restore.
	Family v1.IPFamily
	// Names are the chain names; the zero Names is DefaultNames.
	Names Names
	// Runner runs the commands; nil means ExecRunner{}.
	Runner Runner
	// NetNS, when not "", is the path of the network namespace to apply
	// the rules in, such as /run/netns/NAME or /proc/PID/ns/net; "" means
	// the caller's. NewExecutor opens it and keeps it open until Close;
	// every command then runs from a thread locked and moved into it, so
	// that the process itself stays in its own namespace.
	NetNS string
	// NFAcct makes the Executor keep kube-proxy's nfacct counters
	// (CounterInvalidDropped, CounterLocalhostNodePorts): it creates those missing over netlink (nfnetlink_acct),
	// in NetNS or else in the process's namespace (never in a Runner's:
	// a prefix such as `ip netns exec` does not move them), at every
	// full sync, and the rules count into those that exist. Where the
	// kernel has no nfnetlink_acct, or a counter cannot be made, the
	// rules go without it, as kube-proxy's do; NFAcctErr says why.
	NFAcct bool
	// TCPBeLiberal says the kernel's nf_conntrack_tcp_be_liberal is set
	// (kube-proxy reads it at start): KUBE-FORWARD then does not drop
	// INVALID packets (see Kernel).
	TCPBeLiberal bool
}

// acctConn creates and reads nfacct counters; *nfacct.Conn is one, tests
// fake it.
type acctConn interface {
	Ensure(name string) error
	Get(name string) (nfacct.Counter, error)
	Close() error
}

// Executor applies Rulesets of one IP family to the kernel with
// iptables-restore: a full sync the first time, after any failure and when
// asked for, and otherwise a partial sync of what changed since the last
// successful sync. It implements engine.Backend. Its methods are safe for
// concurrent use; they run one at a time.
type Executor struct {
	family       v1.IPFamily
	names        Names
	runner       Runner
	netns        *netnsrun.Namespace // ExecutorConfig.NetNS, or nil
	restoreTool  string              // iptables-restore or ip6tables-restore
	iptablesTool string              // iptables or ip6tables
	saveTool     string              // iptables-save or ip6tables-save

	check stateCheck

	// deleteChunk is deleteChunk, but for tests.
	deleteChunk int

	mu       sync.Mutex
	last     *ruleset.Ruleset // the last Ruleset synced successfully
	needFull bool
	// want is the digest of what a full sync of wantFor leaves, for the
	// deep check, which next runs no sooner than deepDue.
	want    *tablesDigest
	wantFor *ruleset.Ruleset
	deepDue time.Time
	// lastDeepCost is what the last deep check cost (see deepCheck).
	lastDeepCost time.Duration
	// kernel is what the rules use of the kernel, as of the last full
	// sync; partial syncs and the state check follow it.
	kernel Kernel

	// serviceRules are the rules of each ServicePort's own nat chains,
	// as of the last successful sync, for Stats.
	serviceRules map[servicemap.PortName]int

	// statsMu guards stats, apart from mu so that reading them does not
	// wait for a sync.
	statsMu sync.Mutex
	stats   Stats

	// acctMu guards acct and acctErr, apart from mu so that reading a
	// counter does not wait for a sync.
	acctMu sync.Mutex
	// acct is the nfacct socket of ExecutorConfig.NFAcct, nil without
	// one; acctErr is why a counter is missing.
	acct    acctConn
	acctErr error
}

// errNotMade is the error of an Executor that NewExecutor did not make.
var errNotMade = errors.New("iptables executor: not made by NewExecutor")

// made reports whether NewExecutor made e: the methods of a nil or zero
// Executor fail (RequestFullSync does nothing) and touch no kernel.
func (e *Executor) made() bool { return e != nil && e.runner != nil && e.restoreTool != "" }

// NewExecutor returns an Executor whose first Sync is a full sync.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	e := &Executor{family: cfg.Family, names: cfg.Names, runner: cfg.Runner, needFull: true, deleteChunk: deleteChunk,
		kernel: Kernel{TCPBeLiberal: cfg.TCPBeLiberal}}
	switch cfg.Family {
	case v1.IPv4Protocol:
		e.restoreTool, e.iptablesTool, e.saveTool = "iptables-restore", "iptables", "iptables-save"
	case v1.IPv6Protocol:
		e.restoreTool, e.iptablesTool, e.saveTool = "ip6tables-restore", "ip6tables", "ip6tables-save"
	default:
		return nil, fmt.Errorf("iptables executor: unknown IP family %q", cfg.Family)
	}
	if e.runner == nil {
		e.runner = ExecRunner{}
	}
	if cfg.NetNS != "" {
		ns, err := netnsrun.Open(cfg.NetNS)
		if err != nil {
			return nil, fmt.Errorf("iptables executor: %w", err)
		}
		e.netns = ns
		e.runner = netnsRunner{ns: ns, runner: e.runner}
	}
	e.check = newStateCheck(e.names)
	if cfg.NFAcct {
		e.dialAcct()
	}
	return e, nil
}

// Stats are what an Executor has counted, for kube-proxy's iptables-mode
// metrics.
type Stats struct {
	// Rules are, by table ("filter", "nat"), the rules of the
	// Executor's chains after the last successful sync (kube-proxy's
	// sync_proxy_rules_iptables_total), and LastSync those that sync
	// wrote (its sync_proxy_rules_iptables_last): a partial sync writes
	// the top-level chains and the chains of the ServicePorts that
	// changed. Both are nil before the first successful sync.
	Rules, LastSync map[string]int
	// RestoreFailures counts the iptables-restore runs of syncs that
	// failed, full or partial (kube-proxy's
	// sync_proxy_rules_iptables_restore_failures_total), and
	// PartialRestoreFailures the partial ones among them (its
	// sync_proxy_rules_iptables_partial_restore_failures_total).
	RestoreFailures, PartialRestoreFailures int
}

// Stats returns what the Executor has counted so far.
func (e *Executor) Stats() Stats {
	if !e.made() {
		return Stats{}
	}
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return Stats{Rules: maps.Clone(e.stats.Rules), LastSync: maps.Clone(e.stats.LastSync),
		RestoreFailures: e.stats.RestoreFailures, PartialRestoreFailures: e.stats.PartialRestoreFailures}
}

// countRules counts, by table, the rules ("-A" lines) of restore input,
// whose tables each start with their "*table" line (as renders do).
func countRules(input []byte) map[string]int {
	counts := map[string]int{"filter": 0, "nat": 0}
	for _, block := range bytes.SplitAfter(input, []byte("COMMIT\n")) {
		name, rest, ok := bytes.Cut(block, []byte("\n"))
		if !ok || len(name) < 2 || name[0] != '*' {
			continue
		}
		table := string(name[1:])
		if _, ours := counts[table]; ours {
			counts[table] += bytes.Count(rest, []byte("\n-A "))
			if bytes.HasPrefix(rest, []byte("-A ")) {
				counts[table]++
			}
		}
	}
	return counts
}

// recordSync records the rules of a successful sync whose input was
// input: written holds the rules of the ServicePorts it rewrote, removed
// the ServicePorts gone (a full sync: all = true, written has them all).
func (e *Executor) recordSync(input []byte, written map[servicemap.PortName]int, removed []servicemap.PortName, all bool) {
	last := countRules(input)
	if all || e.serviceRules == nil {
		e.serviceRules = map[servicemap.PortName]int{}
	}
	topLevel := last["nat"]
	for name, n := range written {
		topLevel -= n
		e.serviceRules[name] = n
	}
	for _, name := range removed {
		delete(e.serviceRules, name)
	}
	total := map[string]int{"filter": last["filter"], "nat": topLevel}
	for _, n := range e.serviceRules {
		total["nat"] += n
	}
	e.statsMu.Lock()
	e.stats.Rules, e.stats.LastSync = total, last
	e.statsMu.Unlock()
}

// restoreFailed counts a failed restore, partial or not.
func (e *Executor) restoreFailed(partial bool) {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	e.stats.RestoreFailures++
	if partial {
		e.stats.PartialRestoreFailures++
	}
}

// dialAcct opens the nfacct socket in the Executor's namespace; when it
// cannot, acctErr says why and the rules go without counters.
func (e *Executor) dialAcct() {
	var conn *nfacct.Conn
	dial := func() (err error) {
		conn, err = nfacct.Dial()
		return err
	}
	var err error
	if e.netns != nil {
		err = e.netns.Do(dial)
	} else {
		err = dial()
	}
	if err != nil {
		e.acctErr = fmt.Errorf("iptables executor: no nfacct counters: %w", err)
		return
	}
	e.acct = conn
}

// ensureCounters creates the nfacct counters that are missing and returns
// k with those that exist.
func (e *Executor) ensureCounters(k Kernel) Kernel {
	e.acctMu.Lock()
	defer e.acctMu.Unlock()
	if e.acct == nil {
		return k
	}
	var errs []error
	for _, name := range nfacctCounters {
		err := e.acct.Ensure(name)
		if err != nil {
			errs = append(errs, err)
		}
		k = k.withCounter(name, err == nil)
	}
	e.acctErr = nil
	if err := errors.Join(errs...); err != nil {
		e.acctErr = fmt.Errorf("iptables executor: nfacct counters missing: %w", err)
	}
	return k
}

// Counter returns the number of packets the nfacct counter name
// (CounterInvalidDropped or CounterLocalhostNodePorts) has counted. It fails when the Executor has none
// (ExecutorConfig.NFAcct off, or see NFAcctErr), or the kernel has no such
// object.
func (e *Executor) Counter(name string) (uint64, error) {
	if !e.made() {
		return 0, errNotMade
	}
	e.acctMu.Lock()
	acct, acctErr := e.acct, e.acctErr
	e.acctMu.Unlock()
	if acct == nil {
		if acctErr == nil {
			acctErr = errors.New("iptables executor: made without NFAcct")
		}
		return 0, acctErr
	}
	c, err := acct.Get(name)
	if err != nil {
		return 0, fmt.Errorf("iptables executor: %w", err)
	}
	return c.Packets, nil
}

// NFAcctErr says why the rules do not count into both nfacct counters
// although ExecutorConfig.NFAcct asked for them (the kernel has no
// nfnetlink_acct, or the last full sync could not make one); nil when
// they do, or when NFAcct is off.
func (e *Executor) NFAcctErr() error {
	if !e.made() {
		return errNotMade
	}
	e.acctMu.Lock()
	defer e.acctMu.Unlock()
	return e.acctErr
}

// netnsRunner runs commands from a thread in a network namespace.
type netnsRunner struct {
	ns     *netnsrun.Namespace
	runner Runner
}

func (r netnsRunner) Run(ctx context.Context, cmd Command) error {
	return r.ns.Do(func() error { return r.runner.Run(ctx, cmd) })
}

// Close releases the network namespace of ExecutorConfig.NetNS; the rules
// stay in the kernel. After Close, Sync, CheckState and Cleanup fail when
// the Executor has a NetNS; otherwise they work, and the next Sync is a
// full one.
func (e *Executor) Close() error {
	if !e.made() {
		return errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail()
	e.acctMu.Lock()
	if e.acct != nil {
		e.acct.Close()
		e.acct, e.acctErr = nil, errors.New("iptables executor: closed")
	}
	e.acctMu.Unlock()
	if e.netns == nil {
		return nil
	}
	if err := e.netns.Close(); err != nil {
		return fmt.Errorf("iptables executor: %w", err)
	}
	return nil
}

// SyncDetails is what one sync did: the svcproxy.SyncResult that Sync
// returns, and this backend's own account of it (Apply returns both).
type SyncDetails struct {
	svcproxy.SyncResult
	// Changes are the ServicePorts a partial sync rewrote or removed.
	Changes ruleset.Changes
	// Skipped is true when nothing had changed since the last successful
	// sync, so nothing was run.
	Skipped bool
	// InputBytes is the size of the iptables-restore input.
	InputBytes int
	// Leftovers are chains of ours, found by a full sync, that no
	// Ruleset synced by this Executor had (from an earlier process, or
	// an interrupted sync); they were removed.
	Leftovers []string
	// Fallback, when not FallbackNone, says why this sync was full
	// although a partial one was due, and FallbackDetail what was found:
	// the first thing the state check missed, or the partial restore's
	// error. SyncResult.Full is then true.
	Fallback       FallbackReason
	FallbackDetail string
}

// RequestFullSync makes the next Sync a full one, as after a failure (for
// a periodic resync, or when something else may have changed the tables).
func (e *Executor) RequestFullSync() {
	if !e.made() {
		return
	}
	e.mu.Lock()
	e.needFull = true
	e.mu.Unlock()
}

// Sync brings the kernel to rs with one `iptables-restore --noflush
// --counters -w` run reading the rules on standard input.
//
// A full sync writes everything (Render) and the empty Canary chains (filter,
// nat and mangle, as kube-proxy's), flushes and deletes the chains the previous Ruleset had and rs does
// not, then installs the jumps from the built-in chains (nat PREROUTING and
// OUTPUT to KUBE-SERVICES, nat POSTROUTING to KUBE-POSTROUTING, filter
// INPUT, FORWARD and OUTPUT to the filter chains) where `iptables -C` does
// not find them. If the listing the restore printed shows chains of ours
// that no synced Ruleset had, a second, small restore removes them.
//
// A partial sync (RenderPartial) rewrites the top-level chains and what
// changed; when nothing changed, nothing runs. It never builds on a kernel
// state it has not checked: first one restore of `-C` lines checks that
// the jumps from the built-in chains and the fixed rules are there, and
// if one is missing, a full sync runs instead. If the partial restore
// fails (a chain it jumps to is gone, for one) while ctx is not done, a
// full sync runs right after it. Either way SyncDetails.Fallback says so.
// That check does not look into the chains of unchanged ServicePorts: one
// emptied behind the Executor's back, with the jumps left, stays empty
// until CheckState's deep check finds it and a full sync repairs it.
//
// After any failure the next Sync is a full one.
func (e *Executor) Sync(ctx context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	d, err := e.Apply(ctx, rs)
	return d.SyncResult, err
}

// Apply is Sync, and returns this backend's account of the sync too.
func (e *Executor) Apply(ctx context.Context, rs *ruleset.Ruleset) (SyncDetails, error) {
	if !e.made() {
		return SyncDetails{}, errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := rs.Config().Family; f != e.family {
		return SyncDetails{}, fmt.Errorf("iptables executor: %s Ruleset given to the %s executor", f, e.family)
	}
	full, details, err := e.sync(ctx, rs)
	details.Full = full
	return details, err
}

// sync is Sync with e.mu held; it reports whether the sync was full.
func (e *Executor) sync(ctx context.Context, rs *ruleset.Ruleset) (full bool, _ SyncDetails, _ error) {
	if e.needFull || e.last == nil {
		d, err := e.syncFull(ctx, rs)
		return true, d, err
	}
	ch := ruleset.Diff(e.last, rs)
	switch {
	case ch.ConfigChanged:
		d, err := e.syncFull(ctx, rs)
		return true, d, err
	case ch.Empty():
		e.last = rs
		return false, SyncDetails{Changes: ch, Skipped: true}, nil
	}
	if missing := e.checkState(ctx); missing != "" {
		d, err := e.fallBack(ctx, rs, FallbackStateMissing, missing)
		return true, d, err
	}
	d, err := e.syncPartial(ctx, rs, ch)
	switch {
	case err == nil:
		return false, d, nil
	case ctx.Err() != nil:
		e.fail()
		return false, d, err
	}
	d, err = e.fallBack(ctx, rs, FallbackPartialFailed, err.Error())
	return true, d, err
}

// fallBack runs a full sync in place of a partial one and records why.
func (e *Executor) fallBack(ctx context.Context, rs *ruleset.Ruleset, reason FallbackReason, detail string) (SyncDetails, error) {
	res, err := e.syncFull(ctx, rs)
	res.Fallback, res.FallbackDetail = reason, detail
	if err != nil {
		return res, fmt.Errorf("full sync after %s (%s): %w", reason, detail, err)
	}
	return res, nil
}

func (e *Executor) restoreCmd(input []byte, stdout io.Writer) Command {
	return Command{Name: e.restoreTool, Args: []string{"--noflush", "--counters", "-w"}, Stdin: input, Stdout: stdout}
}

// syncPartial applies the changes ch, which are not empty, from e.last to
// rs. On failure it leaves e.last as it was: the caller falls back to a
// full sync.
func (e *Executor) syncPartial(ctx context.Context, rs *ruleset.Ruleset, ch ruleset.Changes) (SyncDetails, error) {
	res := SyncDetails{Changes: ch}
	written := map[servicemap.PortName]int{}
	input, err := renderPartial(e.names, e.last, rs, ch, renderOptions{kernel: e.kernel, serviceRules: written})
	if err != nil {
		return res, err
	}
	res.InputBytes = len(input)
	if err := e.runner.Run(ctx, e.restoreCmd(input, nil)); err != nil {
		if ctx.Err() == nil {
			e.restoreFailed(true)
		}
		return res, fmt.Errorf("partial sync: %w", err)
	}
	e.last = rs
	e.recordSync(input, written, ch.Removed, false)
	return res, nil
}

// fail forgets the kernel state: the next sync is full.
func (e *Executor) fail() {
	e.last = nil
	e.needFull = true
}

func (e *Executor) syncFull(ctx context.Context, rs *ruleset.Ruleset) (SyncDetails, error) {
	var res SyncDetails
	stale := staleChains(e.names, e.last, rs)
	// As kube-proxy, the counters are made at each full sync, and only
	// there does the choice of rules that use them change.
	if k := e.ensureCounters(e.kernel); k != e.kernel {
		e.kernel, e.want = k, nil
	}
	written := map[servicemap.PortName]int{}
	input := renderFull(e.names, rs, renderOptions{stale: stale, listTables: true, canary: true, kernel: e.kernel, serviceRules: written})
	res.InputBytes = len(input)
	listed := &chainLister{names: e.names}
	if err := e.runner.Run(ctx, e.restoreCmd(input, listed)); err != nil {
		e.fail()
		if ctx.Err() == nil {
			e.restoreFailed(false)
		}
		return res, fmt.Errorf("full sync: %w", err)
	}
	e.recordSync(input, written, nil, true)
	// The rules are in; from now on a failure only needs the next sync
	// to be full again.
	e.last = rs
	if err := e.ensureJumps(ctx); err != nil {
		e.needFull = true
		return res, fmt.Errorf("full sync: installing jumps: %w", err)
	}
	e.needFull = false

	keep := natChains(e.names, rs)
	for _, c := range listed.chains() {
		if e.names.ownsServiceChain(c) || c == e.names.MasqNonPod() {
			_, kept := slices.BinarySearch(keep, c)
			_, deleted := slices.BinarySearch(stale, c)
			if !kept && !deleted {
				res.Leftovers = append(res.Leftovers, c)
			}
		}
	}
	if len(res.Leftovers) > 0 {
		if err := e.deleteChains(ctx, nil, res.Leftovers, e.deleteChunk); err != nil {
			return res, fmt.Errorf("full sync: removing leftover chains: %w", err)
		}
	}
	return res, nil
}

// jumpRule is a rule in a built-in chain that jumps to one of ours.
type jumpRule struct {
	table, from string
	ctNew       bool
	comment     string
	to          func(Names) string
}

// jumps are the rules kube-proxy puts in the built-in chains, in the order
// it ensures them (each inserted first in its chain).
var jumps = []jumpRule{
	{"filter", "INPUT", true, "kubernetes externally-visible service portals", Names.ExternalServices},
	{"filter", "FORWARD", true, "kubernetes externally-visible service portals", Names.ExternalServices},
	{"filter", "INPUT", false, "kubernetes health check service ports", Names.NodePorts},
	{"filter", "FORWARD", true, "kubernetes service portals", Names.Services},
	{"filter", "OUTPUT", true, "kubernetes service portals", Names.Services},
	{"filter", "FORWARD", false, "kubernetes forwarding rules", Names.Forward},
	{"filter", "INPUT", true, "kubernetes load balancer firewall", Names.ProxyFirewall},
	{"filter", "OUTPUT", true, "kubernetes load balancer firewall", Names.ProxyFirewall},
	{"filter", "FORWARD", true, "kubernetes load balancer firewall", Names.ProxyFirewall},
	{"filter", "INPUT", false, "", Names.Firewall},
	{"filter", "OUTPUT", false, "", Names.Firewall},
	{"nat", "OUTPUT", false, "kubernetes service portals", Names.Services},
	{"nat", "PREROUTING", false, "kubernetes service portals", Names.Services},
	{"nat", "POSTROUTING", false, "kubernetes postrouting rules", Names.Postrouting},
}

// args is the iptables command line that applies op (-C, -I, -D) to j.
func (j jumpRule) args(n Names, op string) []string {
	return append([]string{"-w", "-t", j.table, op, j.from}, j.spec(n)...)
}

// spec is the rule of j, after its chain.
func (j jumpRule) spec(n Names) []string {
	var spec []string
	if j.ctNew {
		spec = append(spec, "-m", "conntrack", "--ctstate", "NEW")
	}
	if j.comment != "" {
		spec = append(spec, "-m", "comment", "--comment", j.comment)
	}
	return append(spec, "-j", j.to(n))
}

// ensureJumps inserts each jump that `iptables -C` does not find.
func (e *Executor) ensureJumps(ctx context.Context) error {
	for _, j := range jumps {
		err := e.runner.Run(ctx, Command{Name: e.iptablesTool, Args: j.args(e.names, "-C")})
		if err == nil {
			continue
		}
		if exitCode(err) != 1 {
			return err
		}
		if err := e.runner.Run(ctx, Command{Name: e.iptablesTool, Args: j.args(e.names, "-I")}); err != nil {
			return err
		}
	}
	return nil
}
