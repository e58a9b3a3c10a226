//go:build linux

package e2e

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestHealthCheckNodePortsHold: the health check node ports of one proxy
// (the behaviour is the healthcheck package's, the same for every
// backend): one another socket holds is logged and served at the first
// sync after it is freed; of two Services with one port, the first in name
// order gets it and the other is warned about; one that is another
// Service's nodePort is not served, with a warning; and with no usable
// node address they answer on every address, as kube-proxy's do.
func TestHealthCheckNodePortsHold(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	local := ready(c, c.Pods[0])
	var busy net.Listener
	if err := c.Node.Do(func() (err error) {
		busy, err = net.Listen("tcp", at(c.Node.IPv4, 30293).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := startProxyWith(t, c, "iptables", proxySetup{node: nodeWithAddresses(), noNodeIP: true, args: []string{"--sync-period", "1s"}},
		service("busy", ips(93), withLoadBalancer(serviceIP(false, 193), nil, 30293), withNodePort(30193, true)),
		slice("busy", false, v1.ProtocolTCP, local),
		service("b", ips(94), withLoadBalancer(serviceIP(false, 194), nil, 30294), withNodePort(30194, true)),
		slice("b", false, v1.ProtocolTCP),
		service("a", ips(95), withLoadBalancer(serviceIP(false, 195), nil, 30294), withNodePort(30195, true)),
		slice("a", false, v1.ProtocolTCP, local),
		service("onnodeport", ips(96), withLoadBalancer(serviceIP(false, 196), nil, 30195), withNodePort(30196, true)),
		slice("onnodeport", false, v1.ProtocolTCP, local))
	client := c.Clients[0]
	expectLogged(t, p,
		"health check node port not served",
		"Service e2e/b: healthCheckNodePort 30294 is also Service e2e/a's, which comes first: not served for this one",
		"Service e2e/onnodeport: healthCheckNodePort 30195 is the nodePort of Service e2e/a: not served")
	// No node address: every address, the node's and its link's.
	for _, addr := range []netip.AddrPort{at(c.Node.IPv4, 30294), at(linkAddr(client), 30294)} {
		if code, body := healthCheck(t, client, addr); code != 200 || body.LocalEndpoints != 1 {
			t.Errorf("health check node port %s (e2e/a's): %d with %d local endpoints, want 200 with 1", addr, code, body.LocalEndpoints)
		}
	}
	busy.Close()
	waitFor(t, "the freed port served", func() (bool, string) {
		conn, err := client.Dial("tcp", netip.AddrPort{}, at(c.Node.IPv4, 30293), time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	if code, body := healthCheck(t, client, at(c.Node.IPv4, 30293)); code != 200 || body.LocalEndpoints != 1 {
		t.Errorf("health check node port 30293 once freed: %d with %d local endpoints, want 200 with 1", code, body.LocalEndpoints)
	}
	if n := strings.Count(p.log.String(), "Service e2e/b: healthCheckNodePort 30294"); n != 1 {
		t.Errorf("the conflict of e2e/b was warned about %d times, want once", n)
	}
}
