//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// DefaultCommandTimeout bounds a command run without a context deadline.
const DefaultCommandTimeout = 10 * time.Second

// netnsDir is where `ip netns add` bind-mounts a named namespace (iproute2's
// compiled-in default; /var/run is /run on current systems).
const netnsDir = "/var/run/netns/"

var (
	labSeq atomic.Int64
	// netnsMu serialises `ip netns add/delete` in this process: concurrent
	// first-time `ip netns add` calls can stack mounts on /run/netns.
	netnsMu sync.Mutex
	labelRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,19}$`)
)

// Lab owns network namespaces and everything started in them. Create it with
// NewLab; its builder methods (and those of its NS) call t.Fatalf on error and
// must be called from the test's goroutine. Everything is removed by
// t.Cleanup: sockets closed, processes killed, namespaces deleted.
type Lab struct {
	t  testing.TB
	id int64

	mu      sync.Mutex
	nss     []*NS
	closers []func()
	procs   []*Proc
}

// NS is one named network namespace of a Lab.
type NS struct {
	// Name is the kernel-visible name, as `ip netns list` shows it:
	// Prefix() + "<lab>-<label>".
	Name string
	// Label is the short name given to NewNS ("node", "pod0"); the echo
	// servers of a Cluster use it as their identity.
	Label string
	lab   *Lab
}

// NewLab calls Require(t) and returns an empty Lab cleaned up with t.
func NewLab(t testing.TB) *Lab {
	t.Helper()
	Require(t)
	l := &Lab{t: t, id: labSeq.Add(1)}
	t.Cleanup(l.cleanup)
	return l
}

// NewNS creates namespace Prefix()+"<lab>-"+label with lo up, IPv6
// duplicate address detection off and ICMP error rate limits off. label is
// [a-z][a-z0-9]{0,19} and unique in the Lab.
func (l *Lab) NewNS(label string) *NS {
	l.t.Helper()
	if !labelRE.MatchString(label) {
		l.t.Fatalf("netns: bad label %q (want %s)", label, labelRE)
	}
	ns := &NS{Name: fmt.Sprintf("%s%d-%s", Prefix(), l.id, label), Label: label, lab: l}
	l.mu.Lock()
	dup := slices.ContainsFunc(l.nss, func(o *NS) bool { return o.Label == label })
	l.mu.Unlock()
	if dup {
		l.t.Fatalf("netns: label %q used twice in one lab", label)
	}
	netnsMu.Lock()
	_, err := runHost(context.Background(), "ip", "netns", "add", ns.Name)
	netnsMu.Unlock()
	if err != nil {
		l.t.Fatalf("netns: %v", err)
	}
	l.mu.Lock()
	l.nss = append(l.nss, ns) // before anything else can fail: cleanup deletes it
	l.mu.Unlock()
	// Without DAD, link-local addresses are usable at once: while a node's
	// link-local address is tentative, it cannot send the neighbour
	// solicitations that forwarding to a pod needs (for about 2s).
	ns.Sysctl("net.ipv6.conf.all.accept_dad", "0")
	ns.Sysctl("net.ipv6.conf.default.accept_dad", "0")
	// Without a rate limit, every REJECT or closed UDP port yields its ICMP
	// error: by default only about 6 in a burst per peer do, and later
	// "refused" exchanges would time out instead.
	ns.Sysctl("net.ipv4.icmp_ratelimit", "0")
	ns.Sysctl("net.ipv6.icmp.ratelimit", "0")
	ns.ip("link", "set", "lo", "up")
	return ns
}

// Namespaces returns the Lab's namespaces in creation order.
func (l *Lab) Namespaces() []*NS {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.nss)
}

// Veth joins a and b with a veth pair named aDev in a and bDev in b and sets
// both ends up. The pair is created inside a, never in the host namespace.
func (l *Lab) Veth(a *NS, aDev string, b *NS, bDev string) {
	l.t.Helper()
	a.ip("link", "add", aDev, "type", "veth", "peer", "name", bDev, "netns", b.Name)
	a.ip("link", "set", aDev, "up")
	b.ip("link", "set", bDev, "up")
	a.waitUp(aDev)
	b.waitUp(bDev)
}

// AddSink creates dev, an interface that silently drops whatever is routed
// to it: one end of a veth pair whose other end (dev+"x", same namespace)
// stays down, with ARP off. Routes through it are usable (the kernel keeps
// using routes on a link without carrier by default), so locally sent
// packets still pass OUTPUT and can be translated away from it. It stands in
// for a dummy interface, which not every kernel has.
func (ns *NS) AddSink(dev string) {
	ns.lab.t.Helper()
	ns.ip("link", "add", dev, "type", "veth", "peer", "name", dev+"x")
	ns.ip("link", "set", dev, "arp", "off", "up")
}

// AddAddr adds p (address and prefix length) to dev; IPv6 addresses skip
// duplicate address detection.
func (ns *NS) AddAddr(dev string, p netip.Prefix) {
	ns.lab.t.Helper()
	args := []string{"addr", "add", p.String(), "dev", dev}
	if p.Addr().Is6() {
		args = append(args, "nodad")
	}
	ns.ip(args...)
}

// AddRoute adds a route to dst, through gateway via if via is valid, out of
// dev if dev is not empty.
func (ns *NS) AddRoute(dst netip.Prefix, via netip.Addr, dev string) {
	ns.lab.t.Helper()
	args := []string{"route", "add", dst.String()}
	if via.IsValid() {
		args = append(args, "via", via.String())
	}
	if dev != "" {
		args = append(args, "dev", dev)
	}
	ns.ip(args...)
}

// Sysctl sets a network sysctl ("net.ipv4.ip_forward") in this namespace
// only. Keys outside "net." are refused: they are not per-namespace.
func (ns *NS) Sysctl(key, value string) {
	ns.lab.t.Helper()
	if !strings.HasPrefix(key, "net.") || strings.Contains(key, "..") || strings.Contains(key, "/") {
		ns.lab.t.Fatalf("netns: sysctl %q refused: only net.* keys are per network namespace", key)
	}
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	err := ns.Do(func() error {
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			return err
		}
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(got)) != value {
			return fmt.Errorf("reads back %q", strings.TrimSpace(string(got)))
		}
		return nil
	})
	if err != nil {
		ns.lab.t.Fatalf("netns: %s: sysctl %s=%s: %v", ns.Label, key, value, err)
	}
}

// Command returns a command that runs name inside the namespace through
// `ip netns exec`. Cancelling ctx kills its process group.
func (ns *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
	setProcAttrs(cmd)
	cmd.WaitDelay = time.Second
	return cmd
}

// Run runs name inside the namespace and returns its stdout; the error
// carries stderr. Without a deadline on ctx it is bounded by
// DefaultCommandTimeout.
func (ns *NS) Run(ctx context.Context, name string, args ...string) (string, error) {
	return runHost(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// MustRun is Run with DefaultCommandTimeout that fails the test on error.
func (ns *NS) MustRun(name string, args ...string) string {
	ns.lab.t.Helper()
	out, err := ns.Run(context.Background(), name, args...)
	if err != nil {
		ns.lab.t.Fatalf("netns: %s: %v", ns.Label, err)
	}
	return out
}

// ip runs `ip -n NS args...` and fails the test on error.
func (ns *NS) ip(args ...string) string {
	ns.lab.t.Helper()
	out, err := runHost(context.Background(), "ip", append([]string{"-n", ns.Name}, args...)...)
	if err != nil {
		ns.lab.t.Fatalf("netns: %s: %v", ns.Label, err)
	}
	return out
}

// waitUp waits (at most 2s) until dev's operational state is UP, which is
// when the kernel has attached its queueing discipline: before that, packets
// sent on it are dropped.
func (ns *NS) waitUp(dev string) {
	ns.lab.t.Helper()
	var out string
	for range 100 {
		out = ns.ip("-o", "link", "show", "dev", dev)
		if strings.Contains(out, " state UP ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ns.lab.t.Fatalf("netns: %s: %s not up after 2s: %s", ns.Label, dev, out)
}

// Proc is a background process started by NS.Start.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd, which must come from ns.Command, and kills its process
// group when the Lab is cleaned up (or Stop is called).
func (ns *NS) Start(cmd *exec.Cmd) (*Proc, error) {
	if len(cmd.Args) < 5 || !slices.Equal(cmd.Args[:4], []string{"ip", "netns", "exec", ns.Name}) {
		return nil, fmt.Errorf("netns: Start: command %q was not made by %s.Command", cmd.Args, ns.Label)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	ns.lab.mu.Lock()
	ns.lab.procs = append(ns.lab.procs, p)
	ns.lab.mu.Unlock()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, valid once Done is closed.
func (p *Proc) Err() error { <-p.done; return p.err }

// Stop kills the process group by its id and waits, at most 5s, for the
// process to exit.
func (p *Proc) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("netns: pid %d did not exit 5s after SIGKILL", p.Cmd.Process.Pid)
	}
}

// setProcAttrs puts a child in its own process group, killed by its id on
// cancel, and asks the kernel to kill it if the test process dies.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (l *Lab) addCloser(f func()) {
	l.mu.Lock()
	l.closers = append(l.closers, f)
	l.mu.Unlock()
}

// cleanup closes sockets, kills processes and deletes namespaces, newest
// first, then checks that none of the Lab's namespaces is left.
func (l *Lab) cleanup() {
	l.mu.Lock()
	closers, procs, nss := l.closers, l.procs, l.nss
	l.closers, l.procs, l.nss = nil, nil, nil
	l.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	for _, p := range procs {
		if err := p.Stop(); err != nil {
			l.t.Errorf("netns cleanup: %v", err)
		}
	}
	for i := len(nss) - 1; i >= 0; i-- {
		if err := deleteNetns(nss[i].Name); err != nil {
			l.t.Errorf("netns cleanup: %v", err)
		}
	}
	left, err := Leftovers()
	if err != nil {
		l.t.Errorf("netns cleanup: %v", err)
	}
	for _, ns := range nss {
		if slices.Contains(left, ns.Name) {
			l.t.Errorf("netns cleanup: namespace %s still present", ns.Name)
		}
	}
}

// Do runs fn with a thread inside the namespace, so that sockets fn creates
// belong to it (they keep belonging to it afterwards, whoever uses them).
// fn runs on its own goroutine: it must not call t.FailNow, and must not
// start goroutines that expect to be in the namespace. A panic in fn is
// returned as an error.
func (ns *NS) Do(fn func() error) error {
	target, err := os.Open(netnsDir + ns.Name)
	if err != nil {
		return fmt.Errorf("netns: %s: %w", ns.Label, err)
	}
	defer target.Close()
	want, err := fileID(target)
	if err != nil {
		return fmt.Errorf("netns: %s: %w", ns.Label, err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: %w", err)
			return
		}
		defer home.Close()
		homeID, err := fileID(home)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: %w", err)
			return
		}
		if err := setns(target); err != nil {
			runtime.UnlockOSThread() // setns failed: the thread did not move
			done <- fmt.Errorf("netns: setns into %s: %w", ns.Label, err)
			return
		}
		ferr := func() (err error) {
			if id, err := threadNetnsID(); err != nil || id != want {
				return fmt.Errorf("netns: thread not in %s after setns (%v)", ns.Label, err)
			}
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("netns: panic in Do(%s): %v", ns.Label, r)
				}
			}()
			return fn()
		}()
		if err := setns(home); err != nil {
			// Stay locked: the runtime destroys the thread when we return.
			done <- errors.Join(ferr, fmt.Errorf("netns: restoring thread namespace: %w", err))
			return
		}
		if id, err := threadNetnsID(); err != nil || id != homeID {
			done <- errors.Join(ferr, fmt.Errorf("netns: thread not back home after setns (%v)", err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

type nsID struct{ dev, ino uint64 }

func fileID(f *os.File) (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

func threadNetnsID() (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

func setns(f *os.File) error {
	_, _, errno := syscall.Syscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// ToolOnPath makes every later run of the program name, by anything in this
// test process that finds it on PATH, run inside ns: a wrapper that calls
// the real program under `ip netns exec` goes first on PATH until the test
// ends. It is for libraries that run a tool without a hook for how (such as
// knftables with nft); such tests cannot run in parallel. It returns the
// real program's path.
func (ns *NS) ToolOnPath(t testing.TB, name string) string {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatal(err)
	}
	real, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nexec %s netns exec %s %s \"$@\"\n", ip, ns.Name, real)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return real
}
