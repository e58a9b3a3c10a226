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

// North-south at tc: TCP and UDP from a client namespace to node ports,
// an external IP and load-balancer IPs of the node. externalTrafficPolicy
// Local reaches the node's own endpoint with the client's address kept;
// Cluster spreads over every endpoint, masqueraded to the node's address,
// and a UDP flow stays on its backend; a load-balancer IP's source ranges
// let the client in or keep it out; a Service without endpoints drops.
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
			s.Spec.LoadBalancerSourceRanges = []string{sourceRange}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
		}
	}
	all := l.podEPs(false, "node-a", 0, 1, 2)
	objs := []any{
		service("local", "198.19.0.20", v1.ProtocolTCP, nodePort(30080, v1.ServiceExternalTrafficPolicyLocal)),
		slice("local", v1.ProtocolTCP, append(l.podEPs(false, "node-a", 0), l.podEPs(false, "node-b", 1)...)...),
		service("cluster", "198.19.0.21", v1.ProtocolTCP, nodePort(30081, v1.ServiceExternalTrafficPolicyCluster),
			func(s *v1.Service) { s.Spec.ExternalIPs = []string{"198.19.100.1"} }),
		slice("cluster", v1.ProtocolTCP, all...),
		service("dns", "198.19.0.53", v1.ProtocolUDP, nodePort(30053, v1.ServiceExternalTrafficPolicyCluster)),
		slice("dns", v1.ProtocolUDP, all...),
		service("open", "198.19.0.22", v1.ProtocolTCP, nodePort(30082, v1.ServiceExternalTrafficPolicyCluster), lb("198.19.128.1", "198.18.32.0/24")),
		slice("open", v1.ProtocolTCP, all...),
		service("closed", "198.19.0.23", v1.ProtocolTCP, nodePort(30083, v1.ServiceExternalTrafficPolicyCluster), lb("198.19.128.2", "203.0.113.0/24")),
		slice("closed", v1.ProtocolTCP, all...),
		service("empty", "198.19.0.24", v1.ProtocolTCP, nodePort(30084, v1.ServiceExternalTrafficPolicyCluster)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := dp.Executor(v1.IPv4Protocol).Apply(ctx, buildRuleset(t, l, objs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tc maps: %d element changes", res.NorthSouthChanges)
	client, node := l.c.Clients[0], l.c.Node.IPv4
	tcp := func(dst string, n int) map[string]int {
		seen := map[string]int{}
		for range n {
			r, err := client.TCP(netip.MustParseAddrPort(dst), 2*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", dst, err)
			}
			seen[r.Identity+" from "+r.Source.Addr().String()]++
		}
		return seen
	}
	if got := tcp("198.18.0.1:30080", 10); got["pod0 from "+client.IPv4.String()] != 10 {
		t.Errorf("eTP Local node port: %v, want pod0 seeing the client", got)
	}
	for _, dst := range []string{"198.18.0.1:30081", "198.19.100.1:80", "198.19.128.1:80"} {
		got := tcp(dst, 30)
		t.Logf("%s: %v", dst, got)
		if len(got) < 2 || got["pod0 from "+node.String()]+got["pod1 from "+node.String()]+got["pod2 from "+node.String()] != 30 {
			t.Errorf("eTP Cluster %s: %v, want several pods, each seeing the node's address", dst, got)
		}
	}
	u, err := client.DialUDP(netip.AddrPortFrom(netip.Addr{}, 40000), netip.MustParseAddrPort("198.18.0.1:30053"))
	if err != nil {
		t.Fatal(err)
	}
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
	for _, dst := range []string{"198.19.128.2:80", "198.18.0.1:30084"} {
		if _, err := client.TCP(netip.MustParseAddrPort(dst), time.Second); !errors.Is(err, netns.ErrTimeout) {
			t.Errorf("%s: %v, want dropped (timeout)", dst, err)
		}
	}
}
