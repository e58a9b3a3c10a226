package main

import (
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

const (
	dialTimeout = 3 * time.Second
	udpIdle     = 30 * time.Second // a UDP flow ends after so long without a datagram either way
	dropHold    = 30 * time.Second // a dropped TCP connection is held unanswered so long
)

// route is what one frontend serves: a Service port of a Ruleset, reached
// through one kind of frontend.
type route struct {
	rs      *ruleset.Ruleset
	svc     *ruleset.Service
	kind    ruleset.FrontendKind
	refused bool                // the Service rejects every flow: nothing listens
	local   map[netip.Addr]bool // the node's addresses
	sticky  *stickyTable        // the data plane's
}

// targets are where a new flow from client may go; none when it is dropped.
func (r *route) targets(client netip.Addr) []ruleset.Choice {
	if r.svc.Firewalled(r.kind, client) {
		return nil
	}
	return r.rs.Decide(r.svc, r.kind, ruleset.Source{Addr: client, FromNode: r.local[client]}).Targets
}

// pick returns the target of a new flow from client; not valid when the
// flow is dropped.
func (r *route) pick(client netip.Addr) netip.AddrPort {
	if choices := r.targets(client); len(choices) > 0 {
		return r.sticky.choose(r.svc, client, choices, time.Now())
	}
	return netip.AddrPort{}
}

// offers reports whether r still sends client's new flows to target.
func (r *route) offers(client netip.Addr, target netip.AddrPort) bool {
	return slices.ContainsFunc(r.targets(client), func(c ruleset.Choice) bool { return c.Endpoint == target })
}

// stickyTable is ClientIP affinity: for each Service port and client, the
// target of the client's last new flow, and until when it stands.
type stickyTable struct {
	mu   sync.Mutex
	last map[stickyKey]stickyEntry
}

type stickyKey struct {
	port   servicemap.PortName
	client netip.Addr
}

type stickyEntry struct {
	target  netip.AddrPort
	expires time.Time
}

// choose picks a target of a new flow from client to s among choices, each
// with its share; with ClientIP affinity, the target of the client's last
// flow to s if that began less than the timeout ago and is still a choice.
func (t *stickyTable) choose(s *ruleset.Service, client netip.Addr, choices []ruleset.Choice, now time.Time) netip.AddrPort {
	if !s.Affinity.Enabled() {
		return weighted(choices)
	}
	timeout, key := time.Duration(s.Affinity.Seconds())*time.Second, stickyKey{s.Name, client}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.last[key]
	if !ok || !now.Before(e.expires) || e.expires.Sub(now) > timeout || // a timeout since lowered
		!slices.ContainsFunc(choices, func(c ruleset.Choice) bool { return c.Endpoint == e.target }) {
		e.target = weighted(choices)
	}
	t.last[key] = stickyEntry{e.target, now.Add(timeout)}
	return e.target
}

// reap forgets the affinities that have expired.
func (t *stickyTable) reap(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.DeleteFunc(t.last, func(_ stickyKey, e stickyEntry) bool { return !now.Before(e.expires) })
}

func weighted(choices []ruleset.Choice) netip.AddrPort {
	x := rand.Float64()
	for _, c := range choices[:len(choices)-1] {
		share, _ := c.Share.Float64()
		if x -= share; x < 0 {
			return c.Endpoint
		}
	}
	return choices[len(choices)-1].Endpoint
}

// listener is the socket of one frontend and the UDP flows it carries.
type listener struct {
	route atomic.Pointer[route]
	sock  io.Closer // a net.Listener or a *net.UDPConn
	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow // by client
}

// udpFlow relays one client's datagrams through a socket of its own to one
// target.
type udpFlow struct {
	client, target netip.AddrPort
	up             *net.UDPConn
}

// update serves r from now on and ends the UDP flows whose target r no
// longer offers their client: their next datagram starts a new flow. A nil
// r, once the socket is closed, ends every flow.
func (l *listener) update(r *route) {
	l.route.Store(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, fl := range l.flows {
		if r == nil || !r.offers(c.Addr(), fl.target) {
			delete(l.flows, c)
			fl.up.Close()
		}
	}
}

func (l *listener) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		} else if err != nil {
			time.Sleep(10 * time.Millisecond) // out of descriptors, say
			continue
		}
		go forwardTCP(c.(*net.TCPConn), l.route.Load())
	}
}

// forwardTCP relays one client connection to a target. A dropped one is
// held unanswered, then reset; one whose target cannot be reached is reset.
func forwardTCP(client *net.TCPConn, r *route) {
	defer client.Close()
	client.SetLinger(0) // until relayed: a close resets
	if r == nil {
		return // accepted as the listener closed
	}
	target := r.pick(client.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
	if !target.IsValid() {
		client.SetReadDeadline(time.Now().Add(dropHold))
		io.Copy(io.Discard, client)
		return
	}
	up, err := net.DialTimeout("tcp", target.String(), dialTimeout)
	if err != nil {
		return
	}
	defer up.Close()
	client.SetLinger(-1)
	done := make(chan struct{})
	go func() {
		io.Copy(up, client)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(client, up)
	client.CloseWrite()
	<-done
}

func (l *listener) serveUDP(conn *net.UDPConn) {
	buf := make([]byte, 65535)
	for {
		n, client, err := conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		} else if err != nil {
			continue
		}
		client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
		if fl := l.flow(conn, client); fl != nil {
			fl.up.SetReadDeadline(time.Now().Add(udpIdle))
			fl.up.Write(buf[:n])
		}
	}
}

// flow returns the flow of client, starting one if it has none; nil when
// its datagrams are dropped.
func (l *listener) flow(conn *net.UDPConn, client netip.AddrPort) *udpFlow {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fl := l.flows[client]; fl != nil || l.route.Load() == nil {
		return fl
	}
	target := l.route.Load().pick(client.Addr())
	if !target.IsValid() {
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(target))
	if err != nil {
		return nil
	}
	fl := &udpFlow{client: client, target: target, up: up}
	l.flows[client] = fl
	go l.relayReplies(conn, fl)
	return fl
}

// relayReplies sends the target's datagrams to the client until the flow is
// idle, ended, or refused by the target.
func (l *listener) relayReplies(conn *net.UDPConn, fl *udpFlow) {
	buf := make([]byte, 65535)
	for {
		n, err := fl.up.Read(buf)
		if err != nil {
			break
		}
		fl.up.SetReadDeadline(time.Now().Add(udpIdle))
		conn.WriteToUDPAddrPort(buf[:n], fl.client)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flows[fl.client] == fl {
		delete(l.flows, fl.client)
	}
	fl.up.Close()
}
