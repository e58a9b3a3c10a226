//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// nodeAddrs are the addresses a pod sees when the node masquerades: the
// node's address on any of its links.
func isNodeAddr(c *netns.Cluster, a netip.Addr) bool {
	if a == c.Node.IPv4 || a == c.Node.IPv6 {
		return true
	}
	for _, h := range append(append([]*netns.Host{}, c.Pods...), c.Clients...) {
		if h.Node == c.Node && a.Is4() && a.As4()[2] == h.IPv4.As4()[2] && a.As4()[3] == 1 {
			return true
		}
	}
	return false
}

// TestNodePortClusterPolicy: a NodePort with externalTrafficPolicy Cluster
// reaches endpoints on every node, and pods see the node's address.
func TestNodePortClusterPolicy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 1})
		c.StartEcho(echoPort)
		startProxy(t, c, backend,
			service("np", ips(40), withNodePort(30080, false)),
			slice("np", false, v1.ProtocolTCP, ready(c, c.Pods[0]), ready(c, c.Pods[1])))
		addr := at(c.Node.IPv4, 30080)
		expectUniform(t, spread(t, c.Clients[0], addr, 90), c.Pods...)
		for range 10 {
			r := reach(t, c.Clients[0], addr)
			if !isNodeAddr(c, r.Source.Addr()) {
				t.Fatalf("%s saw source %s, want the node's address (masquerade)", r.Identity, r.Source)
			}
		}
	})
}

// TestNodePortLocalPolicy: a LoadBalancer with externalTrafficPolicy Local
// sends NodePort traffic only to local endpoints, keeps the client's address,
// drops it when the node has no local endpoint, and its healthCheckNodePort
// answers 200 or 503 accordingly.
func TestNodePortLocalPolicy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 1})
		c.StartEcho(echoPort)
		local, remote := c.Pods[0], c.Pods[1]
		p := startProxy(t, c, backend,
			service("withlocal", ips(41), withLoadBalancer(serviceIP(false, 141), nil, 30241), withNodePort(30081, true)),
			slice("withlocal", false, v1.ProtocolTCP, ready(c, local), ready(c, remote)),
			service("nolocal", ips(42), withLoadBalancer(serviceIP(false, 142), nil, 30242), withNodePort(30082, true)),
			slice("nolocal", false, v1.ProtocolTCP, ready(c, remote)))
		client := c.Clients[0]
		counts := spread(t, client, at(c.Node.IPv4, 30081), 20)
		expectOnly(t, counts, local)
		if r := reach(t, client, at(c.Node.IPv4, 30081)); r.Source.Addr() != client.IPv4 {
			t.Errorf("pod saw source %s, want the client's %s (eTP Local keeps it)", r.Source, client.IPv4)
		}
		expectDropped(t, client, at(c.Node.IPv4, 30082))
		// Cluster IP traffic is not subject to the external policy.
		expectOnly(t, spread(t, p.inside(client), at(serviceIP(false, 42), 80), 10), remote)

		for port, want := range map[uint16]struct{ code, local int }{30241: {200, 1}, 30242: {503, 0}} {
			code, body := healthCheck(t, client, at(c.Node.IPv4, port))
			if code != want.code || body.LocalEndpoints != want.local {
				t.Errorf("health check node port %d: %d with %d local endpoints, want %d with %d", port, code, body.LocalEndpoints, want.code, want.local)
			}
		}
	})
}

// TestLocalPolicyShortCircuitFromNode: a process on the node reaches the
// load-balancer IP and the external IP of externalTrafficPolicy Local
// Services with no endpoint on this node: kube-proxy short-circuits the
// node's own traffic to the cluster endpoints (and masquerades it), while a
// client from outside is dropped.
func TestLocalPolicyShortCircuitFromNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 1})
		c.StartEcho(echoPort)
		remote := c.Pods[1]
		lbIP, extIP := serviceIP(false, 143), serviceIP(false, 144)
		p := startProxy(t, c, backend,
			service("lblocal", ips(43), withLoadBalancer(lbIP, nil, 30243), withNodePort(30083, true)),
			slice("lblocal", false, v1.ProtocolTCP, ready(c, remote)),
			service("extlocal", ips(44), withExternalIPs(extIP), withNodePort(30084, true)),
			slice("extlocal", false, v1.ProtocolTCP, ready(c, remote)))
		for _, addr := range []netip.AddrPort{at(lbIP, 80), at(extIP, 80)} {
			expectOnly(t, spread(t, p.inside(c.Node), addr, 5), remote)
			if r := reach(t, p.inside(c.Node), addr); !isNodeAddr(c, r.Source.Addr()) {
				t.Errorf("%s from the node: the pod saw %s, want the node's address (masquerade)", addr, r.Source)
			}
			expectDropped(t, c.Clients[0], addr)
		}
	})
}

type healthBody struct{ LocalEndpoints int }

// healthCheck queries a health check node port from the client's
// namespace, over a connection dialed there (an http.Client would dial from
// another thread, outside the namespace).
func healthCheck(t *testing.T, client *netns.Host, addr netip.AddrPort) (int, healthBody) {
	t.Helper()
	conn, err := client.Dial("tcp", netip.AddrPort{}, addr, connectTimeout)
	if err != nil {
		t.Fatalf("health check %s: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(connectTimeout))
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/healthz", addr), nil)
	req.Close = true
	if err := req.Write(conn); err != nil {
		t.Fatalf("health check %s: %v", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("health check %s: %v", addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("health check %s: %v", addr, err)
	}
	var body healthBody
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("health check %s: %d %q: %v", addr, resp.StatusCode, data, err)
	}
	return resp.StatusCode, body
}

// TestLoadBalancerSourceRanges: traffic to a load-balancer IP and an
// external IP from an allowed client gets through; another client is
// dropped.
func TestLoadBalancerSourceRanges(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 2})
		c.StartEcho(echoPort)
		allowed, other := c.Clients[0], c.Clients[1]
		lbIP, extIP := serviceIP(false, 150), serviceIP(false, 151)
		startProxy(t, c, backend,
			service("lb", ips(50), withLoadBalancer(lbIP, []string{allowed.IPv4.String() + "/32"}, 0), withNodePort(30090, false)),
			slice("lb", false, v1.ProtocolTCP, ready(c, c.Pods[0]), ready(c, c.Pods[1])),
			service("ext", ips(51), withExternalIPs(extIP)),
			slice("ext", false, v1.ProtocolTCP, ready(c, c.Pods[0]), ready(c, c.Pods[1])))
		expectUniform(t, spread(t, allowed, at(lbIP, 80), 90), c.Pods...)
		expectDropped(t, other, at(lbIP, 80))
		expectUniform(t, spread(t, other, at(extIP, 80), 90), c.Pods...)
	})
}

// TestSessionAffinity: with ClientIP affinity, many connections from one
// client land on one pod, and the other client's land on one pod too.
func TestSessionAffinity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3, Clients: 2})
		c.StartEcho(echoPort)
		var eps []endpoint
		for _, p := range c.Pods {
			eps = append(eps, ready(c, p))
		}
		p := startProxy(t, c, backend,
			service("sticky", ips(60), withAffinity(600)),
			slice("sticky", false, v1.ProtocolTCP, eps...))
		for _, client := range c.Clients {
			counts := spread(t, p.inside(client), at(serviceIP(false, 60), 80), 30)
			if len(counts) != 1 {
				t.Errorf("%s: 30 connections reached %v, want one pod", client.Label, counts)
			}
		}
	})
}
