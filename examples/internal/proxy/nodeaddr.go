package proxy

import (
	"net"
	"net/netip"
	"slices"

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

// healthCheckAddresses are the addresses on which the health check node
// ports listen: those of the NodePorts (nodePortsOf) of each family, and
// for a family that serves NodePorts on every local address, the
// unspecified address (:: alone when both families do: it takes both).
func (p *proxy) healthCheckAddresses(snap state.Snapshot) []netip.Addr {
	var addrs []netip.Addr
	var all []v1.IPFamily
	for _, fam := range snap.Families() {
		np := p.nodePortsOf(snap, fam.IPFamily)
		if np.all {
			all = append(all, fam.IPFamily)
		}
		addrs = append(addrs, np.addrs...)
	}
	switch {
	case slices.Contains(all, v1.IPv6Protocol):
		addrs = append(addrs, netip.IPv6Unspecified())
	case len(all) > 0:
		addrs = append(addrs, netip.IPv4Unspecified())
	}
	return addrs
}
