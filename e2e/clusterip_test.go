//go:build linux

package e2e

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestClusterIPSpread: a ClusterIP Service with three endpoints spreads
// connections from a client (PREROUTING) and from the node itself (OUTPUT)
// over all of them, uniformly; IPv4 and IPv6.
func TestClusterIPSpread(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, RemotePods: 1})
		c.StartEcho(echoPort)
		var eps []endpoint
		for _, pod := range c.Pods {
			eps = append(eps, ready(c, pod))
		}
		p := startProxy(t, c, backend,
			service("web", ips(10)),
			slice("web", false, v1.ProtocolTCP, eps...),
			slice("web", true, v1.ProtocolTCP, eps...))
		for _, ipv6 := range []bool{false, true} {
			addr := at(serviceIP(ipv6, 10), 80)
			expectUniform(t, spread(t, p.inside(c.Clients[0]), addr, 90), c.Pods...)
			expectUniform(t, spread(t, p.inside(c.Node), addr, 90), c.Pods...)
		}
	})
}

// TestNoEndpointsRefused: a Service without endpoints rejects connections at
// once rather than letting them time out, at its cluster IP and, from
// outside, at its node port, TCP and UDP (the ebpf backend's tc answers
// the SYN with a reset and the datagram with an ICMP port unreachable,
// where it would otherwise drop them; for the netfilter proxies the node,
// with no listener there, would refuse them too). IPv4 only: with IPv6 the kernel reports the ICMPv6 rejection of
// a first SYN only on the retransmission a second later (seen on kernel
// 6.18 with a plain nft reject too).
func TestNoEndpointsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		p := startProxy(t, c, backend, service("empty", ips(11), withNodePort(30011, false)),
			service("emptydns", ips(12), withProtocol(v1.ProtocolUDP), withNodePort(30012, false)))
		expectRefused(t, p.inside(c.Clients[0]), at(serviceIP(false, 11), 80))
		expectRefused(t, p.inside(c.Node), at(serviceIP(false, 11), 80))
		expectRefused(t, c.Clients[0], at(c.Node.IPv4, 30011))
		// A connected UDP socket from outside: kube-proxy's reject answers
		// with an ICMP port unreachable, so the socket reads ECONNREFUSED
		// (the ebpf backend's tc sends it).
		if r, err := c.Clients[0].UDP(at(c.Node.IPv4, 30012), connectTimeout); !errors.Is(err, netns.ErrRefused) {
			t.Errorf("UDP to a node port without endpoints: reply %+v, error %v; want refused (ICMP port unreachable)", r, err)
		}
	})
}

// TestEndpointConditions: not-ready endpoints never get traffic; when no
// endpoint is ready, serving terminating ones still serve; one ready
// endpoint among terminating ones takes everything.
func TestEndpointConditions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3})
		c.StartEcho(echoPort)
		p0, p1, p2 := c.Pods[0], c.Pods[1], c.Pods[2]
		objects := func() []any {
			return []any{
				service("notready", ips(20)),
				slice("notready", false, v1.ProtocolTCP, ready(c, p0), ready(c, p1).notReady()),
				service("terminating", ips(21)),
				slice("terminating", false, v1.ProtocolTCP, ready(c, p0).terminatingServing(), ready(c, p1).terminatingServing(), ready(c, p2).terminatingServing().notReady()),
				service("mixed", ips(22)),
				slice("mixed", false, v1.ProtocolTCP, ready(c, p0).terminatingServing(), ready(c, p1), ready(c, p2).terminatingServing()),
			}
		}
		p := startProxy(t, c, backend, objects()...)
		client := p.inside(c.Clients[0])
		expectOnly(t, spread(t, client, at(serviceIP(false, 20), 80), 30), p0)
		expectUniform(t, spread(t, client, at(serviceIP(false, 21), 80), 90), p0, p1)
		expectOnly(t, spread(t, client, at(serviceIP(false, 22), 80), 30), p1)
	})
}

// TestInternalTrafficPolicyLocal: traffic from the node goes only to the
// node's own endpoints; with endpoints only on other nodes it reaches no pod.
func TestInternalTrafficPolicyLocal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 2})
		c.StartEcho(echoPort)
		local, remote1, remote2 := c.Pods[0], c.Pods[1], c.Pods[2]
		p := startProxy(t, c, backend,
			service("local", ips(30), withInternalLocal()),
			slice("local", false, v1.ProtocolTCP, ready(c, local), ready(c, remote1), ready(c, remote2)),
			service("elsewhere", ips(31), withInternalLocal()),
			slice("elsewhere", false, v1.ProtocolTCP, ready(c, remote1), ready(c, remote2)))
		node, client := p.inside(c.Node), p.inside(c.Clients[0])
		expectOnly(t, spread(t, node, at(serviceIP(false, 30), 80), 30), local)
		expectOnly(t, spread(t, client, at(serviceIP(false, 30), 80), 30), local)
		p.expectDropped(node, at(serviceIP(false, 31), 80))
		p.expectDropped(client, at(serviceIP(false, 31), 80))
	})
}

// TestUnallocatedServiceIPDropped: with --service-cluster-ip-range, the
// nftables proxy, in both layouts, drops new connections to an address of
// the range that is no cluster IP, as kube-proxy's nftables mode does, with
// its rule in cluster-ips-check; without the flag there is no such rule.
func TestUnallocatedServiceIPDropped(t *testing.T) {
	const rule = `"Drop traffic to unallocated ClusterIPs"`
	objs := func(c *netns.Cluster) []any {
		return []any{service("web", ips(46)), slice("web", false, v1.ProtocolTCP, ready(c, c.Pods[0]))}
	}
	for _, backend := range nftablesBackends {
		t.Run(backend+"/with the range", func(t *testing.T) {
			c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
			c.StartEcho(echoPort)
			p := startProxyWith(t, c, backend, proxySetup{args: []string{"--service-cluster-ip-range", "198.19.0.0/16,2001:db8:19::/108"}}, objs(c)...)
			expectOnly(t, spread(t, c.Clients[0], at(serviceIP(false, 46), 80), 3), c.Pods[0])
			expectDropped(t, c.Clients[0], at(serviceIP(false, 250), 80))
			expectDropped(t, c.Node, at(serviceIP(false, 250), 80))
			if state := p.kernelState(); strings.Count(state, rule) != 2 {
				t.Errorf("want the rule %s in the ip and ip6 tables:\n%s", rule, state)
			}
		})
		t.Run(backend+"/without", func(t *testing.T) {
			c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
			c.StartEcho(echoPort)
			p := startProxy(t, c, backend, objs(c)...)
			if state := p.kernelState(); strings.Contains(state, rule) {
				t.Errorf("rule %s without --service-cluster-ip-range:\n%s", rule, state)
			}
		})
	}
}
