//go:build linux

package e2e

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// The userspace proxy (examples/userspace-proxy) forwards from sockets, not
// from netfilter rules; these tests run it in the same cluster shape as the
// reference proxies.

// startUserspace writes objs as manifests and runs the userspace proxy on
// the cluster's node, and waits for its first sync.
func startUserspace(t *testing.T, c *netns.Cluster, objs ...any) *proxy {
	t.Helper()
	p := &proxy{t: t, backend: "userspace", node: c.Node, dir: t.TempDir(), log: &logBuffer{}, nodeObj: nodeObject()}
	p.write(objs...)
	cmd := c.Node.Command(context.Background(), proxyBinary(t, "userspace"),
		"--manifests", p.dir,
		"--node-name", nodeName,
		"--cluster-cidr", netns.PodCIDR4.String()+","+netns.PodCIDR6.String(),
		"--node-ip", c.Node.IPv4.String()+","+c.Node.IPv6.String())
	cmd.Stdout, cmd.Stderr = p.log, p.log
	proc, err := c.Node.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if strings.Contains(p.log.String(), "DATA RACE") { // built with GOFLAGS=-race
			t.Error("the race detector reported a data race in userspace-proxy")
		}
		if t.Failed() {
			t.Logf("userspace-proxy output:\n%s", p.log.String())
		}
	})
	p.waitSyncs(1)
	return p
}

// spreadUDP sends n datagrams from d to addr, each from a new source port
// (a new flow), and counts, per pod, the flows it answered.
func spreadUDP(t *testing.T, d dialer, addr netip.AddrPort, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := range n {
		r, err := d.UDP(addr, connectTimeout)
		if err != nil {
			t.Fatalf("flow %d of %d to %s: %v (reached so far: %v)", i+1, n, addr, err, counts)
		}
		counts[r.Identity]++
	}
	return counts
}

// TestUserspaceSpread: TCP connections and UDP flows to a cluster IP, from a
// client and from the node, and to a node port, are spread uniformly over
// every endpoint, IPv4 and IPv6; pods see the node's address (a proxy
// always masquerades).
func TestUserspaceSpread(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, RemotePods: 1})
	c.StartEcho(echoPort)
	var eps []endpoint
	for _, pod := range c.Pods {
		eps = append(eps, ready(c, pod))
	}
	startUserspace(t, c,
		service("web", ips(110), withNodePort(30110, false)),
		slice("web", false, v1.ProtocolTCP, eps...), slice("web", true, v1.ProtocolTCP, eps...),
		service("dns", ips(111), withProtocol(v1.ProtocolUDP)),
		slice("dns", false, v1.ProtocolUDP, eps...), slice("dns", true, v1.ProtocolUDP, eps...))
	client := c.Clients[0]
	for _, ipv6 := range []bool{false, true} {
		expectUniform(t, spread(t, client, at(serviceIP(ipv6, 110), 80), 90), c.Pods...)
		expectUniform(t, spread(t, c.Node, at(serviceIP(ipv6, 110), 80), 90), c.Pods...)
		expectUniform(t, spread(t, client, at(c.Node.IP(ipv6), 30110), 90), c.Pods...)
		expectUniform(t, spreadUDP(t, client, at(serviceIP(ipv6, 111), 80), 90), c.Pods...)
		expectUniform(t, spreadUDP(t, c.Node, at(serviceIP(ipv6, 111), 80), 90), c.Pods...)
		if r := reach(t, client, at(serviceIP(ipv6, 110), 80)); r.Source.Addr() == client.IP(ipv6) || !r.Source.IsValid() {
			t.Errorf("%s saw the client's own address %s: want the proxy's", r.Identity, r.Source)
		}
	}
}

// TestUserspaceReject: a Service without endpoints has no socket, so the
// kernel refuses TCP connections at once with a reset and UDP datagrams
// with ICMP port unreachable; a Service that gets endpoints is served.
func TestUserspaceReject(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	tcp, udp := service("empty", ips(112)), service("emptydns", ips(113), withProtocol(v1.ProtocolUDP))
	p := startUserspace(t, c, tcp, udp)
	for _, ipv6 := range []bool{false, true} {
		expectRefused(t, c.Clients[0], at(serviceIP(ipv6, 112), 80))
		expectRefused(t, c.Node, at(serviceIP(ipv6, 112), 80))
		if r, err := c.Clients[0].UDP(at(serviceIP(ipv6, 113), 80), connectTimeout); !errors.Is(err, netns.ErrRefused) {
			t.Errorf("UDP to a Service without endpoints: reply %+v, error %v; want refused (ICMP port unreachable)", r, err)
		}
	}
	p.update(tcp, slice("empty", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
	expectOnly(t, spread(t, c.Clients[0], at(serviceIP(false, 112), 80), 5), c.Pods[0])
}

// TestUserspaceLocalPolicy: externalTrafficPolicy Local sends external
// traffic from outside only to the node's endpoints, or drops it when the
// node has none, while traffic from the node goes to every endpoint;
// internalTrafficPolicy Local keeps cluster-IP traffic on the node.
func TestUserspaceLocalPolicy(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 1})
	c.StartEcho(echoPort)
	local, remote := c.Pods[0], c.Pods[1]
	startUserspace(t, c,
		service("withlocal", ips(114), withLoadBalancer(serviceIP(false, 214), nil, 0), withNodePort(30114, true)),
		slice("withlocal", false, v1.ProtocolTCP, ready(c, local), ready(c, remote)),
		service("nolocal", ips(115), withNodePort(30115, true), withProtocol(v1.ProtocolUDP)),
		slice("nolocal", false, v1.ProtocolUDP, ready(c, remote)),
		service("internal", ips(116), withInternalLocal()),
		slice("internal", false, v1.ProtocolTCP, ready(c, local), ready(c, remote)))
	client := c.Clients[0]
	expectOnly(t, spread(t, client, at(c.Node.IPv4, 30114), 20), local)
	expectOnly(t, spread(t, client, at(serviceIP(false, 214), 80), 20), local)
	expectUniform(t, spread(t, c.Node, at(c.Node.IPv4, 30114), 60), local, remote)
	if r, err := client.UDP(at(c.Node.IPv4, 30115), dropTimeout); !errors.Is(err, netns.ErrTimeout) {
		t.Errorf("UDP from outside to a Local node port without local endpoints: reply %+v, error %v; want it dropped", r, err)
	}
	expectOnly(t, spreadUDP(t, c.Node, at(c.Node.IPv4, 30115), 5), remote)
	expectOnly(t, spread(t, client, at(serviceIP(false, 116), 80), 20), local)
}

// TestUserspaceLocalPolicyDropsTCP: a TCP connection from outside to a Local
// node port without local endpoints gets no answer.
func TestUserspaceLocalPolicyDropsTCP(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 1})
	c.StartEcho(echoPort)
	startUserspace(t, c,
		service("nolocal", ips(117), withNodePort(30117, true)),
		slice("nolocal", false, v1.ProtocolTCP, ready(c, c.Pods[1])))
	expectDropped(t, c.Clients[0], at(c.Node.IPv4, 30117))
	expectOnly(t, spread(t, c.Clients[0], at(serviceIP(false, 117), 80), 5), c.Pods[1])
}

// TestUserspaceExternalAddresses: externalIPs are served, one of them an
// address the node already has (no route needed); a load-balancer IP with
// source ranges serves the clients inside them and drops the others.
func TestUserspaceExternalAddresses(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 2})
	c.StartEcho(echoPort)
	eps := []endpoint{ready(c, c.Pods[0]), ready(c, c.Pods[1])}
	ext := service("ext", ips(127), withExternalIPs(serviceIP(false, 227), c.Node.IPv4))
	ext.Spec.Ports[0].Port = 8127
	inside, outside := c.Clients[0], c.Clients[1]
	startUserspace(t, c,
		ext, slice("ext", false, v1.ProtocolTCP, eps...),
		service("lb", ips(128), withLoadBalancer(serviceIP(false, 228), []string{netip.PrefixFrom(inside.IPv4, 32).String()}, 0)),
		slice("lb", false, v1.ProtocolTCP, eps...))
	expectUniform(t, spread(t, outside, at(serviceIP(false, 227), 8127), 60), c.Pods...)
	expectUniform(t, spread(t, outside, at(c.Node.IPv4, 8127), 60), c.Pods...)
	expectUniform(t, spread(t, inside, at(serviceIP(false, 228), 80), 60), c.Pods...)
	expectDropped(t, outside, at(serviceIP(false, 228), 80))
}

// TestUserspaceAffinity: with ClientIP affinity, every connection and flow
// of a client goes to one endpoint while it keeps coming within the
// timeout; after the timeout it is picked anew.
func TestUserspaceAffinity(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3, Clients: 2})
	c.StartEcho(echoPort)
	var eps []endpoint
	for _, pod := range c.Pods {
		eps = append(eps, ready(c, pod))
	}
	startUserspace(t, c,
		service("sticky", ips(118), withAffinity(1)),
		slice("sticky", false, v1.ProtocolTCP, eps...),
		service("stickydns", ips(119), withAffinity(60), withProtocol(v1.ProtocolUDP)),
		slice("stickydns", false, v1.ProtocolUDP, eps...))
	for _, client := range c.Clients {
		if counts := spread(t, client, at(serviceIP(false, 118), 80), 30); len(counts) != 1 {
			t.Errorf("%s: connections within the timeout reached %v, want one pod", client.Label, counts)
		}
		if counts := spreadUDP(t, client, at(serviceIP(false, 119), 80), 30); len(counts) != 1 {
			t.Errorf("%s: UDP flows within the timeout reached %v, want one pod", client.Label, counts)
		}
	}
	// After the 1 s timeout each connection is a new pick: eight in a row
	// reach one pod with probability 3^-7.
	seen := map[string]int{}
	for range 8 {
		time.Sleep(1100 * time.Millisecond)
		seen[reach(t, c.Clients[0], at(serviceIP(false, 118), 80)).Identity]++
	}
	if len(seen) < 2 {
		t.Errorf("connections each after the timeout reached %v, want new picks", seen)
	}
}

// TestUserspaceEndpointChange: under live traffic, a UDP flow (a client
// socket with a fixed port) moves off an endpoint that is removed to one
// that remains, while a TCP connection to the removed endpoint finishes.
func TestUserspaceEndpointChange(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3})
	c.StartEcho(echoPort)
	udp, tcp := service("dns", ips(120), withProtocol(v1.ProtocolUDP)), service("web", ips(121))
	// without is a ready endpoint on every pod but the one labelled label.
	without := func(label string) []endpoint {
		var eps []endpoint
		for _, pod := range c.Pods {
			if pod.Label != label {
				eps = append(eps, ready(c, pod))
			}
		}
		return eps
	}
	p := startUserspace(t, c, udp, slice("dns", false, v1.ProtocolUDP, without("")...), tcp, slice("web", false, v1.ProtocolTCP, without("")...))
	client := c.Clients[0]
	sock, err := client.DialUDP(netip.AddrPortFrom(client.IPv4, 40120), at(serviceIP(false, 120), 80))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	first, err := sock.Exchange(connectTimeout)
	if err != nil {
		t.Fatal(err)
	}
	held, err := client.Dial("tcp", netip.AddrPort{}, at(serviceIP(false, 121), 80), connectTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(connectTimeout))
	buf := make([]byte, 256)
	n, err := held.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	heldPod := strings.Fields(string(buf[:n]))[1]

	p.update(udp, slice("dns", false, v1.ProtocolUDP, without(first.Identity)...), tcp, slice("web", false, v1.ProtocolTCP, without(heldPod)...))
	for i := range 20 {
		r, err := sock.Exchange(connectTimeout)
		if err != nil || r.Identity == first.Identity {
			t.Fatalf("datagram %d after %s was removed: reply %+v, error %v; want another pod", i, first.Identity, r, err)
		}
	}
	held.SetDeadline(time.Now().Add(connectTimeout))
	if _, err := held.Write([]byte("still there?\n")); err != nil {
		t.Fatalf("the TCP connection made before the change was cut: %v", err)
	}
	if n, err := held.Read(buf); err != nil || !strings.Contains(string(buf[:n]), "still there?") {
		t.Fatalf("the TCP connection made before the change: read %q, %v; want the echo", buf[:n], err)
	}
}

// TestUserspaceBadObject: a Service that cannot be used is skipped with a
// warning naming it; the others are served.
func TestUserspaceBadObject(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	bad := service("bad", ips(122))
	bad.Spec.ClusterIPs = []string{"198.19.0.999"}
	bad.Spec.ClusterIP = "198.19.0.999"
	p := startUserspace(t, c, bad, service("good", ips(123)), slice("good", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
	expectOnly(t, spread(t, c.Clients[0], at(serviceIP(false, 123), 80), 5), c.Pods[0])
	if log := p.log.String(); !strings.Contains(log, `Service e2e/bad: invalid cluster IP`) {
		t.Errorf("no warning names the bad Service:\n%s", log)
	}
}

// ownedRoutes lists the routes the userspace proxy owns on the node.
func ownedRoutes(t *testing.T, c *netns.Cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out strings.Builder
	for _, family := range []string{"-4", "-6"} {
		text, err := c.Node.Run(ctx, "ip", family, "route", "show", "table", "local", "proto", "177")
		if err != nil {
			t.Fatalf("ip %s route show: %v\n%s", family, err, text)
		}
		out.WriteString(text)
	}
	return out.String()
}

// TestUserspaceExit: the proxy's local routes make the Service addresses
// the node's own; on SIGTERM it removes them, and the Service addresses are
// routed as before (to the node's sink).
func TestUserspaceExit(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	p := startUserspace(t, c, service("web", ips(124)), slice("web", true, v1.ProtocolTCP, ready(c, c.Pods[0])))
	reach(t, c.Clients[0], at(serviceIP(true, 124), 80))
	routes := ownedRoutes(t, c)
	for _, ip := range ips(124) {
		if !strings.Contains(routes, "local "+ip.String()+" ") {
			t.Errorf("no local route to %s among the proxy's routes:\n%s", ip, routes)
		}
	}
	if err := syscall.Kill(p.proc.Cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not exit within 10 s of SIGTERM")
	}
	if err := p.proc.Err(); err != nil {
		t.Errorf("the proxy exited with %v, want 0", err)
	}
	if routes := ownedRoutes(t, c); routes != "" {
		t.Errorf("after exit the node still has the proxy's routes:\n%s", routes)
	}
	expectDropped(t, c.Clients[0], at(serviceIP(false, 124), 80))
}

// TestUserspaceRestart: a proxy that starts where one was killed removes the
// routes that one left behind, and serves the Services it is given.
func TestUserspaceRestart(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	first := startUserspace(t, c, service("old", ips(125)), slice("old", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
	if err := first.proc.Stop(); err != nil { // SIGKILL: no clean-up
		t.Fatal(err)
	}
	if routes := ownedRoutes(t, c); !strings.Contains(routes, serviceIP(false, 125).String()) {
		t.Fatalf("the killed proxy left no route behind, nothing to test:\n%s", routes)
	}
	startUserspace(t, c, service("new", ips(126)), slice("new", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
	if routes := ownedRoutes(t, c); strings.Contains(routes, serviceIP(false, 125).String()) {
		t.Errorf("the killed proxy's route to %s is still there:\n%s", serviceIP(false, 125), routes)
	}
	expectOnly(t, spread(t, c.Clients[0], at(serviceIP(false, 126), 80), 5), c.Pods[0])
	expectDropped(t, c.Clients[0], at(serviceIP(false, 125), 80))
}
