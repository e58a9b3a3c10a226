//go:build linux

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestLocalhostNodePorts: the iptables proxy serves NodePorts on 127.0.0.1
// by default (kube-proxy's --iptables-localhost-nodeports), and its localnet
// guard drops what route_localnet would otherwise let in: a connection from
// another host to a 127.0.0.0/8 address of the node that no DNAT
// translated. With the flag off, 127.0.0.1:<nodePort> is not served.
func TestLocalhostNodePorts(t *testing.T) {
	const nodeEchoPort = 9090
	objs := func(c *netns.Cluster) []any {
		return []any{
			service("np", ips(45), withNodePort(30085, false)),
			slice("np", false, v1.ProtocolTCP, ready(c, c.Pods[0])),
		}
	}
	t.Run("on", func(t *testing.T) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		if _, err := c.Node.StartEcho("node", nodeEchoPort); err != nil {
			t.Fatal(err)
		}
		metrics := netip.AddrPortFrom(c.Node.IPv4, 10249)
		startProxyWith(t, c, "iptables", proxySetup{args: []string{"--metrics-bind-address", metrics.String()}}, objs(c)...)
		expectOnly(t, spread(t, c.Node, at(netip.MustParseAddr("127.0.0.1"), 30085), 5), c.Pods[0])
		// kube-proxy's nfacct counter saw the 5 connections (their first
		// packets), and its metric says so; the other counter is there.
		scraped := scrape(t, c.Node.NS, "http://"+metrics.String()+"/metrics")
		for _, want := range []string{
			"\nkubeproxy_iptables_localhost_nodeports_accepted_packets_total 5\n",
			"\nkubeproxy_iptables_ct_state_invalid_dropped_packets_total ",
			// and kube-proxy's iptables-mode metrics with its labels
			"\nkubeproxy_sync_proxy_rules_iptables_total{ip_family=\"IPv4\",table=\"nat\"} ",
			"\nkubeproxy_sync_proxy_rules_iptables_last{ip_family=\"IPv6\",table=\"filter\"} ",
			"\nkubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"} 0\n",
			"\nkubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv6\"} ",
		} {
			if !strings.Contains(scraped, want) {
				t.Errorf("/metrics has no %q:\n%s", want, scraped)
			}
		}

		// The client sends to 127.0.0.5 through the node, as a host on
		// the node's link could.
		client := c.Clients[0]
		client.MustRun("ip", "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
		client.Sysctl("net.ipv4.conf.all.route_localnet", "1")
		client.Sysctl("net.ipv4.conf.eth0.route_localnet", "1")
		client.AddRoute(netip.MustParsePrefix("127.0.0.5/32"), netip.AddrFrom4([4]byte{198, 18, client.IPv4.As4()[2], 1}), "eth0")
		expectDropped(t, client, at(netip.MustParseAddr("127.0.0.5"), nodeEchoPort))
		// The node's own connection to it is not affected.
		if r := reach(t, c.Node, at(netip.MustParseAddr("127.0.0.5"), nodeEchoPort)); r.Identity != "node" {
			t.Errorf("the node reached %s on 127.0.0.5, want its own echo server", r.Identity)
		}
	})
	t.Run("off", func(t *testing.T) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		startProxyWith(t, c, "iptables", proxySetup{args: []string{"--iptables-localhost-nodeports=false"}}, objs(c)...)
		expectOnly(t, spread(t, c.Node, at(c.Node.IPv4, 30085), 3), c.Pods[0])
		expectRefused(t, c.Node, at(netip.MustParseAddr("127.0.0.1"), 30085))
	})
}

// scrape reads the /metrics at url from ns.
func scrape(t *testing.T, ns *netns.NS, url string) string {
	t.Helper()
	body, err := scrapeErr(ns, url)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// scrapeErr is scrape, returning its error.
func scrapeErr(ns *netns.NS, url string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, address string) (net.Conn, error) {
			remote, err := netip.ParseAddrPort(address)
			if err != nil {
				return nil, err
			}
			return ns.Dial("tcp", netip.AddrPort{}, remote, 5*time.Second)
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
