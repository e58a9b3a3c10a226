package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/affinity"
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
	sticky  *affinity.Table[servicemap.PortName]
}

// source is what the Ruleset can tell of a flow from client.
func (r *route) source(client netip.Addr) ruleset.Client {
	return ruleset.Client{Addr: client, FromNode: r.local[client]}
}

// pick returns the target of a new flow from client; not valid when the
// flow is dropped.
func (r *route) pick(client netip.Addr) netip.AddrPort {
	return r.rs.Choose(r.sticky, r.svc, r.kind, r.source(client), time.Now(), rand.Float64())
}

// listener is the socket of one frontend and the UDP flows it carries, each
// relayed through a socket of its own, connected to the flow's target.
type listener struct {
	route atomic.Pointer[route]
	sock  io.Closer // a net.Listener or a *net.UDPConn
	mu    sync.Mutex
	flows map[netip.AddrPort]*net.UDPConn // by client
}

// update serves r from now on and ends the UDP flows whose target r no
// longer offers their client: their next datagram starts a new flow. A nil
// r, once the socket is closed, ends every flow.
func (l *listener) update(r *route) {
	l.route.Store(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	for client, up := range l.flows {
		if r == nil || !r.rs.Offers(r.svc, r.kind, r.source(client.Addr()), up.RemoteAddr().(*net.UDPAddr).AddrPort()) {
			delete(l.flows, client)
			up.Close()
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
	var upstream sync.WaitGroup
	upstream.Go(func() { io.Copy(up, client); up.(*net.TCPConn).CloseWrite() })
	io.Copy(client, up)
	client.CloseWrite()
	upstream.Wait()
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
		if up := l.flow(conn, netip.AddrPortFrom(client.Addr().Unmap(), client.Port())); up != nil {
			up.SetReadDeadline(time.Now().Add(udpIdle))
			up.Write(buf[:n])
		}
	}
}

// flow returns the upstream socket of client's flow, starting the flow if
// there is none; nil when its datagrams are dropped.
func (l *listener) flow(conn *net.UDPConn, client netip.AddrPort) *net.UDPConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.route.Load()
	if up := l.flows[client]; up != nil || r == nil {
		return up
	}
	target := r.pick(client.Addr())
	if !target.IsValid() {
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(target))
	if err != nil {
		return nil
	}
	l.flows[client] = up
	go l.relayReplies(conn, client, up)
	return up
}

// relayReplies sends the target's datagrams to the client until the flow is
// idle, ended, or refused by the target.
func (l *listener) relayReplies(conn *net.UDPConn, client netip.AddrPort, up *net.UDPConn) {
	buf := make([]byte, 65535)
	for n, err := up.Read(buf); err == nil; n, err = up.Read(buf) {
		up.SetReadDeadline(time.Now().Add(udpIdle))
		conn.WriteToUDPAddrPort(buf[:n], client)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flows[client] == up {
		delete(l.flows, client)
	}
	up.Close()
}
