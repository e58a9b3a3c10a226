package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// routeProtocol marks the routes the data plane owns (their rtm_protocol):
// `ip route show table local proto 177` lists them.
const routeProtocol = 177

// frontend is an address, port and protocol the data plane listens on.
type frontend struct {
	addr  netip.AddrPort
	proto v1.Protocol
}

// DataPlane serves the Rulesets given to Sync from user space: a socket per
// frontend, a new upstream connection per TCP connection or UDP flow. Each
// cluster, external and load-balancer IP it serves gets a route of type
// local (table local, protocol routeProtocol), so that the kernel delivers
// its packets to the sockets. Node ports are served on the Ruleset's
// Config.NodePortAddresses only: with none, on no address (a socket binds
// addresses, not "every local address"). It is safe for concurrent use.
type DataPlane struct {
	mu        sync.Mutex
	listeners map[frontend]*listener
	sticky    *stickyTable
}

// NewDataPlane returns a DataPlane that serves nothing yet, once it has
// removed the routes that one which died left behind.
func NewDataPlane() (*DataPlane, error) {
	d := &DataPlane{listeners: map[frontend]*listener{}, sticky: &stickyTable{last: map[stickyKey]stickyEntry{}}}
	if err := errors.Join(syncRoutes(v1.IPv4Protocol, nil), syncRoutes(v1.IPv6Protocol, nil)); err != nil {
		return nil, err
	}
	return d, nil
}

// Sync serves rs, the desired state of one IP family, in place of what the
// last Sync of that family served. A frontend whose Service rejects every
// flow gets no socket: the kernel refuses its TCP connections (reset) and
// UDP datagrams (ICMP port unreachable). Open TCP connections stay open; a
// UDP flow whose target rs no longer offers its client moves to a new
// target with its next datagram. A frontend that cannot be bound is
// reported; every other one is served. Every Sync is a full one.
func (d *DataPlane) Sync(ctx context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	return svcproxy.SyncResult{Full: true}, d.sync(ctx, rs)
}

func (d *DataPlane) sync(ctx context.Context, rs *ruleset.Ruleset) error {
	family := rs.Config().Family
	routes, addrs := frontends(rs)
	d.mu.Lock()
	defer d.mu.Unlock()
	local, err := localAddrs()
	var routed []netip.Addr
	for _, ip := range addrs {
		if !local[ip] {
			routed = append(routed, ip)
		}
	}
	errs := []error{err, syncRoutes(family, routed)}
	for _, ip := range routed {
		local[ip] = true
	}
	for f, l := range d.listeners {
		if f.addr.Addr().Is4() == (family == v1.IPv4Protocol) && (routes[f] == nil || routes[f].refused) {
			l.sock.Close()
			l.update(nil)
			delete(d.listeners, f)
		}
	}
	d.sticky.reap(time.Now())
	for f, r := range routes {
		r.local, r.sticky = local, d.sticky
		if l := d.listeners[f]; l != nil && !r.refused {
			l.update(r)
		} else if !r.refused {
			errs = append(errs, d.listen(ctx, f, r))
		}
	}
	return errors.Join(errs...)
}

// listen opens the socket of f, free to bind an address that only a route
// makes local (IP_FREEBIND), and serves r on it.
func (d *DataPlane) listen(ctx context.Context, f frontend, r *route) error {
	lc := net.ListenConfig{Control: freebind}
	network := map[bool]string{true: "4", false: "6"}[f.addr.Addr().Is4()]
	l := &listener{flows: map[netip.AddrPort]*udpFlow{}}
	l.route.Store(r)
	if f.proto == v1.ProtocolTCP {
		ln, err := lc.Listen(ctx, "tcp"+network, f.addr.String())
		if err != nil {
			return fmt.Errorf("listening on %s/TCP: %w", f.addr, err)
		}
		l.sock = ln
		go l.serveTCP(ln)
	} else {
		pc, err := lc.ListenPacket(ctx, "udp"+network, f.addr.String())
		if err != nil {
			return fmt.Errorf("listening on %s/UDP: %w", f.addr, err)
		}
		l.sock = pc
		go l.serveUDP(pc.(*net.UDPConn))
	}
	d.listeners[f] = l
	return nil
}

func freebind(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) }); cerr != nil {
		return cerr
	}
	return err
}

// RequestFullSync does nothing: every Sync is a full one.
func (d *DataPlane) RequestFullSync() {}

// CheckState finds nothing missing: the sockets are the process's own.
func (d *DataPlane) CheckState(context.Context) (string, error) { return "", nil }

// Cleanup stops serving, as Close.
func (d *DataPlane) Cleanup(context.Context) error { return d.Close() }

// Close stops serving: every socket is closed and every route removed.
// Forwarded TCP connections finish on their own. A Sync after Close serves
// again.
func (d *DataPlane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for f, l := range d.listeners {
		l.sock.Close()
		l.update(nil)
		delete(d.listeners, f)
	}
	return errors.Join(syncRoutes(v1.IPv4Protocol, nil), syncRoutes(v1.IPv6Protocol, nil))
}

// frontends lists the TCP and UDP frontends of rs with their routes, and the
// addresses that must be local for the kernel to deliver them. Where Service
// ports share a frontend, its owner (ruleset.Ruleset.Owner) takes it.
func frontends(rs *ruleset.Ruleset) (map[frontend]*route, []netip.Addr) {
	routes, nodeIPs := map[frontend]*route{}, rs.Config().NodePortAddresses
	var addrs []netip.Addr
	for _, s := range rs.Services() {
		add := func(kind ruleset.FrontendKind, ip netip.Addr, port uint16) {
			f := frontend{netip.AddrPortFrom(ip, port), s.Name.Protocol}
			owned := ruleset.Frontend{Kind: kind, Addr: ip, Protocol: f.proto, Port: port}
			if kind == ruleset.KindNodePort {
				owned.Addr = netip.Addr{}
			}
			if !ip.IsValid() || (f.proto != v1.ProtocolTCP && f.proto != v1.ProtocolUDP) || !rs.Owns(s, owned) {
				return
			}
			refused := rs.Decide(s, kind, ruleset.Source{}).Verdict == ruleset.VerdictReject
			routes[f] = &route{rs: rs, svc: s, kind: kind, refused: refused}
			if kind != ruleset.KindNodePort {
				addrs = append(addrs, ip)
			}
		}
		add(ruleset.KindClusterIP, s.ClusterIP, s.Port)
		for _, ip := range s.ExternalIPs {
			add(ruleset.KindExternalIP, ip, s.Port)
		}
		for _, ip := range s.LoadBalancerIPs {
			add(ruleset.KindLoadBalancerIP, ip, s.Port)
		}
		for _, ip := range nodeIPs {
			if s.NodePort != 0 {
				add(ruleset.KindNodePort, ip, s.NodePort)
			}
		}
	}
	return routes, addrs
}

// syncRoutes makes the local routes of family that the data plane owns
// exactly those to want.
func syncRoutes(family v1.IPFamily, want []netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	nlFamily := map[v1.IPFamily]int{v1.IPv4Protocol: netlink.FAMILY_V4, v1.IPv6Protocol: netlink.FAMILY_V6}[family]
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, Protocol: routeProtocol}
	have, err := netlink.RouteListFiltered(nlFamily, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("listing the local routes: %w", err)
	}
	missing := map[netip.Addr]bool{}
	for _, ip := range want {
		missing[ip] = true
	}
	var errs []error
	for _, r := range have {
		if ip, _ := netip.AddrFromSlice(r.Dst.IP); missing[ip.Unmap()] {
			delete(missing, ip.Unmap())
		} else if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("removing the route to %s: %w", ip, err))
		}
	}
	for ip := range missing {
		r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: netlink.NewIPNet(ip.AsSlice()), Table: unix.RT_TABLE_LOCAL,
			Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST, Protocol: routeProtocol}
		if err := netlink.RouteAdd(r); err != nil {
			errs = append(errs, fmt.Errorf("adding a local route to %s: %w", ip, err))
		}
	}
	return errors.Join(errs...)
}

// localAddrs are the node's addresses. Traffic from them, or from the
// Service addresses that the data plane's routes make local, comes from the
// node; those that already are local need no route.
func localAddrs() (map[netip.Addr]bool, error) {
	local := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return local, fmt.Errorf("listing the node's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			local[p.Addr().Unmap()] = true
		}
	}
	return local, nil
}
