package ebpf_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

var (
	nodeIP      = netip.MustParseAddr("198.18.0.1")
	podCIDR     = netip.MustParsePrefix("198.18.64.0/18")
	serviceCIDR = netip.MustParsePrefix("198.19.0.0/16")
	clusterIPs  = []string{"198.19.0.10", "198.19.0.11", "198.19.0.12", "198.19.0.13"}
	externalIPs = []string{"198.19.100.1", "198.19.100.2"}
	lbIPs       = []string{"198.19.128.1", "198.19.128.2"}
	ranges      = []string{"198.18.0.0/24", "203.0.113.0/24"}
	dsts        = slices.Concat(clusterIPs, externalIPs, lbIPs, []string{"198.19.0.99", "198.18.0.1", "203.0.113.9", "198.18.64.1"})
	ports       = []uint16{80, 81, 8080, 30000, 30001, 30002, 30003, 30004}
)

func ptr[T any](v T) *T { return &v }

// genObjects draws Services (cluster IP, node port and load balancer, with
// traffic policies, affinity, external IPs and source ranges, cluster IPs
// shared between some) and their EndpointSlices (ready, serving and
// terminating endpoints on this node and another).
func genObjects(t *rapid.T, v6 bool) []any {
	conv := func(a string) string { return conv(a, v6) }
	var objs []any
	n := rapid.IntRange(1, 5).Draw(t, "services")
	for i := range n {
		name := fmt.Sprintf("svc%d", i)
		proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")
		typ := rapid.SampledFrom([]v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer}).Draw(t, "type")
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1.ServiceSpec{
				Type:       typ,
				ClusterIP:  conv(rapid.SampledFrom(clusterIPs).Draw(t, "clusterIP")),
				Ports:      []v1.ServicePort{{Name: "p", Protocol: proto, Port: int32(rapid.SampledFrom([]uint16{80, 81}).Draw(t, "port"))}},
				IPFamilies: []v1.IPFamily{family(v6)},
			},
		}
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		if rapid.Bool().Draw(t, "iTPLocal") {
			svc.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}
		if rapid.Bool().Draw(t, "affinity") {
			svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(rapid.IntRange(1, 100).Draw(t, "timeout")))}}
		}
		if rapid.Bool().Draw(t, "hasExternalIP") {
			svc.Spec.ExternalIPs = []string{conv(rapid.SampledFrom(externalIPs).Draw(t, "externalIP"))}
		}
		if typ != v1.ServiceTypeClusterIP {
			svc.Spec.Ports[0].NodePort = int32(30000 + i)
			if rapid.Bool().Draw(t, "eTPLocal") {
				svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			} else {
				svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			}
		}
		if typ == v1.ServiceTypeLoadBalancer {
			svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: conv(rapid.SampledFrom(lbIPs).Draw(t, "lbIP"))}}
			if rapid.Bool().Draw(t, "sourceRanges") {
				svc.Spec.LoadBalancerSourceRanges = []string{convPrefix(rapid.SampledFrom(ranges).Draw(t, "range"), v6)}
			}
		}
		objs = append(objs, svc)
		es := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
			AddressType: map[bool]discovery.AddressType{false: discovery.AddressTypeIPv4, true: discovery.AddressTypeIPv6}[v6],
			Ports:       []discovery.EndpointPort{{Name: ptr("p"), Protocol: ptr(proto), Port: ptr(int32(8080))}},
		}
		for j := range rapid.IntRange(0, 4).Draw(t, "endpoints") {
			es.Endpoints = append(es.Endpoints, discovery.Endpoint{
				Addresses: []string{conv(fmt.Sprintf("198.18.%d.%d", 64+j, 10+i))},
				NodeName:  ptr(rapid.SampledFrom([]string{"node-a", "node-b"}).Draw(t, "node")),
				Conditions: discovery.EndpointConditions{
					Ready:       ptr(rapid.Bool().Draw(t, "ready")),
					Serving:     ptr(rapid.Bool().Draw(t, "serving")),
					Terminating: ptr(rapid.Bool().Draw(t, "terminating")),
				},
			})
		}
		objs = append(objs, es)
	}
	return objs
}

// conv is a, an IPv4 address of the generators, or its IPv6 counterpart:
// 198.18.x.y is 2001:db8:18:x::y, 198.19.x.y 2001:db8:19:x::y, 203.0.113.y
// 2001:db8:ff::y.
func conv(a string, v6 bool) string {
	if !v6 {
		return a
	}
	b := netip.MustParseAddr(a).As4()
	switch {
	case b[0] == 198:
		return fmt.Sprintf("2001:db8:%d:%x::%x", b[1], b[2], b[3])
	}
	return fmt.Sprintf("2001:db8:ff::%x", b[3])
}

// convPrefix is the IPv6 counterpart of an IPv4 prefix of the generators:
// a /24 is a /64, a /16 a /48, a /18 a /58.
func convPrefix(p string, v6 bool) string {
	if !v6 {
		return p
	}
	q := netip.MustParsePrefix(p)
	bits := map[int]int{24: 64, 16: 48, 18: 58}[q.Bits()]
	return netip.PrefixFrom(netip.MustParseAddr(conv(q.Addr().String(), true)), bits).Masked().String()
}

func family(v6 bool) v1.IPFamily {
	if v6 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

func genRuleset(t *rapid.T, v6 bool) *ruleset.Ruleset {
	cfg := ruleset.Config{
		Family:            family(v6),
		Node:              topology.Node{Name: "node-a"},
		ClusterCIDRs:      []netip.Prefix{netip.MustParsePrefix(convPrefix(podCIDR.String(), v6))},
		ServiceCIDRs:      []netip.Prefix{netip.MustParsePrefix(convPrefix(serviceCIDR.String(), v6))},
		NodePortAddresses: []netip.Addr{netip.MustParseAddr(conv(nodeIP.String(), v6))},
	}
	return fixture.Ruleset(t, cfg, genObjects(t, v6)...)
}

func genDst(t *rapid.T, v6 bool) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(conv(rapid.SampledFrom(dsts).Draw(t, "dst"), v6)), rapid.SampledFrom(ports).Draw(t, "dstPort"))
}

// agree fails t unless the model's translation of a flow from a process
// on the node to dst is trace.Trace's outcome for it: the same verdict
// and, when forwarded, the same targets with the same shares (each of N
// backend slots, picked with probability 1/N, holds one target) and the
// same affinity timeout.
func agree(t *rapid.T, rs *ruleset.Ruleset, m *ebpf.Maps, proto v1.Protocol, dst netip.AddrPort) {
	node := netip.MustParseAddr(conv(nodeIP.String(), dst.Addr().Is6()))
	p := trace.Packet{Protocol: proto, Src: netip.AddrPortFrom(node, 40000), Dst: dst, FromNode: true, ToNode: dst.Addr() == node}
	o := trace.Trace(rs, p, ebpf.TraceOptions)
	num := map[v1.Protocol]uint8{v1.ProtocolTCP: ebpf.ProtoTCP, v1.ProtocolUDP: ebpf.ProtoUDP}[proto]
	got := m.Lookup(num, dst)
	want := o.Verdict
	if got.Verdict != want {
		t.Fatalf("%v: model %v, trace %v (%+v)", p, got.Verdict, o.Verdict, o)
	}
	if want != ruleset.VerdictForward {
		return
	}
	var targets []netip.AddrPort
	for _, c := range o.Targets {
		if c.Share.Cmp(ruleset.Share(len(got.Backends))) != 0 {
			t.Fatalf("%v: trace share %v, model 1/%d", p, c.Share, len(got.Backends))
		}
		targets = append(targets, c.Endpoint)
	}
	backends := slices.Clone(got.Backends)
	slices.SortFunc(backends, netip.AddrPort.Compare)
	slices.SortFunc(targets, netip.AddrPort.Compare)
	if !slices.Equal(backends, targets) {
		t.Fatalf("%v: model backends %v, trace targets %v", p, backends, targets)
	}
	if got.Affinity != time.Duration(o.Affinity.Seconds())*time.Second {
		t.Fatalf("%v: model affinity %v, trace %v", p, got.Affinity, o.Affinity)
	}
}

// Property: the model of the programs' lookups, over the maps Render
// makes, gives trace.Trace's outcome for every flow from a process on the
// node, IPv4 and IPv6.
func TestPropModelMatchesTrace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		rs := genRuleset(t, v6)
		m := ebpf.Render(rs, nil).Maps()
		for range 20 {
			agree(t, rs, m, rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"), genDst(t, v6))
		}
	})
}

// apply applies ops to m, as an executor does.
func apply(m *ebpf.Maps, ops ebpf.Ops) *ebpf.Maps {
	out := &ebpf.Maps{Services: maps.Clone(m.Services), Backends: maps.Clone(m.Backends), NodeAddrs: maps.Clone(m.NodeAddrs),
		ClusterAddrs: maps.Clone(m.ClusterAddrs), ServiceCIDRs: maps.Clone(m.ServiceCIDRs)}
	for _, e := range ops.PutBackends {
		out.Backends[e.Key] = e.Value
	}
	for _, e := range ops.PutServices {
		out.Services[e.Key] = e.Value
	}
	for _, k := range ops.PutNodeAddrs {
		out.NodeAddrs[k] = 1
	}
	for _, k := range ops.PutClusterAddrs {
		out.ClusterAddrs[k] = 1
	}
	for _, k := range ops.PutServiceCIDRs {
		out.ServiceCIDRs[k] = 1
	}
	for _, k := range ops.DelServices {
		delete(out.Services, k)
	}
	for _, k := range ops.DelBackends {
		delete(out.Backends, k)
	}
	for _, k := range ops.DelNodeAddrs {
		delete(out.NodeAddrs, k)
	}
	for _, k := range ops.DelClusterAddrs {
		delete(out.ClusterAddrs, k)
	}
	for _, k := range ops.DelServiceCIDRs {
		delete(out.ServiceCIDRs, k)
	}
	return out
}

// Property: rendering a second Ruleset from the first one's Contents
// gives maps that the model reads as trace.Trace reads the second
// Ruleset; Diff's Ops turn the first maps into exactly the second; and
// every group that both hold keeps the slot of each backend it keeps.
func TestPropIncremental(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v6 := rapid.Bool().Draw(t, "v6")
		rs1, rs2 := genRuleset(t, v6), genRuleset(t, v6)
		c1 := ebpf.Render(rs1, nil)
		c2 := ebpf.Render(rs2, c1)
		m1, m2 := c1.Maps(), c2.Maps()
		if got := apply(m1, ebpf.Diff(m1, m2)); !got.Equal(m2) {
			t.Fatalf("Diff's Ops do not turn the old maps into the new")
		}
		if ops := ebpf.Diff(m2, m2); ops.Len() != 0 {
			t.Fatalf("Diff of equal maps: %d ops", ops.Len())
		}
		for range 20 {
			agree(t, rs2, m2, rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"), genDst(t, v6))
		}
	})
}
