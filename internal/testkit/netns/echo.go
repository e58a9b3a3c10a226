//go:build linux

package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors that client errors wrap, so tests can tell apart what the network
// did: a REJECT (or a closed port) is ErrRefused, a DROP is ErrTimeout.
var (
	ErrRefused     = errors.New("refused")
	ErrTimeout     = errors.New("timed out")
	ErrUnreachable = errors.New("unreachable")
)

const (
	replyTag    = "svcproxy-echo"
	echoTimeout = 30 * time.Second // a served TCP connection lives at most this long
	maxReply    = 2048
)

// Reply is what an echo server answered.
type Reply struct {
	// Identity is the server's identity (a Cluster pod's label, "pod0").
	Identity string
	// Source is the client address and port the server saw: the client's
	// own when it was preserved, the node's when it was masqueraded.
	Source netip.AddrPort
	// From is the address the reply came from, as the client saw it (the
	// Service IP when the reply was translated back).
	From netip.AddrPort
	// Payload is the UDP payload echoed back (empty for TCP).
	Payload string
}

// ParseReply parses an echo server's reply line, received from from.
func ParseReply(line string, from netip.AddrPort) (Reply, error) {
	f := strings.SplitN(strings.TrimRight(line, "\n"), " ", 4)
	if len(f) < 3 || f[0] != replyTag {
		return Reply{}, fmt.Errorf("not an echo reply: %q", line)
	}
	src, err := netip.ParseAddrPort(f[2])
	if err != nil {
		return Reply{}, fmt.Errorf("echo reply %q: %w", line, err)
	}
	r := Reply{Identity: f[1], Source: src, From: from}
	if len(f) == 4 {
		r.Payload = f[3]
	}
	return r, nil
}

// Echo is a running echo server; the Lab closes it on cleanup.
type Echo struct {
	Identity string
	Port     uint16

	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	socks  []io.Closer           // listeners and UDP sockets
	conns  map[net.Conn]struct{} // open TCP connections
}

// StartEcho starts a TCP and UDP echo server on port, for IPv4 and IPv6, on
// all addresses of the namespace, answering with identity (no spaces).
func (ns *NS) StartEcho(identity string, port uint16) (*Echo, error) {
	if identity == "" || strings.ContainsAny(identity, " \n") {
		return nil, fmt.Errorf("netns: bad echo identity %q", identity)
	}
	e := &Echo{Identity: identity, Port: port, conns: map[net.Conn]struct{}{}}
	var tcp []net.Listener
	var udp []net.PacketConn
	err := ns.Do(func() error {
		var lc net.ListenConfig
		for _, fam := range []string{"4", "6"} {
			l, err := lc.Listen(context.Background(), "tcp"+fam, fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			tcp = append(tcp, l)
			e.socks = append(e.socks, l)
			p, err := lc.ListenPacket(context.Background(), "udp"+fam, fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			udp = append(udp, p)
			e.socks = append(e.socks, p)
		}
		return nil
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("netns: %s: echo on port %d: %w", ns.Label, port, err)
	}
	for _, l := range tcp {
		e.wg.Add(1)
		go e.serveTCP(l)
	}
	for _, p := range udp {
		e.wg.Add(1)
		go e.serveUDP(p)
	}
	ns.lab.addCloser(func() { e.Close() })
	return e, nil
}

// Close stops the server, closes its connections and waits for its
// goroutines.
func (e *Echo) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		for _, s := range e.socks {
			s.Close()
		}
		for c := range e.conns {
			c.Close()
		}
	}
	e.mu.Unlock()
	e.wg.Wait()
}

func (e *Echo) serveTCP(l net.Listener) {
	defer e.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE; don't spin
			continue
		}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.conns[c] = struct{}{}
		e.wg.Add(1)
		e.mu.Unlock()
		go func() {
			defer e.wg.Done()
			defer func() {
				e.mu.Lock()
				delete(e.conns, c)
				e.mu.Unlock()
				c.Close()
			}()
			c.SetDeadline(time.Now().Add(echoTimeout))
			src := addrPort(c.RemoteAddr())
			if _, err := fmt.Fprintf(c, "%s %s %s\n", replyTag, e.Identity, src); err != nil {
				return
			}
			io.Copy(c, c)
		}()
	}
}

func (e *Echo) serveUDP(p net.PacketConn) {
	defer e.wg.Done()
	u := p.(*net.UDPConn)
	buf := make([]byte, maxReply)
	for {
		n, src, err := u.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond) // e.g. a queued ICMP error; don't spin
			continue
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		reply := fmt.Sprintf("%s %s %s %s", replyTag, e.Identity, src, buf[:n])
		u.WriteToUDPAddrPort([]byte(reply), src)
	}
}

func addrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// classify wraps err with ErrRefused, ErrTimeout or ErrUnreachable when it is
// one of those.
func classify(op string, err error) error {
	var ne net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: %w: %w", op, ErrRefused, err)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%s: %w: %w", op, ErrTimeout, err)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("%s: %w: %w", op, ErrUnreachable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Dial connects from inside the namespace ("tcp" or "udp"; the family is
// remote's), from local if it
// is valid (its address may be the zero Addr: any), within timeout. The
// connection belongs to the namespace; the caller closes it.
func (ns *NS) Dial(network string, local, remote netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	// One address family per socket: a v6 socket is v6-only, so a v4 and a
	// v6 client can share a fixed local port.
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	family := "6"
	if remote.Addr().Is4() {
		family = "4"
	}
	d := net.Dialer{Timeout: timeout}
	if local.IsValid() || local.Port() != 0 {
		var ip net.IP
		if local.Addr().IsValid() {
			ip = local.Addr().AsSlice()
		}
		switch network {
		case "tcp":
			d.LocalAddr = &net.TCPAddr{IP: ip, Port: int(local.Port())}
		case "udp":
			d.LocalAddr = &net.UDPAddr{IP: ip, Port: int(local.Port())}
		}
	}
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = d.Dial(network+family, remote.String())
		return err
	})
	return c, classify(fmt.Sprintf("%s %s → %s", ns.Label, network, remote), err)
}

// TCP connects to remote, reads the echo server's first line and closes,
// all within timeout.
func (ns *NS) TCP(remote netip.AddrPort, timeout time.Duration) (Reply, error) {
	start := time.Now()
	c, err := ns.Dial("tcp", netip.AddrPort{}, remote, timeout)
	if err != nil {
		return Reply{}, err
	}
	defer c.Close()
	c.SetDeadline(start.Add(timeout))
	line, err := bufio.NewReaderSize(io.LimitReader(c, maxReply), maxReply).ReadString('\n')
	if err != nil {
		return Reply{}, classify(fmt.Sprintf("%s tcp → %s read", ns.Label, remote), err)
	}
	return ParseReply(line, addrPort(c.RemoteAddr()))
}

// UDPClient is a connected UDP socket in a namespace with a fixed local
// port, so that successive exchanges are one conntrack flow.
type UDPClient struct {
	ns   *NS
	conn *net.UDPConn
	seq  int
}

// DialUDP opens a UDP socket in the namespace bound to local (a zero Addr
// means any address; port 0 means any port) and connected to remote. Because
// it is connected, an ICMP port unreachable (a REJECT) surfaces as
// ErrRefused. The Lab closes it on cleanup.
func (ns *NS) DialUDP(local, remote netip.AddrPort) (*UDPClient, error) {
	u, err := ns.dialUDP(local, remote)
	if err != nil {
		return nil, err
	}
	ns.lab.addCloser(func() { u.Close() })
	return u, nil
}

func (ns *NS) dialUDP(local, remote netip.AddrPort) (*UDPClient, error) {
	c, err := ns.Dial("udp", local, remote, time.Second)
	if err != nil {
		return nil, err
	}
	return &UDPClient{ns: ns, conn: c.(*net.UDPConn)}, nil
}

// Local is the socket's local address and port.
func (u *UDPClient) Local() netip.AddrPort { return addrPort(u.conn.LocalAddr()) }

// Close closes the socket.
func (u *UDPClient) Close() error { return u.conn.Close() }

// Exchange sends one datagram carrying a fresh token and waits, at most
// timeout, for the reply that echoes it (replies to earlier exchanges are
// skipped).
func (u *UDPClient) Exchange(timeout time.Duration) (Reply, error) {
	u.seq++
	token := fmt.Sprintf("x%d-%d", u.seq, time.Now().UnixNano())
	op := fmt.Sprintf("%s udp %s → %s", u.ns.Label, u.Local(), u.conn.RemoteAddr())
	u.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := u.conn.Write([]byte(token)); err != nil {
		return Reply{}, classify(op, err)
	}
	buf := make([]byte, maxReply)
	for range 100 { // bounded by the deadline too
		n, err := u.conn.Read(buf)
		if err != nil {
			return Reply{}, classify(op, err)
		}
		r, err := ParseReply(string(buf[:n]), addrPort(u.conn.RemoteAddr()))
		if err == nil && r.Payload == token {
			return r, nil
		}
	}
	return Reply{}, fmt.Errorf("%s: no matching reply among 100 datagrams", op)
}

// UDP sends one datagram to remote from an ephemeral port and returns the
// reply, within timeout.
func (ns *NS) UDP(remote netip.AddrPort, timeout time.Duration) (Reply, error) {
	u, err := ns.dialUDP(netip.AddrPort{}, remote)
	if err != nil {
		return Reply{}, err
	}
	defer u.Close()
	return u.Exchange(timeout)
}
