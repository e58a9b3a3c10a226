package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// routeProtocol marks the routes the data plane owns (their rtm_protocol):
// `ip route show table local proto 177` lists them.
const routeProtocol = 177

// DataPlane is the engine.Backend of both IP families: it serves the
// Rulesets given to Sync from user space (see the package doc). Node ports
// are served on Config.NodePortAddresses only: with none, on no address.
// Its methods must not be called concurrently.
type DataPlane struct {
	listeners map[ruleset.Frontend]*listener // by address, protocol and port (Kind 0)
	sticky    affinity.Table[servicemap.PortName]
}

// NewDataPlane returns a DataPlane that serves nothing yet, once it has
// removed the routes that one which died left behind.
func NewDataPlane() (*DataPlane, error) {
	d := &DataPlane{listeners: map[ruleset.Frontend]*listener{}}
	return d, d.Close()
}

// Sync serves rs, the desired state of one IP family, in place of what the
// last Sync of that family served: open TCP connections stay open; a UDP
// flow whose target rs no longer offers its client moves to a new target
// with its next datagram. A frontend that cannot be bound is reported;
// every other one is served. Every Sync is a full one.
func (d *DataPlane) Sync(ctx context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	routes, addrs := frontends(rs)
	local, err := syncRoutes(rs.Config().Family, addrs)
	errs := []error{err}
	d.sticky.Expire(time.Now())
	for f, l := range d.listeners {
		if f.Addr.Is4() == (rs.Config().Family == v1.IPv4Protocol) && (routes[f] == nil || routes[f].refused) {
			d.stop(f, l)
		}
	}
	for f, r := range routes {
		r.local, r.sticky = local, &d.sticky
		if l := d.listeners[f]; l != nil { // not refused: stopped above
			l.update(r)
		} else if !r.refused {
			errs = append(errs, d.listen(ctx, f, r))
		}
	}
	return svcproxy.SyncResult{Full: true}, errors.Join(errs...)
}

// listen opens the socket of f, free to bind an address that only a route
// makes local (IP_FREEBIND), and serves r on it.
func (d *DataPlane) listen(ctx context.Context, f ruleset.Frontend, r *route) error {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		return errors.Join(c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) }), err)
	}}
	l, addr := &listener{flows: map[netip.AddrPort]*net.UDPConn{}}, netip.AddrPortFrom(f.Addr, f.Port).String()
	l.route.Store(r)
	var err error
	if f.Protocol == v1.ProtocolTCP {
		l.sock, err = lc.Listen(ctx, "tcp", addr)
	} else {
		l.sock, err = lc.ListenPacket(ctx, "udp", addr)
	}
	if err != nil {
		return fmt.Errorf("listening on %s: %w", f, err)
	}
	if ln, ok := l.sock.(net.Listener); ok {
		go l.serveTCP(ln)
	} else {
		go l.serveUDP(l.sock.(*net.UDPConn))
	}
	d.listeners[f] = l
	return nil
}

// stop closes the socket of f and ends its UDP flows.
func (d *DataPlane) stop(f ruleset.Frontend, l *listener) {
	l.sock.Close()
	l.update(nil)
	delete(d.listeners, f)
}

// RequestFullSync does nothing: every Sync is a full one.
func (d *DataPlane) RequestFullSync() {}

// CheckState finds nothing missing: the sockets are the process's own.
func (d *DataPlane) CheckState(context.Context) (svcproxy.Drift, error) {
	return svcproxy.Drift{}, nil
}

// Cleanup stops serving, as Close.
func (d *DataPlane) Cleanup(context.Context) error { return d.Close() }

// Close stops serving: every socket is closed and every route removed.
// Forwarded TCP connections finish on their own. A Sync after Close serves
// again.
func (d *DataPlane) Close() error {
	for f, l := range d.listeners {
		d.stop(f, l)
	}
	_, err4 := syncRoutes(v1.IPv4Protocol, nil)
	_, err6 := syncRoutes(v1.IPv6Protocol, nil)
	return errors.Join(err4, err6)
}

// frontends lists the TCP and UDP frontends of rs to listen on (address,
// protocol and port; Kind 0) with their routes (the owner's, where Service
// ports share one), and the addresses that must be local for the kernel to
// deliver them. A frontend at the unspecified address (a load-balancer IP
// 0.0.0.0 or ::, which the API server accepts) is left out.
func frontends(rs *ruleset.Ruleset) (map[ruleset.Frontend]*route, []netip.Addr) {
	routes := map[ruleset.Frontend]*route{}
	var addrs []netip.Addr
	for _, sf := range rs.ServedFrontends() {
		if sf.Protocol != v1.ProtocolTCP && sf.Protocol != v1.ProtocolUDP {
			continue
		}
		if sf.Kind != ruleset.KindNodePort && sf.Addr.IsUnspecified() {
			continue // a socket there would take the port on every address
		}
		ips := rs.Config().NodePortAddresses
		if sf.Kind != ruleset.KindNodePort {
			ips, addrs = []netip.Addr{sf.Addr}, append(addrs, sf.Addr)
		}
		refused := rs.Decide(sf.Service, sf.Kind, ruleset.Client{}).Verdict == ruleset.VerdictReject
		for _, ip := range ips {
			routes[ruleset.Frontend{Addr: ip, Protocol: sf.Protocol, Port: sf.Port}] = &route{rs: rs, svc: sf.Service, kind: sf.Kind, refused: refused}
		}
	}
	return routes, addrs
}

// syncRoutes makes the local routes of family that the data plane owns
// exactly those to the addresses of want that are not the node's own
// already. It returns the addresses of family local to the node then: the
// node's and those of the routes, from which flows come from the node.
func syncRoutes(family v1.IPFamily, want []netip.Addr) (map[netip.Addr]bool, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("finding lo: %w", err)
	}
	nlFamily := map[v1.IPFamily]int{v1.IPv4Protocol: netlink.FAMILY_V4, v1.IPv6Protocol: netlink.FAMILY_V6}[family]
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL}
	have, err := netlink.RouteListFiltered(nlFamily, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
	if err != nil {
		return nil, fmt.Errorf("listing the local routes: %w", err)
	}
	local, owned := map[netip.Addr]bool{}, map[netip.Addr]netlink.Route{}
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		if ip, _ := netip.AddrFromSlice(r.Dst.IP); r.Protocol == routeProtocol {
			owned[ip.Unmap()] = r
		} else {
			local[ip.Unmap()] = true
		}
	}
	var errs []error
	for _, ip := range want {
		if _, ok := owned[ip]; ok && !local[ip] {
			delete(owned, ip) // kept
		} else if !local[ip] {
			r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: netlink.NewIPNet(ip.AsSlice()), Table: unix.RT_TABLE_LOCAL,
				Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST, Protocol: routeProtocol}
			if err := netlink.RouteAdd(r); err != nil {
				errs = append(errs, fmt.Errorf("adding a local route to %s: %w", ip, err))
			}
		}
		local[ip] = true
	}
	for ip, r := range owned {
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("removing the route to %s: %w", ip, err))
		}
	}
	return local, errors.Join(errs...)
}
