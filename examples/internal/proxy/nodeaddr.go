package proxy

import (
	"net"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/state"
)

// familyHints are the addresses that tell which IP families the node has:
// its known addresses, else the global unicast addresses of this host's
// interfaces.
func familyHints(nodeIPs []netip.Addr) []netip.Addr {
	if len(nodeIPs) > 0 {
		return nodeIPs
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var addrs []netip.Addr
	for _, a := range ifaddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
			addrs = append(addrs, p.Addr())
		}
	}
	return addrs
}

// nodeAddresses are the usable addresses of either family of the named
// Node, to tell which families the node has. The State warns about the
// others.
func nodeAddresses(nodes []*v1.Node, name string) []netip.Addr {
	var addrs []netip.Addr
	for _, n := range nodes {
		if n.Name == name {
			addrs, _ = ruleset.NodeAddresses(n, v1.IPv4Protocol, v1.IPv6Protocol)
		}
	}
	return addrs
}

// nodePortAddresses are the addresses on which NodePorts and health check
// node ports are served: --node-ip, else the Node's addresses.
func (p *proxy) nodePortAddresses(snap state.Snapshot) []netip.Addr {
	if len(p.opts.NodeIPs) > 0 {
		return p.opts.NodeIPs
	}
	return snap.NodeAddresses
}
