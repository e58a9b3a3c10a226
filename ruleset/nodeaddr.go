package ruleset

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
)

// NodeAddresses returns the InternalIP and ExternalIP addresses of n that
// NewBuilder accepts as Config.NodePortAddresses of one of families: unicast
// addresses without a zone, of one of the families. An IPv4-mapped IPv6
// address counts as the IPv4 address it holds. The addresses keep n's order,
// without duplicates.
//
// Every other InternalIP or ExternalIP address (unparsable text, a zone, an
// unspecified or multicast address, a family not in families) is skipped
// with a Warning naming n and the address, so that one bad address in a
// Node never stops a proxy. Other address types are ignored. A nil n gives
// nothing.
func NodeAddresses(n *v1.Node, families ...v1.IPFamily) ([]netip.Addr, []svcproxy.Warning) {
	if n == nil {
		return nil, nil
	}
	var addrs []netip.Addr
	var warnings []svcproxy.Warning
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP && a.Type != v1.NodeExternalIP {
			continue
		}
		ip, reason := nodeAddress(a.Address, families)
		if reason != "" {
			warnings = append(warnings, svcproxy.Warning{
				Kind: "Node", Name: n.Name,
				Reason: fmt.Sprintf("%s address %q %s: skipped", a.Type, a.Address, reason),
			})
			continue
		}
		if !slices.Contains(addrs, ip) {
			addrs = append(addrs, ip)
		}
	}
	return addrs, warnings
}

// nodeAddress parses one Node address, or says why it cannot serve
// NodePorts for families.
func nodeAddress(text string, families []v1.IPFamily) (netip.Addr, string) {
	ip, err := netip.ParseAddr(text)
	switch {
	case err != nil:
		return netip.Addr{}, "is not an IP address"
	case ip.Zone() != "":
		return netip.Addr{}, "has a zone"
	}
	ip = ip.Unmap()
	family := v1.IPv6Protocol
	if ip.Is4() {
		family = v1.IPv4Protocol
	}
	switch {
	case ip.IsUnspecified() || ip.IsMulticast():
		return netip.Addr{}, "is not a unicast address"
	case !slices.Contains(families, family):
		return netip.Addr{}, fmt.Sprintf("is %s, a family not served", family)
	}
	return ip, ""
}
