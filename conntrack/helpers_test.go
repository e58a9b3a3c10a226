package conntrack_test

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// svc describes one single-port Service in namespace "ns" and its endpoints.
type svc struct {
	name      string
	proto     v1.Protocol // UDP when empty
	clusterIP string
	port      int32
	target    int32 // the endpoints' port; port when 0
	nodePort  int32
	external  []string
	lb        []string
	// eps are endpoint addresses: "a" ready, "a~" serving and terminating,
	// "a!" neither ready nor serving.
	eps []string
}

func (s svc) protocol() v1.Protocol {
	if s.proto == "" {
		return v1.ProtocolUDP
	}
	return s.proto
}

func (s svc) objects() (*v1.Service, *discovery.EndpointSlice) {
	typ := v1.ServiceTypeClusterIP
	if s.nodePort != 0 {
		typ = v1.ServiceTypeNodePort
	}
	if len(s.lb) > 0 {
		typ = v1.ServiceTypeLoadBalancer
	}
	service := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: s.name},
		Spec: v1.ServiceSpec{
			Type:        typ,
			ClusterIP:   s.clusterIP,
			ClusterIPs:  []string{s.clusterIP},
			ExternalIPs: s.external,
			Ports:       []v1.ServicePort{{Port: s.port, NodePort: s.nodePort, Protocol: s.protocol()}},
		},
	}
	for _, ip := range s.lb {
		service.Status.LoadBalancer.Ingress = append(service.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	target := s.target
	if target == 0 {
		target = s.port
	}
	addrType := discovery.AddressTypeIPv4
	if strings.Contains(s.clusterIP, ":") {
		addrType = discovery.AddressTypeIPv6
	}
	proto, unnamed := s.protocol(), ""
	slice := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: s.name + "-abc",
			Labels: map[string]string{discovery.LabelServiceName: s.name},
		},
		AddressType: addrType,
		Ports:       []discovery.EndpointPort{{Name: &unnamed, Port: &target, Protocol: &proto}},
	}
	for _, e := range s.eps {
		ready, serving, terminating := true, true, false
		switch {
		case strings.HasSuffix(e, "~"):
			ready, terminating = false, true
		case strings.HasSuffix(e, "!"):
			ready, serving = false, false
		}
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{
			Addresses: []string{strings.TrimRight(e, "~!")},
			Conditions: discovery.EndpointConditions{
				Ready: &ready, Serving: &serving, Terminating: &terminating,
			},
		})
	}
	return service, slice
}

// fataler is what build needs of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// build returns the Ruleset of family for the Services, failing on any
// warning.
func build(t fataler, family v1.IPFamily, svcs ...svc) *ruleset.Ruleset {
	t.Helper()
	var objs []any
	for _, s := range svcs {
		service, slice := s.objects()
		objs = append(objs, service)
		if len(s.eps) > 0 {
			objs = append(objs, slice)
		}
	}
	return fixture.Ruleset(t, ruleset.Config{Family: family}, objs...)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func aps(ss ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(ss))
	for i, s := range ss {
		out[i] = ap(s)
	}
	return out
}

func name(n string, p v1.Protocol) servicemap.PortName {
	return servicemap.PortName{Namespace: "ns", Name: n, Protocol: p}
}
