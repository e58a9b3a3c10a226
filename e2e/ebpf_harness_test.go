//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/cgroup"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// The ebpf backend translates Services at the socket for the processes of
// one cgroup, and at tc for flows that arrive from outside. In the
// suite each test gets a child cgroup of the cgroup v2 tree (never the
// root), the proxy attaches there, and clients that stand for the node's
// processes or its pods run as child processes placed in it (p.inside);
// the cluster's client namespaces, outside that cgroup, are the outside
// world, whose flows to node ports, external and load-balancer IPs meet
// the tc programs (--tc-external on the client links, --tc-pods on the
// links to the pods and to the remote node).

// ebpfSkips names the tests that loop over backends but do not run for
// ebpf, and why: each is printed as the subtest's skip reason.
var ebpfSkips = map[string]string{
	// The flushes are iptables and nft commands; the ebpf backend's
	// counterpart (an element deleted behind its back) is the ebpf
	// package's TestKernelUpdatesCheckCleanup.
	"TestRepairAfterOutsideFlush": "the outside flushes are netfilter commands; the ebpf package's TestKernelUpdatesCheckCleanup deletes a map element behind the executor's back instead",
	// Its drifts are netfilter commands too (a chain flushed, a rule or
	// an element deleted), found by the periodic check and repaired.
	"TestDriftFoundAndRepaired": "the drifts are netfilter commands; the ebpf package's TestKernelUpdatesCheckCleanup deletes a map element behind the executor's back and sees CheckState find it and a sync repair it",
}

// ebpfClientEnv makes the test binary a socket client (runSocketClient)
// instead of running the tests: p.inside starts it in the test's cgroup.
const ebpfClientEnv = "SVCPROXY_E2E_SOCKET_CLIENT"

var ebpfSeq atomic.Int64

// ebpfLeftovers are the cgroups and bpffs directories of this process
// that ebpfSetup made and its cleanups did not remove.
func ebpfLeftovers() []string {
	var left []string
	prefix := fmt.Sprintf("svcp-e2e-%d-", os.Getpid())
	if root, err := cgroup.Root(); err == nil {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				left = append(left, filepath.Join(root, e.Name()))
			}
		}
	}
	if matches, err := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*")); err == nil {
		left = append(left, matches...)
	}
	return left
}

// ebpfSetup creates the test's child cgroup and a bpffs for the proxy's
// pins (both removed when the test ends, after the clients in the cgroup
// have been stopped) and returns the proxy's flags for them and for tc on
// the cluster's links (when it has pods), and the cgroup directory opened, for the proxy's
// ExtraFiles: ip netns exec remounts /sys, hiding the cgroup tree, so the
// proxy is given the cgroup as /proc/self/fd/3.
func ebpfSetup(t *testing.T, c *netns.Cluster, p *proxy) ([]string, *os.File) {
	t.Helper()
	p.cgroup = cgroup.New(t, "svcp-e2e")
	cg, err := os.Open(p.cgroup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Close() })
	bpffs := filepath.Join(os.TempDir(), filepath.Base(p.cgroup)+"-bpffs")
	if err := os.Mkdir(bpffs, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(bpffs); err != nil {
			t.Errorf("removing %s: %v", bpffs, err)
		}
	})
	if err := syscall.Mount("bpffs", bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("ebpf backend: mounting a bpffs at %s: %v", bpffs, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(bpffs, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", bpffs, err)
		}
	})
	p.pinPath = filepath.Join(bpffs, "svcproxy")
	var external, pods []string
	for _, h := range c.Clients {
		external = append(external, fmt.Sprintf("vc%d", h.IPv4.As4()[2]))
	}
	for _, h := range c.Pods {
		if h.Node == c.Node {
			pods = append(pods, fmt.Sprintf("vp%d", h.IPv4.As4()[2]))
		}
	}
	if c.Remote != nil {
		pods = append(pods, "eth0")
	}
	args := []string{"--cgroup", "/proc/self/fd/3", "--bpf-pin-path", p.pinPath}
	if len(external) > 0 && len(pods) > 0 {
		args = append(args, "--tc-external", strings.Join(external, ","), "--tc-pods", strings.Join(pods, ","))
	}
	return args, cg
}

// ebpfState is what the ebpf backend holds in the kernel, as an operator
// reads it with bpftool: the programs attached to the cgroup and the
// pinned maps' elements.
func (p *proxy) ebpfState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out strings.Builder
	// bpftool runs in the host's namespaces (it only reads), where the
	// cgroup tree is mounted.
	text, err := exec.CommandContext(ctx, "bpftool", "cgroup", "show", p.cgroup).CombinedOutput()
	fmt.Fprintf(&out, "# bpftool cgroup show (err %v)\n%s\n", err, text)
	pins, _ := os.ReadDir(p.pinPath)
	for _, pin := range pins {
		if strings.HasPrefix(pin.Name(), "link_") {
			fmt.Fprintf(&out, "# pinned %s\n", pin.Name())
			continue
		}
		text, err := exec.CommandContext(ctx, "bpftool", "map", "dump", "pinned", filepath.Join(p.pinPath, pin.Name())).CombinedOutput()
		fmt.Fprintf(&out, "# map %s (err %v)\n%s\n", pin.Name(), err, text)
	}
	return out.String()
}

// inside is a dialer in h's namespace that stands for a process of the
// node or of a pod: for the ebpf backend a client process placed in the
// test's cgroup (its sockets are translated at connect and sendmsg), for
// the netfilter backends h itself.
func (p *proxy) inside(h *netns.Host) dialer {
	p.t.Helper()
	if p.backend != "ebpf" {
		return h
	}
	if sc, ok := p.socketClients[h]; ok {
		return sc
	}
	sc := startSocketClient(p.t, h, p.cgroup)
	if p.socketClients == nil {
		p.socketClients = map[*netns.Host]*socketClient{}
	}
	p.socketClients[h] = sc
	return sc
}

// socketClient is a client process in a namespace and a cgroup: it reads
// one socketRequest a line and answers one socketAnswer a line.
type socketClient struct {
	t     *testing.T
	label string
	in    io.WriteCloser
	out   *json.Decoder
}

type socketRequest struct {
	// Op is "tcp" (connect, read the echo server's line, close), "udp"
	// (one exchange on a new connected socket), "hold-udp" (open a
	// connected socket from Local and keep it as ID), "hold-tcp" (connect
	// and keep the connection as ID), or "exchange" (one exchange on the
	// held socket ID: a datagram, or for TCP a line written and the
	// answer read), or "close" (close the held socket ID).
	Op      string
	ID      string
	Local   netip.AddrPort
	Remote  netip.AddrPort
	Timeout time.Duration
}

type socketAnswer struct {
	Line string         // the echo server's reply
	From netip.AddrPort // the peer as the socket reports it
	Kind string         // "refused", "timeout", "unreachable", "other" on error
	Err  string
}

// startSocketClient starts a socket client in h's namespace, placed in
// cgroup at its creation (ip netns exec hides the cgroup tree). It is
// stopped when the test ends, before the cgroup is removed.
func startSocketClient(t *testing.T, h *netns.Host, cgroup string) *socketClient {
	t.Helper()
	cg, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := h.Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), ebpfClientEnv+"=1")
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	proc, err := h.Start(cmd)
	if err != nil {
		cancel()
		t.Fatalf("starting a socket client in %s: %v", h.Label, err)
	}
	t.Cleanup(func() {
		in.Close()
		select {
		case <-proc.Done():
		case <-time.After(2 * time.Second):
			proc.Stop()
		}
		cancel()
	})
	return &socketClient{t: t, label: h.Label, in: in, out: json.NewDecoder(out)}
}

func (s *socketClient) TCP(remote netip.AddrPort, timeout time.Duration) (netns.Reply, error) {
	return s.do(socketRequest{Op: "tcp", Remote: remote, Timeout: timeout})
}

func (s *socketClient) UDP(remote netip.AddrPort, timeout time.Duration) (netns.Reply, error) {
	return s.do(socketRequest{Op: "udp", Remote: remote, Timeout: timeout})
}

// heldSocket is a socket that a socketClient keeps open between requests.
type heldSocket struct {
	s  *socketClient
	id string
}

// hold opens a socket (network "udp" or "tcp") from local (zero: any) to
// remote in the client and keeps it open until the client ends.
func (s *socketClient) hold(network string, local, remote netip.AddrPort) (*heldSocket, error) {
	id := fmt.Sprintf("%s-%d", network, ebpfSeq.Add(1))
	if _, err := s.do(socketRequest{Op: "hold-" + network, ID: id, Local: local, Remote: remote, Timeout: connectTimeout}); err != nil {
		return nil, err
	}
	return &heldSocket{s: s, id: id}, nil
}

// Exchange makes one exchange on the held socket.
func (h *heldSocket) Exchange(timeout time.Duration) (netns.Reply, error) {
	return h.s.do(socketRequest{Op: "exchange", ID: h.id, Timeout: timeout})
}

// Close closes the held socket.
func (h *heldSocket) Close() error {
	_, err := h.s.do(socketRequest{Op: "close", ID: h.id})
	return err
}

func (s *socketClient) do(r socketRequest) (netns.Reply, error) {
	data, _ := json.Marshal(r)
	if _, err := s.in.Write(append(data, '\n')); err != nil {
		return netns.Reply{}, fmt.Errorf("socket client in %s: %w", s.label, err)
	}
	var a socketAnswer
	if err := s.out.Decode(&a); err != nil {
		return netns.Reply{}, fmt.Errorf("socket client in %s: %w", s.label, err)
	}
	op := fmt.Sprintf("%s (socket client) %s → %s", s.label, r.Op, r.Remote)
	switch a.Kind {
	case "":
		if r.Op == "hold-udp" || r.Op == "hold-tcp" || r.Op == "close" {
			return netns.Reply{}, nil
		}
		return netns.ParseReply(a.Line, a.From)
	case "refused":
		return netns.Reply{}, fmt.Errorf("%s: %w: %s", op, netns.ErrRefused, a.Err)
	case "timeout":
		return netns.Reply{}, fmt.Errorf("%s: %w: %s", op, netns.ErrTimeout, a.Err)
	case "unreachable":
		return netns.Reply{}, fmt.Errorf("%s: %w: %s", op, netns.ErrUnreachable, a.Err)
	}
	return netns.Reply{}, fmt.Errorf("%s: %s", op, a.Err)
}

// runSocketClient serves socketRequests from stdin until it closes; each
// is bounded by its timeout.
func runSocketClient() int {
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	held := map[string]net.Conn{}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for in.Scan() {
		var r socketRequest
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		line, from, err := serve(r, held)
		a := socketAnswer{Line: line, From: from}
		if err != nil {
			a.Kind, a.Err = errorKind(err), err.Error()
		}
		if err := out.Encode(a); err != nil {
			return 2
		}
	}
	return 0
}

// serve does what r asks, on the sockets held by ID.
func serve(r socketRequest, held map[string]net.Conn) (string, netip.AddrPort, error) {
	switch r.Op {
	case "tcp", "udp":
		c, err := dial(r.Op, r.Local, r.Remote, r.Timeout)
		if err != nil {
			return "", netip.AddrPort{}, err
		}
		defer c.Close()
		return exchange(c, r.Op == "udp", false, r.Timeout)
	case "hold-tcp", "hold-udp":
		c, err := dial(strings.TrimPrefix(r.Op, "hold-"), r.Local, r.Remote, r.Timeout)
		if err != nil {
			return "", netip.AddrPort{}, err
		}
		held[r.ID] = c
		return "", netip.AddrPort{}, nil
	case "close":
		c, ok := held[r.ID]
		if !ok {
			return "", netip.AddrPort{}, fmt.Errorf("no socket %q held", r.ID)
		}
		delete(held, r.ID)
		return "", netip.AddrPort{}, c.Close()
	case "exchange":
		c, ok := held[r.ID]
		if !ok {
			return "", netip.AddrPort{}, fmt.Errorf("no socket %q held", r.ID)
		}
		return exchange(c, strings.HasPrefix(r.ID, "udp"), true, r.Timeout)
	}
	return "", netip.AddrPort{}, fmt.Errorf("unknown op %q", r.Op)
}

// dial connects a socket of network ("tcp", "udp"; the family is
// remote's) from local (zero: any).
func dial(network string, local, remote netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	if remote.Addr().Is4() {
		network += "4"
	} else {
		network += "6"
	}
	d := net.Dialer{Timeout: timeout}
	if local.IsValid() {
		if strings.HasPrefix(network, "udp") {
			d.LocalAddr = net.UDPAddrFromAddrPort(local)
		} else {
			d.LocalAddr = net.TCPAddrFromAddrPort(local)
		}
	}
	return d.Dial(network, remote.String())
}

// exchange reads the echo server's line from c: for UDP the reply to a
// fresh token sent, for TCP the first line (the greeting; with ask, after
// writing a line, which proves the connection still carries data).
func exchange(c net.Conn, udp, ask bool, timeout time.Duration) (string, netip.AddrPort, error) {
	c.SetDeadline(time.Now().Add(timeout))
	token := fmt.Sprintf("x%d", time.Now().UnixNano())
	if udp {
		if _, err := c.Write([]byte(token)); err != nil {
			return "", netip.AddrPort{}, err
		}
	} else if ask {
		if _, err := c.Write([]byte("still there?\n")); err != nil {
			return "", netip.AddrPort{}, err
		}
	}
	buf := make([]byte, 2048)
	for range 100 { // bounded by the deadline too
		n, err := c.Read(buf)
		if err != nil {
			return "", netip.AddrPort{}, err
		}
		line := string(buf[:n])
		if !udp {
			line, _, _ = strings.Cut(line, "\n")
		}
		if !udp || strings.HasSuffix(line, " "+token) {
			ap := c.RemoteAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort()
			return line, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
		}
	}
	return "", netip.AddrPort{}, errors.New("no matching reply among 100 datagrams")
}

func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	return "other"
}
