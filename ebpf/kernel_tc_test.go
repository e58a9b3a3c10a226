//go:build linux

package ebpf_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// North-south at tc, IPv4 and IPv6 on one Dataplane: TCP and UDP from a
// client namespace to node ports, an external IP and load-balancer IPs of
// the node. externalTrafficPolicy Local reaches the node's own endpoint
// with the client's address kept; Cluster spreads over every endpoint,
// masqueraded to the node's address, and a UDP flow stays on its backend;
// a load-balancer IP's source ranges let the client in or keep it out
// (dropped); a TCP connection or a connected UDP socket to a Service
// without endpoints is refused at once (ECONNREFUSED: tc answers the SYN
// with a reset, the datagram with an ICMP or ICMPv6 port unreachable, as
// kube-proxy's reject does), and a frontend whose Local policy has no
// endpoint on the node drops (timeout).
func TestKernelNorthSouth(t *testing.T) {
	l := newLab(t, 3)
	cfg := ebpf.Config{Cgroup: l.cgroup, NorthSouth: &ebpf.NorthSouthConfig{
		Namespace:  "/var/run/netns/" + l.c.Node.Name,
		External:   []string{"vc32"},
		Pods:       []string{"vp64", "vp65", "vp66"},
		MaglevSize: 251,
	}}
	dp := ebpf.NewDataplane(cfg)
	t.Cleanup(func() {
		if err := dp.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	exec := map[bool]*ebpf.Executor{false: dp.Executor(v1.IPv4Protocol), true: dp.Executor(v1.IPv6Protocol)}
	for _, v6 := range []bool{false, true} {
		res, err := syncNorthSouth(l, exec[v6], v6, 0, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: tc maps: %d element changes", family(v6), res.NorthSouthChanges)
	}
	for _, v6 := range []bool{false, true} {
		t.Run(string(family(v6)), func(t *testing.T) { northSouth(t, l, v6) })
	}
	// Each family's sync left the other's elements alone.
	for _, v6 := range []bool{false, true} {
		if diff, err := exec[v6].CheckState(context.Background()); err != nil || diff.Found() {
			t.Errorf("%s: check: %+v %v", family(v6), diff, err)
		}
	}
	client := l.c.Clients[0]
	// An incremental sync that takes pod2 away: the Maglev tables, whose
	// entries are slots of the socket programs' groups, follow, and the
	// check finds the maps as the sync left them.
	res, err := syncNorthSouth(l, exec[false], false, 0, 1)
	if err != nil || res.Full {
		t.Fatalf("incremental sync: full %v, %v", res.Full, err)
	}
	seen := map[string]int{}
	for range 30 {
		r, err := client.TCP(netip.MustParseAddrPort("198.18.0.1:30081"), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		seen[r.Identity]++
	}
	if seen["pod0"] == 0 || seen["pod1"] == 0 || seen["pod0"]+seen["pod1"] != 30 {
		t.Errorf("after pod2 left: %v, want pod0 and pod1 only", seen)
	}
	if diff, err := exec[false].CheckState(context.Background()); err != nil || diff.Found() {
		t.Errorf("check after the incremental sync: %+v %v", diff, err)
	}
	// The cost of translation and flow tracking at tc: a new TCP connection
	// (handshake and the echo's first line) through an eTP Cluster node
	// port against one to a pod directly, medians of 200, alternating.
	var through, direct []time.Duration
	pod := netip.AddrPortFrom(l.c.Pods[0].IPv4, 8080)
	for range 200 {
		for _, dst := range []netip.AddrPort{netip.MustParseAddrPort("198.18.0.1:30081"), pod} {
			start := time.Now()
			if _, err := client.TCP(dst, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if dst == pod {
				direct = append(direct, time.Since(start))
			} else {
				through = append(through, time.Since(start))
			}
		}
	}
	slices.Sort(through)
	slices.Sort(direct)
	t.Logf("new TCP connection: through tc %v, to a pod directly %v (medians of 200)", through[100], direct[100])
}

// syncNorthSouth syncs the north-south test's Services of one family,
// the pods given serving those with every pod.
func syncNorthSouth(l *lab, e *ebpf.Executor, v6 bool, pods ...int) (ebpf.SyncDetails, error) {
	c := func(a string) string { return conv(a, v6) }
	nodePort := func(port int32, etp v1.ServiceExternalTrafficPolicy) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = port
			s.Spec.ExternalTrafficPolicy = etp
		}
	}
	lb := func(ip, sourceRange string) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{convPrefix(sourceRange, v6)}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: c(ip)}}
		}
	}
	all := l.podEPs(v6, "node-a", pods...)
	objs := []any{
		service("local", c("198.19.0.20"), v1.ProtocolTCP, nodePort(30080, v1.ServiceExternalTrafficPolicyLocal)),
		slice("local", v1.ProtocolTCP, append(l.podEPs(v6, "node-a", 0), l.podEPs(v6, "node-b", 1)...)...),
		service("cluster", c("198.19.0.21"), v1.ProtocolTCP, nodePort(30081, v1.ServiceExternalTrafficPolicyCluster),
			func(s *v1.Service) { s.Spec.ExternalIPs = []string{c("198.19.100.1")} }),
		slice("cluster", v1.ProtocolTCP, all...),
		service("dns", c("198.19.0.53"), v1.ProtocolUDP, nodePort(30053, v1.ServiceExternalTrafficPolicyCluster)),
		slice("dns", v1.ProtocolUDP, all...),
		service("open", c("198.19.0.22"), v1.ProtocolTCP, nodePort(30082, v1.ServiceExternalTrafficPolicyCluster), lb("198.19.128.1", "198.18.32.0/24")),
		slice("open", v1.ProtocolTCP, all...),
		service("closed", c("198.19.0.23"), v1.ProtocolTCP, nodePort(30083, v1.ServiceExternalTrafficPolicyCluster), lb("198.19.128.2", "203.0.113.0/24")),
		slice("closed", v1.ProtocolTCP, all...),
		service("empty", c("198.19.0.24"), v1.ProtocolTCP, nodePort(30084, v1.ServiceExternalTrafficPolicyCluster)),
		service("emptydns", c("198.19.0.25"), v1.ProtocolUDP, nodePort(30085, v1.ServiceExternalTrafficPolicyCluster)),
		service("remote", c("198.19.0.26"), v1.ProtocolUDP, nodePort(30086, v1.ServiceExternalTrafficPolicyLocal)),
		slice("remote", v1.ProtocolUDP, l.podEPs(v6, "node-b", 1)...),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return e.Apply(ctx, buildRuleset(l.t, l, objs...))
}

// northSouth checks the flows of syncNorthSouth's Services of one family
// from the lab's client.
func northSouth(t *testing.T, l *lab, v6 bool) {
	client, node := l.c.Clients[0], l.c.Node.IP(v6)
	at := func(a string, port uint16) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr(conv(a, v6)), port)
	}
	tcp := func(dst netip.AddrPort, n int) map[string]int {
		seen := map[string]int{}
		for range n {
			r, err := client.TCP(dst, 2*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", dst, err)
			}
			seen[r.Identity+" from "+r.Source.Addr().String()]++
		}
		return seen
	}
	if got := tcp(netip.AddrPortFrom(node, 30080), 10); got["pod0 from "+client.IP(v6).String()] != 10 {
		t.Errorf("eTP Local node port: %v, want pod0 seeing the client", got)
	}
	for _, dst := range []netip.AddrPort{netip.AddrPortFrom(node, 30081), at("198.19.100.1", 80), at("198.19.128.1", 80)} {
		got := tcp(dst, 30)
		t.Logf("%s: %v", dst, got)
		if len(got) < 2 || got["pod0 from "+node.String()]+got["pod1 from "+node.String()]+got["pod2 from "+node.String()] != 30 {
			t.Errorf("eTP Cluster %s: %v, want several pods, each seeing the node's address", dst, got)
		}
	}
	u, err := client.DialUDP(netip.AddrPortFrom(netip.Addr{}, 40000), netip.AddrPortFrom(node, 30053))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	first := ""
	for i := range 5 {
		r, err := u.Exchange(2 * time.Second)
		if err != nil {
			t.Fatalf("UDP exchange %d: %v", i, err)
		}
		if first == "" {
			first = r.Identity
		}
		if r.Identity != first || r.Source.Addr() != node {
			t.Errorf("UDP exchange %d: %s from %v, want %s from the node", i, r.Identity, r.Source, first)
		}
	}
	if _, err := client.TCP(at("198.19.128.2", 80), time.Second); !errors.Is(err, netns.ErrTimeout) {
		t.Errorf("outside the source ranges: %v, want dropped (timeout)", err)
	}
	for _, probe := range []struct {
		what string
		fn   func() error
	}{
		{"TCP", func() error { _, err := client.TCP(netip.AddrPortFrom(node, 30084), time.Second); return err }},
		{"UDP", func() error { _, err := client.UDP(netip.AddrPortFrom(node, 30085), time.Second); return err }},
	} {
		start := time.Now()
		if err := probe.fn(); !errors.Is(err, netns.ErrRefused) || time.Since(start) > 500*time.Millisecond {
			t.Errorf("no endpoints, %s: %v after %v, want refused at once", probe.what, err, time.Since(start))
		}
	}
	if _, err := client.UDP(netip.AddrPortFrom(node, 30086), time.Second); !errors.Is(err, netns.ErrTimeout) {
		t.Errorf("eTP Local without a local endpoint, UDP: %v, want dropped (timeout)", err)
	}
}
