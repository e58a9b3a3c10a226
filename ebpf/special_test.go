package ebpf_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
)

// Load-balancer IPs in special ranges, which the API server accepts: the
// loopback, link-local and multicast ones are served at the socket as
// kube-proxy's rules serve them; the unspecified one is not, as a key at
// the unspecified address is a node port's (it would serve port 80 on every
// node address).
func TestSpecialLoadBalancerIPs(t *testing.T) {
	for _, tc := range []struct {
		family  v1.IPFamily
		node    string
		served  []string
		ingress []string
	}{{
		family:  v1.IPv4Protocol,
		node:    "198.18.0.1",
		served:  []string{"127.0.0.5", "169.254.1.1", "224.0.0.5"},
		ingress: []string{"0.0.0.0", "127.0.0.5", "169.254.1.1", "224.0.0.5"},
	}, {
		family:  v1.IPv6Protocol,
		node:    "2001:db8:18::1",
		served:  []string{"::1", "fe80::5", "ff02::5"},
		ingress: []string{"::", "::1", "fe80::5", "ff02::5"},
	}} {
		t.Run(string(tc.family), func(t *testing.T) {
			node := netip.MustParseAddr(tc.node)
			clusterIP, ep := "198.19.0.10", "198.18.64.2"
			if tc.family == v1.IPv6Protocol {
				clusterIP, ep = "2001:db8:19::a", "2001:db8:18:40::2"
			}
			svc := &v1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lb"},
				Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
					Ports: []v1.ServicePort{{Name: "p", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080}}},
			}
			var want []string
			for _, ip := range tc.ingress {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
				want = append(want, ip+" served")
			}
			es := &discovery.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "lb-1", Labels: map[string]string{discovery.LabelServiceName: "lb"}},
				AddressType: discovery.AddressType(tc.family),
				Ports:       []discovery.EndpointPort{{Name: ptr("p"), Protocol: ptr(v1.ProtocolTCP), Port: ptr(int32(8080))}},
				Endpoints:   []discovery.Endpoint{{Addresses: []string{ep}, NodeName: ptr("node-b")}},
			}
			cfg := ruleset.Config{Family: tc.family, Node: topology.Node{Name: "node-a"}, NodePortAddresses: []netip.Addr{node}}
			rs := fixture.RulesetWarned(t, cfg, want, svc, es)
			c := ebpf.Render(rs, nil)
			m := c.Maps()
			backend := netip.AddrPortFrom(netip.MustParseAddr(ep), 8080)
			for _, ip := range tc.served {
				got := m.Lookup(ebpf.ProtoTCP, netip.AddrPortFrom(netip.MustParseAddr(ip), 80))
				if got.Verdict != ruleset.VerdictForward || len(got.Backends) != 1 || got.Backends[0] != backend {
					t.Errorf("%s:80: %+v, want forwarded to %v", ip, got, backend)
				}
			}
			if got := m.Lookup(ebpf.ProtoTCP, netip.AddrPortFrom(node, 30080)); got.Verdict != ruleset.VerdictForward {
				t.Errorf("node port: %+v, want forwarded", got)
			}
			if got := m.Lookup(ebpf.ProtoTCP, netip.AddrPortFrom(node, 80)); got.Verdict != ruleset.VerdictNotServed {
				t.Errorf("node address port 80 (the unspecified load-balancer IP's port): %v, want not served", got.Verdict)
			}
			port80 := ebpf.NodePortKey(tc.family, 80, ebpf.ProtoTCP)
			if _, ok := m.Services[port80]; ok {
				t.Errorf("services map has %v", port80)
			}
			ns, err := ebpf.RenderNorthSouth(rs, c, 251)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := ns.Ext[port80]; ok {
				t.Errorf("north-south map has %v", port80)
			}
			for _, ip := range tc.served {
				k := ebpf.ServiceKey{Addr: ebpf.AddrOf(netip.MustParseAddr(ip)), Port: 80, Proto: ebpf.ProtoTCP}
				if _, ok := ns.Ext[k]; !ok {
					t.Errorf("north-south map lacks %v", k)
				}
			}
		})
	}
}
