//go:build linux

package e2e

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestUpdates: on a running proxy, an added endpoint is reached, a removed
// one no longer is, and a removed Service is no longer DNATed.
func TestUpdates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 3})
		c.StartEcho(echoPort)
		p0, p1, p2 := c.Pods[0], c.Pods[1], c.Pods[2]
		addr := at(serviceIP(false, 70), 80)
		svc := service("web", ips(70))
		p := startProxy(t, c, backend, svc, slice("web", false, v1.ProtocolTCP, ready(c, p0), ready(c, p1)))
		client := p.inside(c.Clients[0])
		expectUniform(t, spread(t, client, addr, 90), p0, p1)

		p.update(svc, slice("web", false, v1.ProtocolTCP, ready(c, p0), ready(c, p1), ready(c, p2)))
		expectUniform(t, spread(t, client, addr, 90), p0, p1, p2)

		p.update(svc, slice("web", false, v1.ProtocolTCP, ready(c, p2)))
		expectOnly(t, spread(t, client, addr, 20), p2)

		p.update()
		expectDropped(t, client, addr) // the node's sink swallows what is not DNATed
	})
}

// TestUDPFollowsReplacedEndpoint: a UDP client socket with a fixed source
// port keeps talking to its pod; when the endpoints change to another pod
// only, the proxy deletes the stale conntrack entry and the same socket's
// next datagram reaches the new pod. A TCP connection made before is not cut.
func TestUDPFollowsReplacedEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2})
		c.StartEcho(echoPort)
		a, b := c.Pods[0], c.Pods[1]
		udp := service("dns", ips(71), withProtocol(v1.ProtocolUDP))
		tcp := service("web", ips(72))
		p := startProxy(t, c, backend,
			udp, slice("dns", false, v1.ProtocolUDP, ready(c, a)),
			tcp, slice("web", false, v1.ProtocolTCP, ready(c, a)))
		if backend == "ebpf" {
			udpFollowsAtTheSocket(t, c, p, udp, tcp)
			return
		}

		sock, err := c.Clients[0].DialUDP(netip.AddrPortFrom(c.Clients[0].IPv4, 40053), at(serviceIP(false, 71), 80))
		if err != nil {
			t.Fatal(err)
		}
		defer sock.Close()
		if r, err := sock.Exchange(connectTimeout); err != nil || r.Identity != a.Label {
			t.Fatalf("before the change: reply %+v, error %v; want %s", r, err, a.Label)
		}
		held, err := c.Clients[0].Dial("tcp", netip.AddrPort{}, at(serviceIP(false, 72), 80), connectTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()

		p.update(udp, slice("dns", false, v1.ProtocolUDP, ready(c, b)), tcp, slice("web", false, v1.ProtocolTCP, ready(c, b)))
		r, err := sock.Exchange(connectTimeout)
		if err != nil || r.Identity != b.Label {
			t.Fatalf("after the change: reply %+v, error %v; want %s (stale conntrack entry?)", r, err, b.Label)
		}
		held.SetDeadline(time.Now().Add(connectTimeout))
		if _, err := held.Write([]byte("still there?\n")); err != nil {
			t.Fatalf("the TCP connection made before the change was cut: %v", err)
		}
		buf := make([]byte, 256)
		if n, err := held.Read(buf); err != nil || !strings.Contains(string(buf[:n]), a.Label) {
			t.Fatalf("the TCP connection made before the change: read %q, %v; want an answer from %s", buf[:n], err, a.Label)
		}
	})
}

// udpFollowsAtTheSocket is TestUDPFollowsReplacedEndpoint's ebpf part:
// there is no conntrack entry to delete; a connected UDP socket of the
// proxy's network namespace (the node's) translated to the removed
// endpoint is destroyed, so its next exchange fails, and a new socket
// from the same port, once the application has closed the old one,
// reaches the new pod. A pod's socket, whose namespace
// the proxy does not list, is left connected to the old pod. A TCP
// connection made before is not cut.
func udpFollowsAtTheSocket(t *testing.T, c *netns.Cluster, p *proxy, udp, tcp *v1.Service) {
	t.Helper()
	a, b := c.Pods[0], c.Pods[1]
	node, pod := p.inside(c.Node).(*socketClient), p.inside(c.Clients[0]).(*socketClient)
	dns, web := at(serviceIP(false, 71), 80), at(serviceIP(false, 72), 80)
	nodeSock, err := node.hold("udp", netip.AddrPortFrom(c.Node.IPv4, 40053), dns)
	if err != nil {
		t.Fatal(err)
	}
	podSock, err := pod.hold("udp", netip.AddrPortFrom(c.Clients[0].IPv4, 40053), dns)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*heldSocket{nodeSock, podSock} {
		if r, err := s.Exchange(connectTimeout); err != nil || r.Identity != a.Label {
			t.Fatalf("before the change: reply %+v, error %v; want %s", r, err, a.Label)
		}
	}
	held, err := node.hold("tcp", netip.AddrPort{}, web)
	if err != nil {
		t.Fatal(err)
	}

	p.update(udp, slice("dns", false, v1.ProtocolUDP, ready(c, b)), tcp, slice("web", false, v1.ProtocolTCP, ready(c, b)))
	if r, err := nodeSock.Exchange(connectTimeout); err == nil || !strings.Contains(err.Error(), "destination address required") && !strings.Contains(err.Error(), "connection aborted") {
		t.Fatalf("the node's socket after the change: reply %+v, error %v; want it destroyed (EDESTADDRREQ or ECONNABORTED)", r, err)
	}
	if err := nodeSock.Close(); err != nil {
		t.Fatal(err)
	}
	fresh, err := node.hold("udp", netip.AddrPortFrom(c.Node.IPv4, 40053), dns)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := fresh.Exchange(connectTimeout); err != nil || r.Identity != b.Label {
		t.Fatalf("a new socket from the node's port after the change: reply %+v, error %v; want %s", r, err, b.Label)
	}
	if r, err := podSock.Exchange(connectTimeout); err != nil || r.Identity != a.Label {
		t.Fatalf("the pod's socket after the change: reply %+v, error %v; want %s still (its namespace is not the proxy's)", r, err, a.Label)
	}
	if r, err := held.Exchange(connectTimeout); err != nil || r.Identity != a.Label {
		t.Fatalf("the TCP connection made before the change: reply %+v, error %v; want an answer from %s", r, err, a.Label)
	}
}

// TestPreferSameZone: with trafficDistribution PreferSameZone, traffic goes
// to the endpoints of the node's zone while one is ready there, and to all
// otherwise.
func TestPreferSameZone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 2})
		c.StartEcho(echoPort)
		local, r1, r2 := c.Pods[0], c.Pods[1], c.Pods[2]
		svc := service("zonal", ips(73), withTrafficDistribution(v1.ServiceTrafficDistributionPreferSameZone))
		addr := at(serviceIP(false, 73), 80)
		p := startProxy(t, c, backend, svc, slice("zonal", false, v1.ProtocolTCP, ready(c, local), ready(c, r1), ready(c, r2).inZone("zone-a")))
		expectUniform(t, spread(t, p.inside(c.Clients[0]), addr, 90), local, r2)

		p.update(svc, slice("zonal", false, v1.ProtocolTCP, ready(c, local).notReady(), ready(c, r1), ready(c, r2)))
		expectUniform(t, spread(t, p.inside(c.Clients[0]), addr, 90), r1, r2)
	})
}

// TestCleanup: --cleanup leaves nothing of the proxy's in the kernel.
func TestCleanup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		p := startProxy(t, c, backend,
			service("web", ips(74), withNodePort(30074, false), withAffinity(60)),
			slice("web", false, v1.ProtocolTCP, ready(c, c.Pods[0])),
			slice("web", true, v1.ProtocolTCP, ready(c, c.Pods[0])))
		client := p.inside(c.Clients[0])
		reach(t, client, at(serviceIP(false, 74), 80))
		if err := p.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		// The rules stay after the proxy exits.
		reach(t, client, at(serviceIP(false, 74), 80))
		marks := []string{"KUBE-", "kube-proxy", "svcproxy-flat", "svcp_"}
		if state := p.kernelState(); !slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(state, m) }) {
			t.Fatalf("before --cleanup the kernel state shows none of %q:\n%s", marks, state)
		}
		p.cleanup()
		state := p.kernelState()
		for _, mark := range marks {
			if strings.Contains(state, mark) {
				t.Errorf("after --cleanup the kernel still holds %q:\n%s", mark, state)
			}
		}
		expectDropped(t, client, at(serviceIP(false, 74), 80))
	})
}

// TestRobustness: a manifests file with one broken object among good ones
// still serves the good Services; a file that does not parse leaves the
// kernel as it was.
func TestRobustness(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2})
		c.StartEcho(echoPort)
		bad := service("bad", ips(75))
		bad.Spec.ClusterIPs = []string{"198.19.0.999"}
		bad.Spec.ClusterIP = "198.19.0.999"
		good := service("good", ips(76))
		p := startProxy(t, c, backend, bad, good, slice("good", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
		expectOnly(t, spread(t, p.inside(c.Clients[0]), at(serviceIP(false, 76), 80), 10), c.Pods[0])
		if !strings.Contains(p.log.String(), `Service e2e/bad: invalid cluster IP`) {
			t.Errorf("no warning names the bad Service:\n%s", p.log.String())
		}

		before := rulesOnly(p.kernelState())
		syncs := p.syncs()
		writeFile(t, p.dir+"/objects.yaml", "apiVersion: v1\nkind: Service\nmetadata: {namespace: e2e, name: good}\nspec:\n  ports: [{port: eighty}]\n")
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(p.log.String(), "bad manifests: objects.yaml") {
			if time.Now().After(deadline) {
				t.Fatalf("the proxy did not report the broken file:\n%s", p.log.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if p.syncs() != syncs {
			t.Errorf("the proxy synced after reading a broken file")
		}
		if after := rulesOnly(p.kernelState()); after != before {
			t.Errorf("a broken file changed the kernel:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		expectOnly(t, spread(t, p.inside(c.Clients[0]), at(serviceIP(false, 76), 80), 10), c.Pods[0])
	})
}

// counters matches iptables-save's chain counters and the rule counters of
// nft list ruleset (which shows the iptables-nft rules with theirs).
var counters = regexp.MustCompile(`\[\d+:\d+\]|counter packets \d+ bytes \d+`)

// rulesOnly drops what changes without the rules changing: comment lines
// (iptables-save stamps the time) and packet counters.
func rulesOnly(state string) string {
	var lines []string
	for _, l := range strings.Split(state, "\n") {
		if strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "# iptables") && !strings.HasPrefix(l, "# nft") && !strings.HasPrefix(l, "# ip6tables") {
			continue
		}
		lines = append(lines, counters.ReplaceAllString(l, "counters"))
	}
	return strings.Join(lines, "\n")
}
