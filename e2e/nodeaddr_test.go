//go:build linux

package e2e

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// linkAddr is the node's own address on the link to h (a client or a local
// pod): an address of the node that is not one of its Node addresses.
func linkAddr(h *netns.Host) netip.Addr {
	a := h.IPv4.As4()
	a[3] = 1
	return netip.AddrFrom4(a)
}

// nodeWithAddresses is the proxy's Node with the given InternalIP addresses.
func nodeWithAddresses(addrs ...string) *v1.Node {
	n := nodeObject()
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	return n
}

// expectLogged checks that the proxy logged each of lines.
func expectLogged(t *testing.T, p *proxy, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(p.log.String(), l) {
			t.Errorf("%s-proxy did not log %q", p.backend, l)
		}
	}
}

// TestZonedNodeAddressIsSkipped: a Node whose addresses include a zoned IPv6
// one and a non-address, with --nodeport-addresses primary, still gets
// every Service served, NodePorts on its good addresses (and not on the
// node's other addresses), and a warning for each bad address.
func TestZonedNodeAddressIsSkipped(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2})
		c.StartEcho(echoPort)
		node := nodeWithAddresses("fe80::1%eth0", c.Node.IPv4.String(), "not-an-address", c.Node.IPv6.String())
		eps := []endpoint{ready(c, c.Pods[0]), ready(c, c.Pods[1])}
		p := startProxyWith(t, c, backend, proxySetup{node: node, noNodeIP: true, args: []string{"--nodeport-addresses", "primary"}},
			service("web", ips(70), withNodePort(30170, false)),
			slice("web", false, v1.ProtocolTCP, eps...),
			slice("web", true, v1.ProtocolTCP, eps...))
		client := p.inside(c.Clients[0])
		for _, addr := range []netip.AddrPort{
			at(serviceIP(false, 70), 80), at(serviceIP(true, 70), 80),
			at(c.Node.IPv4, 30170), at(c.Node.IPv6, 30170),
		} {
			// Both pods, each taking a connection with probability ½:
			// 40 connections miss one with probability 2⁻³⁹ (10 would,
			// with 2⁻⁹).
			expectOnly(t, spread(t, client, addr, 40), c.Pods...)
		}
		expectRefused(t, client, at(linkAddr(c.Clients[0]), 30170))
		expectLogged(t, p,
			`Node node-a: InternalIP address \"fe80::1%eth0\" has a zone: skipped`,
			`Node node-a: InternalIP address \"not-an-address\" is not an IP address: skipped`)
	})
}

// TestHealthCheckNodePortOnNodeAddresses: a health check node port answers
// on the node's addresses only, and one outside the NodePort range is not
// served at all, with a warning naming its Service.
func TestHealthCheckNodePortOnNodeAddresses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		local := ready(c, c.Pods[0])
		p := startProxy(t, c, backend,
			service("ok", ips(71), withLoadBalancer(serviceIP(false, 171), nil, 30271), withNodePort(30171, true)),
			slice("ok", false, v1.ProtocolTCP, local),
			service("ssh", ips(72), withLoadBalancer(serviceIP(false, 172), nil, 22), withNodePort(30172, true)),
			slice("ssh", false, v1.ProtocolTCP, local))
		client := c.Clients[0]
		if code, body := healthCheck(t, client, at(c.Node.IPv4, 30271)); code != 200 || body.LocalEndpoints != 1 {
			t.Errorf("health check node port on the node's address: %d with %d local endpoints, want 200 with 1", code, body.LocalEndpoints)
		}
		expectRefused(t, client, at(linkAddr(client), 30271))
		expectRefused(t, client, at(c.Node.IPv4, 22))
		expectLogged(t, p, "Service e2e/ssh: healthCheckNodePort 22 is outside the NodePort range 30000-32767: not served")
	})
}

// TestAllowedExternalIPs: a Service whose externalIP is the node's own
// address captures the node's port 80; with --allowed-external-ips that
// does not include it, it is not served and a warning names the Service.
func TestAllowedExternalIPs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		for _, tt := range []struct {
			name     string
			args     []string
			captured bool
		}{
			{"unrestricted", nil, true},
			{"restricted", []string{"--allowed-external-ips", serviceIP(false, 0).String() + "/24"}, false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
				c.StartEcho(echoPort)
				p := startProxyWith(t, c, backend, proxySetup{args: tt.args},
					service("capture", ips(73), withExternalIPs(c.Node.IPv4)),
					slice("capture", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
				client := c.Clients[0]
				warning := "Service e2e/capture: externalIP " + c.Node.IPv4.String() + " is not allowed: not served"
				if tt.captured {
					expectOnly(t, spread(t, client, at(c.Node.IPv4, 80), 5), c.Pods[0])
					if strings.Contains(p.log.String(), warning) {
						t.Errorf("unrestricted, yet %q was logged", warning)
					}
					return
				}
				expectRefused(t, client, at(c.Node.IPv4, 80))
				expectLogged(t, p, warning)
				expectOnly(t, spread(t, p.inside(client), at(serviceIP(false, 73), 80), 5), c.Pods[0])
			})
		}
	})
}

// TestNodePortAddressesAsKubeProxy: without --node-ip, NodePorts are served
// where kube-proxy would serve them: on every local address by default in
// iptables mode (the node's link address too), on the Node's primary
// addresses by default in nftables mode, and nowhere when
// --nodeport-addresses holds none of the node's addresses.
func TestNodePortAddressesAsKubeProxy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		for _, tt := range []struct {
			name       string
			args       []string
			node, link bool
		}{
			{name: "default", node: true, link: strings.HasPrefix(backend, "iptables")},
			{name: "all", args: []string{"--nodeport-addresses", "all"}, node: true, link: true},
			{name: "no address of the node", args: []string{"--nodeport-addresses", "203.0.113.0/24,2001:db8:ffff::/64"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
				c.StartEcho(echoPort)
				eps := []endpoint{ready(c, c.Pods[0])}
				startProxyWith(t, c, backend, proxySetup{node: nodeWithAddresses(c.Node.IPv4.String(), c.Node.IPv6.String()), noNodeIP: true, args: tt.args},
					service("web", ips(71), withNodePort(30171, false)),
					slice("web", false, v1.ProtocolTCP, eps...))
				client := c.Clients[0]
				for _, dst := range []struct {
					addr   netip.AddrPort
					served bool
				}{{at(c.Node.IPv4, 30171), tt.node}, {at(linkAddr(client), 30171), tt.link}} {
					if dst.served {
						expectOnly(t, spread(t, client, dst.addr, 3), c.Pods[0])
					} else {
						expectRefused(t, client, dst.addr)
					}
				}
			})
		}
	})
}
