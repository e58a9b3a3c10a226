package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/state"
)

// kube-proxy's --nodeport-addresses keywords.
const (
	nodePortPrimary   = "primary"
	nodePortLocalhost = "localhost"
	nodePortAll       = "all"
)

// checkNodePortAddresses checks --nodeport-addresses (or the file's
// nodePortAddresses) as kube-proxy does: each value a CIDR or one of the
// keywords primary, localhost and all, a keyword at most once.
func checkNodePortAddresses(values []string) error {
	seen := map[string]bool{}
	for _, v := range values {
		switch v {
		case nodePortPrimary, nodePortLocalhost, nodePortAll:
			if seen[v] {
				return fmt.Errorf("%q given twice", v)
			}
			seen[v] = true
			continue
		}
		if _, err := netip.ParsePrefix(v); err != nil {
			return fmt.Errorf("%q must be a CIDR or one of the keywords primary, localhost, all", v)
		}
	}
	return nil
}

// expandNodePortAddresses expands the keywords of values (checked by
// checkNodePortAddresses) as kube-proxy does: primary is the node's primary
// address of each family (none for a family without one, or whose is
// loopback), localhost 127.0.0.0/8 and ::1/128, all 0.0.0.0/0 and ::/0.
func expandNodePortAddresses(values []string, primary map[v1.IPFamily]netip.Addr) []netip.Prefix {
	var expanded []netip.Prefix
	for _, v := range values {
		switch v {
		case nodePortPrimary:
			for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
				if a := primary[f]; a.IsValid() && !a.IsLoopback() {
					expanded = append(expanded, netip.PrefixFrom(a, a.BitLen()))
				}
			}
		case nodePortLocalhost:
			expanded = append(expanded, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
		case nodePortAll:
			expanded = append(expanded, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"))
		default:
			if p, err := netip.ParsePrefix(v); err == nil {
				expanded = append(expanded, p.Masked())
			}
		}
	}
	return expanded
}

// nodePortScope is where one IP family serves NodePorts, as kube-proxy
// derives it from its --nodeport-addresses: every local address (all), or
// the local addresses inside cidrs.
type nodePortScope struct {
	all   bool
	cidrs []netip.Prefix
	// ipv4Loopback reports that the CIDRs hold 127.0.0.0 (as 0.0.0.0/0
	// does): without it kube-proxy's iptables mode turns its localhost
	// NodePorts off.
	ipv4Loopback bool
}

// newNodePortScope is the scope of family given the expanded
// --nodeport-addresses: the CIDRs of other families are dropped, and a
// family left without any, or with a zero-length one, serves every local
// address.
func newNodePortScope(expanded []netip.Prefix, family v1.IPFamily) nodePortScope {
	is4 := family == v1.IPv4Protocol
	var s nodePortScope
	for _, p := range expanded {
		if p.Addr().Is4() != is4 {
			continue
		}
		if is4 && p.Contains(netip.AddrFrom4([4]byte{127})) {
			s.ipv4Loopback = true
		}
		if p.Bits() == 0 {
			return nodePortScope{all: true, ipv4Loopback: is4}
		}
		s.cidrs = append(s.cidrs, p)
	}
	if len(s.cidrs) == 0 {
		return nodePortScope{all: true, ipv4Loopback: is4}
	}
	return s
}

// addresses are the local addresses inside the scope's CIDRs, sorted, each
// once (kube-proxy's order is a map's); nil when it serves all.
func (s nodePortScope) addresses(local []netip.Addr) []netip.Addr {
	if s.all {
		return nil
	}
	var out []netip.Addr
	for _, a := range local {
		a = a.Unmap().WithZone("")
		if slices.ContainsFunc(s.cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// interfaceAddrs are the addresses of this host's interfaces, where
// kube-proxy looks for the NodePort addresses.
func interfaceAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses for --nodeport-addresses: %w", err)
	}
	var addrs []netip.Addr
	for _, a := range ifaddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			addrs = append(addrs, p.Addr())
		}
	}
	return addrs, nil
}

// nodePortAddressWarning is kube-proxy's warning about expanded
// --nodeport-addresses that leave NodePorts open on every local address of
// a family in use ("" when there is none): none, of the other family only,
// or (when the configuration is dual-stack) of the primary family only.
func nodePortAddressWarning(expanded []netip.Prefix, primary v1.IPFamily, dualStackConfig bool) string {
	if len(expanded) == 0 {
		return "nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`"
	}
	is4 := primary == v1.IPv4Protocol
	ofPrimary := 0
	for _, p := range expanded {
		if p.Addr().Is4() == is4 {
			ofPrimary++
		}
	}
	other := v1.IPv6Protocol
	if !is4 {
		other = v1.IPv4Protocol
	}
	switch {
	case dualStackConfig && ofPrimary == len(expanded):
		return fmt.Sprintf("cluster appears to be dual-stack but nodePortAddresses contains only %s addresses; NodePort connections will be accepted on all local %s IPs", primary, other)
	case ofPrimary == 0:
		return fmt.Sprintf("cluster appears to be %s-primary but nodePortAddresses contains only %s addresses; NodePort connections will be accepted on all local %s IPs", primary, other, primary)
	}
	return ""
}

// nodePorts are where one family serves NodePorts: on addrs, or on every
// local address (all), or nowhere (none: the CIDRs match no local
// address); localhost tells whether they are served on 127.0.0.0/8 too.
type nodePorts struct {
	addrs     []netip.Addr
	all, none bool
	localhost bool
}

// nodePortsOf decides where family serves NodePorts: on --node-ip's
// addresses when given (and 127.0.0.1 with localhost NodePorts); in a mode
// that is not kube-proxy's without --nodeport-addresses, on the Node's
// addresses; else as
// kube-proxy does with its --nodeport-addresses (Options.NodePortAddresses,
// whose default is the mode's): the primary address of the family is
// --bind-address when of the family, else the Node's first address of it;
// the CIDRs select among this host's interface addresses (with --dry-run,
// which need not run on the node, among the Node's addresses), and where
// they hold every address a mode that is not kube-proxy's gets them
// listed, loopback left out; localhost NodePorts (iptables, IPv4) need
// CIDRs that hold 127.0.0.0.
func (p *proxy) nodePortsOf(snap state.Snapshot, family v1.IPFamily) nodePorts {
	localhost := p.opts.LocalhostNodePorts && family == v1.IPv4Protocol
	if len(p.opts.NodeIPs) > 0 {
		np := nodePorts{localhost: localhost}
		for _, a := range p.opts.NodeIPs {
			if a.Is4() == (family == v1.IPv4Protocol) {
				np.addrs = append(np.addrs, a)
			}
		}
		if np.localhost {
			np.addrs = append(np.addrs, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
		}
		np.none = len(np.addrs) == 0
		return np
	}
	if len(p.opts.NodePortAddresses) == 0 && !isKubeProxyMode(p.mode.Name) {
		// No kube-proxy default to follow: the Node's addresses, as they
		// change (a data plane such as eBPF serves listed addresses only).
		np := nodePorts{localhost: localhost}
		for _, fam := range snap.Families() {
			if fam.IPFamily == family {
				np.addrs = fam.NodeAddresses
			}
		}
		np.none = len(np.addrs) == 0
		return np
	}
	scope := newNodePortScope(expandNodePortAddresses(p.opts.NodePortAddresses, p.primaryAddresses(snap)), family)
	listAll := scope.all && !isKubeProxyMode(p.mode.Name)
	if listAll {
		// A data plane that serves listed addresses only (eBPF) is given
		// every local address of the family but loopback (the first
		// address is what its north-south path masquerades to).
		every := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		if family == v1.IPv4Protocol {
			every = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		scope = nodePortScope{cidrs: []netip.Prefix{every}, ipv4Loopback: scope.ipv4Loopback}
	}
	np := nodePorts{all: scope.all, localhost: localhost && scope.ipv4Loopback}
	if scope.all {
		return np
	}
	local := p.localAddrs
	switch {
	case local != nil:
	case p.opts.DryRun:
		// Not on the node, perhaps: its addresses are its Node's.
		local = func() ([]netip.Addr, error) { return snap.NodeAddresses, nil }
	default:
		local = interfaceAddrs
	}
	addrs, err := local()
	if err != nil {
		p.log.Error("NodePorts served on none of the node's addresses", "err", err)
	}
	np.addrs = scope.addresses(addrs)
	if listAll {
		np.addrs = slices.DeleteFunc(np.addrs, netip.Addr.IsLoopback)
	}
	np.none = len(np.addrs) == 0
	return np
}

// primaryAddresses are the node's primary address of each family, as
// kube-proxy takes them: --bind-address when it is not unspecified, else
// the Node's first address of the family.
func (p *proxy) primaryAddresses(snap state.Snapshot) map[v1.IPFamily]netip.Addr {
	primary := map[v1.IPFamily]netip.Addr{}
	for _, fam := range snap.Families() {
		if len(fam.NodeAddresses) > 0 {
			primary[fam.IPFamily] = fam.NodeAddresses[0]
		}
	}
	if b := p.opts.BindAddress; b.IsValid() && !b.IsUnspecified() {
		f := v1.IPv6Protocol
		if b.Is4() {
			f = v1.IPv4Protocol
		}
		primary[f] = b
	}
	return primary
}

// warnNodePortAddresses logs kube-proxy's warning about NodePort addresses
// left open (nodePortAddressWarning), unless --node-ip lists them. The
// primary family is that of the node's first address (hints), as
// kube-proxy's.
func (p *proxy) warnNodePortAddresses(hints []netip.Addr) {
	if len(p.opts.NodeIPs) > 0 || len(p.opts.NodePortAddresses) == 0 && !isKubeProxyMode(p.mode.Name) {
		return
	}
	primary := map[v1.IPFamily]netip.Addr{}
	family := v1.IPv4Protocol
	for i, a := range hints {
		f := v1.IPv6Protocol
		if a.Is4() {
			f = v1.IPv4Protocol
		}
		if i == 0 {
			family = f
		}
		if _, ok := primary[f]; !ok {
			primary[f] = a
		}
	}
	expanded := expandNodePortAddresses(p.opts.NodePortAddresses, primary)
	dual := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is4() }) &&
			slices.ContainsFunc(ps, func(p netip.Prefix) bool { return !p.Addr().Is4() })
	}
	if w := nodePortAddressWarning(expanded, family, dual(p.opts.ClusterCIDRs) || dual(expanded)); w != "" {
		p.log.Warn(w)
	}
}

// isKubeProxyMode reports whether the proxy's mode is one of kube-proxy's,
// whose NodePort defaults it follows.
func isKubeProxyMode(name string) bool { return name == "iptables" || name == "nftables" }
