package iptables

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
)

// Test objects use the ranges DESIGN.md reserves for tests: 198.18.0.0/16
// for nodes and pods, 198.19.0.0/16 for Service addresses, 2001:db8::/32 for
// IPv6.

const testNode = "node-a"

func ptr[T any](v T) *T { return &v }

// svcOpt changes a test Service.
type svcOpt func(*v1.Service)

// service is a ClusterIP Service ns/name with one TCP port "p80" (80),
// changed by opts.
func service(ns, name, clusterIP string, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []v1.ServicePort{{Name: "p80", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func nodePort(np int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = np
	}
}

func loadBalancer(np int32, ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = np
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

func sourceRanges(r ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = r }
}

func externalIPs(ips ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func eTPLocal(hc int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

func iTPLocal() svcOpt {
	return func(s *v1.Service) { s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal) }
}

func clientIP(timeout int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(timeout)}}
	}
}

func protocol(p v1.Protocol) svcOpt {
	return func(s *v1.Service) { s.Spec.Ports[0].Protocol = p }
}

// ep is one endpoint of a test slice.
type ep struct {
	ip    string
	node  string
	ready bool
}

// slice is an EndpointSlice of ns/svc for port "p80" (number port) over
// eps; the address type follows the first endpoint.
func slice(ns, svc, name string, port int32, proto v1.Protocol, eps ...ep) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if len(eps) > 0 && netip.MustParseAddr(eps[0].ip).Is6() {
		at = discovery.AddressTypeIPv6
	}
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: at,
		Ports:       []discovery.EndpointPort{{Name: ptr("p80"), Port: ptr(port), Protocol: ptr(proto)}},
	}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{
			Addresses:  []string{e.ip},
			Conditions: discovery.EndpointConditions{Ready: ptr(e.ready)},
			NodeName:   ptr(e.node),
		})
	}
	return es
}

// readyEPs is n ready endpoints 198.18.(64+i).2 (2001:db8:18:(40+i)::2 for
// IPv6) on nodes node-a, node-b, node-a, …
func readyEPs(n int, v6 bool) []ep {
	eps := make([]ep, n)
	for i := range eps {
		ip := fmt.Sprintf("198.18.%d.2", 64+i)
		if v6 {
			ip = fmt.Sprintf("2001:db8:18:%x::2", 0x40+i)
		}
		node := testNode
		if i%2 == 1 {
			node = "node-b"
		}
		eps[i] = ep{ip: ip, node: node, ready: true}
	}
	return eps
}

// testConfig is the Config of most tests: IPv4 on node-a with one pod CIDR.
func testConfig() ruleset.Config {
	return ruleset.Config{
		Family:       v1.IPv4Protocol,
		Node:         topology.Node{Name: testNode},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")},
	}
}

// build feeds objs (*v1.Service, *discovery.EndpointSlice) to trackers of
// cfg's family in the order given and builds a Ruleset.
func build(t testing.TB, cfg ruleset.Config, objs ...any) *ruleset.Ruleset {
	t.Helper()
	return fixture.Ruleset(t, cfg, objs...)
}

// scaleObjects is n ClusterIP Services with 10 endpoints each.
func scaleObjects(n int) []any {
	objs := make([]any, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("svc%d", i)
		objs = append(objs, service("ns", name, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)))
		eps := make([]ep, 10)
		for j := range eps {
			k := (i*10 + j) % (192 * 250) // addresses repeat across Services
			eps[j] = ep{ip: fmt.Sprintf("198.18.%d.%d", 64+k/250, k%250+1), node: testNode, ready: true}
		}
		objs = append(objs, slice("ns", name, name+"-1", 8080, v1.ProtocolTCP, eps...))
	}
	return objs
}
