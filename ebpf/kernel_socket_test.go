//go:build linux

package ebpf_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
)

// TCP and UDP (unconnected and connected) to a cluster IP reach every
// endpoint, about a third each, and the socket reports the Service's
// address as its peer (getpeername, recvfrom's source).
func TestKernelShares(t *testing.T) {
	l := newLab(t, 3)
	for _, proto := range []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP} {
		l.sync(v1.IPv4Protocol,
			service("web", "198.19.0.10", proto), slice("web", proto, l.podEPs(false, "node-a", 0, 1, 2)...))
		for _, op := range map[v1.Protocol][]string{v1.ProtocolTCP: {"tcp"}, v1.ProtocolUDP: {"udp", "udpconn"}}[proto] {
			n := tally(t, l.run(request{Op: op, Network: map[string]string{"tcp": "tcp4", "udp": "udp4", "udpconn": "udp4"}[op], Dst: "198.19.0.10:80", Count: 60}), "198.19.0.10:80")
			t.Logf("%s: %v", op, n)
			for _, pod := range []string{"pod0", "pod1", "pod2"} {
				// Binomial(60, 1/3): fewer than 6 has probability 2e-5.
				if n[pod] < 6 {
					t.Errorf("%s: %s answered %d of 60: %v", op, pod, n[pod], n)
				}
			}
		}
	}
}

// IPv6 Services, and IPv4 Services reached from dual-stack IPv6 sockets
// through IPv4-mapped addresses.
func TestKernelIPv6AndMapped(t *testing.T) {
	l := newLab(t, 2)
	l.sync(v1.IPv6Protocol,
		service("web6", "2001:db8:19::10", v1.ProtocolTCP), slice("web6", v1.ProtocolTCP, l.podEPs(true, "node-a", 0, 1)...),
		service("dns6", "2001:db8:19::53", v1.ProtocolUDP), slice("dns6", v1.ProtocolUDP, l.podEPs(true, "node-a", 0, 1)...))
	l.sync(v1.IPv4Protocol,
		service("web", "198.19.0.10", v1.ProtocolTCP), slice("web", v1.ProtocolTCP, l.podEPs(false, "node-a", 0, 1)...),
		service("dns", "198.19.0.53", v1.ProtocolUDP), slice("dns", v1.ProtocolUDP, l.podEPs(false, "node-a", 0, 1)...))
	for _, tc := range []struct {
		req  request
		peer string
	}{
		{request{Op: "tcp", Network: "tcp6", Dst: "[2001:db8:19::10]:80", Count: 20}, "[2001:db8:19::10]:80"},
		{request{Op: "udp", Network: "udp6", Dst: "[2001:db8:19::53]:80", Count: 20}, "[2001:db8:19::53]:80"},
		{request{Op: "udpconn", Network: "udp6", Dst: "[2001:db8:19::53]:80", Count: 20}, "[2001:db8:19::53]:80"},
		{request{Op: "tcp", Network: "tcp", Dst: "[::ffff:198.19.0.10]:80", Count: 20}, "198.19.0.10:80"},
		{request{Op: "udp", Network: "udp", Dst: "[::ffff:198.19.0.53]:80", Count: 20}, "[::ffff:198.19.0.53]:80"},
		{request{Op: "udpconn", Network: "udp", Dst: "[::ffff:198.19.0.53]:80", Count: 20}, "198.19.0.53:80"},
	} {
		n := tally(t, l.run(tc.req), tc.peer)
		t.Logf("%s %s %s: %v", tc.req.Op, tc.req.Network, tc.req.Dst, n)
		if n["pod0"] == 0 || n["pod1"] == 0 || n["pod0"]+n["pod1"] != tc.req.Count {
			t.Errorf("%s %s: %v, want both pods and nothing else", tc.req.Op, tc.req.Dst, n)
		}
	}
}

// No endpoints: connect() and sendto() fail with ECONNREFUSED; an
// unallocated address of the Service CIDR fails with EHOSTUNREACH, a
// cluster IP on a port it does not serve with ECONNREFUSED.
func TestKernelRefusals(t *testing.T) {
	l := newLab(t, 1)
	l.sync(v1.IPv4Protocol,
		service("empty", "198.19.0.11", v1.ProtocolTCP),
		service("emptyudp", "198.19.0.12", v1.ProtocolUDP),
		service("web", "198.19.0.10", v1.ProtocolTCP), slice("web", v1.ProtocolTCP, l.podEPs(false, "node-a", 0)...))
	for _, tc := range []struct {
		req  request
		want string
	}{
		{request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.11:80"}, "ECONNREFUSED"},
		{request{Op: "udp", Network: "udp4", Dst: "198.19.0.12:80"}, "ECONNREFUSED"},
		{request{Op: "udpconn", Network: "udp4", Dst: "198.19.0.12:80"}, "ECONNREFUSED"},
		{request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.99:80"}, "EHOSTUNREACH"},
		{request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:81"}, "ECONNREFUSED"},
		{request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:80"}, "pod0"},
	} {
		a := l.run(tc.req)[0]
		if got := a.Errno + a.Identity; got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.req.Op, tc.req.Dst, got, tc.want)
		}
	}
}

// internalTrafficPolicy Local goes to this node's endpoints only, or fails
// with EHOSTUNREACH without one; externalTrafficPolicy Local on an
// external IP and a node port short-circuits a node's flows to every
// endpoint, as kube-proxy does for traffic from pods and the node.
func TestKernelTrafficPolicies(t *testing.T) {
	l := newLab(t, 3)
	local := func(s *v1.Service) { p := v1.ServiceInternalTrafficPolicyLocal; s.Spec.InternalTrafficPolicy = &p }
	etpLocal := func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.ExternalIPs = []string{"198.19.100.1"}
	}
	eps := append(l.podEPs(false, "node-a", 0), l.podEPs(false, "node-b", 1, 2)...)
	l.sync(v1.IPv4Protocol,
		service("itp", "198.19.0.20", v1.ProtocolTCP, local), slice("itp", v1.ProtocolTCP, eps...),
		service("itpnone", "198.19.0.21", v1.ProtocolTCP, local), slice("itpnone", v1.ProtocolTCP, l.podEPs(false, "node-b", 1, 2)...),
		service("etp", "198.19.0.22", v1.ProtocolTCP, etpLocal), slice("etp", v1.ProtocolTCP, eps...))
	if n := tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.20:80", Count: 20}), "198.19.0.20:80"); n["pod0"] != 20 {
		t.Errorf("iTP Local: %v, want pod0 (the local endpoint) only", n)
	}
	if a := l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.21:80"})[0]; a.Errno != "EHOSTUNREACH" {
		t.Errorf("iTP Local without local endpoints: %+v, want EHOSTUNREACH", a)
	}
	for _, dst := range []string{"198.19.100.1:80", "198.18.0.1:30080"} {
		n := tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: dst, Count: 45}), dst)
		t.Logf("eTP Local %s: %v", dst, n)
		if n["pod0"] == 0 || n["pod1"] == 0 || n["pod2"] == 0 || n["pod0"]+n["pod1"]+n["pod2"] != 45 {
			t.Errorf("eTP Local from the node to %s: %v, want every endpoint (short-circuit)", dst, n)
		}
	}
}

// ClientIP affinity: one client (network namespace) keeps its backend
// while it comes back within the timeout, and is spread again once it
// lets the timeout pass.
func TestKernelAffinity(t *testing.T) {
	l := newLab(t, 4)
	sticky := func(s *v1.Service) {
		timeout := int32(1)
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
	l.sync(v1.IPv4Protocol, service("web", "198.19.0.10", v1.ProtocolTCP, sticky), slice("web", v1.ProtocolTCP, l.podEPs(false, "node-a", 0, 1, 2, 3)...))
	n := tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:80", Count: 30, Pause: 20 * time.Millisecond}), "198.19.0.10:80")
	if len(n) != 1 {
		t.Errorf("within the timeout: %v, want one backend", n)
	}
	// Each attempt after 1.2 s picks afresh: all 7 on one of 4 has
	// probability 4^-6.
	n = tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:80", Count: 7, Pause: 1200 * time.Millisecond}), "198.19.0.10:80")
	t.Logf("past the timeout: %v", n)
	if len(n) < 2 {
		t.Errorf("past the timeout: %v, want more than one backend", n)
	}
}

// A Service change is element updates: the programs stay as loaded, the
// Sync is incremental, a removed endpoint gets no more connections;
// CheckState finds an element deleted behind the executor's back, and a
// full Sync repairs it; Cleanup detaches every program.
func TestKernelUpdatesCheckCleanup(t *testing.T) {
	l := newLab(t, 3)
	ctx := context.Background()
	l.sync(v1.IPv4Protocol, service("web", "198.19.0.10", v1.ProtocolTCP), slice("web", v1.ProtocolTCP, l.podEPs(false, "node-a", 0, 1, 2)...))
	progs := attachedPrograms(t, l.cgroup)
	if len(progs) != 8 {
		t.Fatalf("%d programs attached, want 8: %v", len(progs), progs)
	}
	rs := buildRuleset(t, l, service("web", "198.19.0.10", v1.ProtocolTCP), slice("web", v1.ProtocolTCP, l.podEPs(false, "node-a", 0, 1)...))
	res, err := l.backend[v1.IPv4Protocol].Sync(ctx, rs)
	if err != nil || res.Full {
		t.Fatalf("second Sync: full %v, err %v", res.Full, err)
	}
	if got := attachedPrograms(t, l.cgroup); !equalIDs(got, progs) {
		t.Errorf("programs changed on a Service change: %v, then %v", progs, got)
	}
	if n := tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:80", Count: 30}), "198.19.0.10:80"); n["pod2"] != 0 || n["pod0"]+n["pod1"] != 30 {
		t.Errorf("after removing pod2: %v", n)
	}
	if missing, err := l.backend[v1.IPv4Protocol].CheckState(ctx); missing.Found() || err != nil {
		t.Fatalf("CheckState after Sync: %+v, %v", missing, err)
	}
	deleteService(t, l)
	missing, err := l.backend[v1.IPv4Protocol].CheckState(ctx)
	if missing.Kind != svcproxy.DriftElement || err != nil {
		t.Fatalf("CheckState after deleting an element: %+v, %v; want an element drift", missing, err)
	}
	t.Logf("CheckState: %+v", missing)
	l.backend[v1.IPv4Protocol].RequestFullSync()
	if res, err := l.backend[v1.IPv4Protocol].Sync(ctx, rs); err != nil || !res.Full {
		t.Fatalf("repairing Sync: full %v, err %v", res.Full, err)
	}
	if missing, err := l.backend[v1.IPv4Protocol].CheckState(ctx); missing.Found() || err != nil {
		t.Fatalf("CheckState after the repair: %+v, %v", missing, err)
	}
	if err := l.backend[v1.IPv4Protocol].Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := attachedPrograms(t, l.cgroup); len(got) != 0 {
		t.Errorf("after Cleanup: %v attached", got)
	}
}

// A connected UDP socket translated to an endpoint that is then removed
// is destroyed (the socket-level counterpart of kube-proxy's conntrack
// flush): the kernel disconnects it with ECONNABORTED pending, so that its
// next send fails with EDESTADDRREQ (a receive would return ECONNABORTED),
// and a new socket reaches the endpoints left. A socket to an endpoint that stays is left
// alone.
func TestKernelUDPRemovedBackend(t *testing.T) {
	l := newLab(t, 2)
	objs := func(pods ...int) []any {
		return []any{service("dns", "198.19.0.53", v1.ProtocolUDP), slice("dns", v1.ProtocolUDP, l.podEPs(false, "node-a", pods...)...)}
	}
	l.sync(v1.IPv4Protocol, objs(0, 1)...)
	// Hold sockets until both pods have one (each new socket picks one of
	// two: 16 tries all on one pod has probability 2^-15).
	byPod := map[string]*hold{}
	for range 16 {
		h := l.start(request{Op: "udphold", Network: "udp4", Dst: "198.19.0.53:80", Count: 3})
		a := h.next(true)
		if a.Errno != "" || a.Peer != "198.19.0.53:80" {
			t.Fatalf("first exchange: %+v", a)
		}
		if byPod[a.Identity] == nil {
			byPod[a.Identity] = h
		}
		if len(byPod) == 2 {
			break
		}
	}
	if len(byPod) != 2 {
		t.Fatalf("16 sockets all reached %v", byPod)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := l.backend[v1.IPv4Protocol].Apply(ctx, buildRuleset(t, l, objs(0)...))
	if err != nil {
		t.Fatal(err)
	}
	if d := res; d.GoneEndpoints != 1 || d.SocketDestroyError != "" {
		t.Fatalf("removing pod1: %+v", d)
	}
	if a := byPod["pod1"].next(false); a.Errno != "EDESTADDRREQ" && a.Errno != "ECONNABORTED" {
		t.Errorf("socket to the removed pod1: %+v, want it destroyed (EDESTADDRREQ or ECONNABORTED)", a)
	}
	if a := byPod["pod0"].next(false); a.Identity != "pod0" {
		t.Errorf("socket to pod0, which stays: %+v", a)
	}
	if n := tally(t, l.run(request{Op: "udpconn", Network: "udp4", Dst: "198.19.0.53:80", Count: 10}), "198.19.0.53:80"); n["pod0"] != 10 {
		t.Errorf("new sockets: %v, want pod0", n)
	}
}
