package endpoints_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

func ptr[T any](v T) *T { return &v }

// slice is a valid IPv4 EndpointSlice ns/web-1 of Service web with port
// "http" 8080/TCP and one endpoint 10.0.0.1, changed by mods.
func slice(mods ...func(*discovery.EndpointSlice)) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns",
			Name:      "web-1",
			Labels:    map[string]string{discovery.LabelServiceName: "web"},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.0.0.1"}}},
	}
	for _, m := range mods {
		m(es)
	}
	return es
}

func sliceName(name string) func(*discovery.EndpointSlice) {
	return func(es *discovery.EndpointSlice) { es.Name = name }
}

func forService(name string) func(*discovery.EndpointSlice) {
	return func(es *discovery.EndpointSlice) { es.Labels[discovery.LabelServiceName] = name }
}

func eps(list ...discovery.Endpoint) func(*discovery.EndpointSlice) {
	return func(es *discovery.EndpointSlice) { es.Endpoints = list }
}

func slicePorts(list ...discovery.EndpointPort) func(*discovery.EndpointSlice) {
	return func(es *discovery.EndpointSlice) { es.Ports = list }
}

func addrType(t discovery.AddressType) func(*discovery.EndpointSlice) {
	return func(es *discovery.EndpointSlice) { es.AddressType = t }
}

func epPort(name string, port int32, proto v1.Protocol) discovery.EndpointPort {
	return discovery.EndpointPort{Name: &name, Port: &port, Protocol: &proto}
}

// ep is an endpoint with the given address and conditions (nil = unset).
func ep(addr string, ready, serving, terminating *bool) discovery.Endpoint {
	return discovery.Endpoint{
		Addresses:  []string{addr},
		Conditions: discovery.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating},
	}
}

func onNode(e discovery.Endpoint, node, zone string) discovery.Endpoint {
	e.NodeName, e.Zone = &node, &zone
	return e
}

var (
	yes = ptr(true)
	no  = ptr(false)
)

func pn(ns, name, port string, proto v1.Protocol) servicemap.PortName {
	return servicemap.PortName{Namespace: ns, Name: name, Port: port, Protocol: proto}
}

var webHTTP = pn("ns", "web", "http", v1.ProtocolTCP)

// want is an Endpoint with ready, serving and not terminating, changed by
// mods.
func want(addr string, port uint16, mods ...func(*endpoints.Endpoint)) endpoints.Endpoint {
	e := endpoints.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Ready: true, Serving: true}
	for _, m := range mods {
		m(&e)
	}
	return e
}

func conds(ready, serving, terminating bool) func(*endpoints.Endpoint) {
	return func(e *endpoints.Endpoint) { e.Ready, e.Serving, e.Terminating = ready, serving, terminating }
}

func located(node, zone string) func(*endpoints.Endpoint) {
	return func(e *endpoints.Endpoint) { e.NodeName, e.Zone = node, zone }
}

// checkWarnings checks that warnings name es and that each contains the
// matching substring of want, in order.
func checkWarnings(t *testing.T, es *discovery.EndpointSlice, got []svcproxy.Warning, want []string) {
	t.Helper()
	var namespace, name string
	if es != nil {
		namespace, name = es.Namespace, es.Name
	}
	warnings.Check(t, "EndpointSlice", namespace, name, got, want)
}

func parse(t *testing.T, es *discovery.EndpointSlice) *endpoints.Slice {
	t.Helper()
	s, skipped, warnings := endpoints.FromSlice(es, v1.IPv4Protocol, servicemap.Filter{})
	if s == nil || skipped != "" || len(warnings) != 0 {
		t.Fatalf("FromSlice(%s) = %v, %q, %v", es.Name, s, skipped, warnings)
	}
	return s
}
