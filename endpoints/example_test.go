package endpoints_test

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

// A Tracker merges the EndpointSlices of each Service and, at each
// Snapshot, says which ports changed and which UDP or SCTP ports lost a
// serving endpoint, whose conntrack entries must go. A Snapshot's Port also
// lists the endpoints that existing connections may keep using (Serving).
func ExampleTracker() {
	must := warnings.Must(warnings.Example)
	t := true
	f := false
	dnsSlice := func(name string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "kube-system",
				Name:      name,
				Labels:    map[string]string{discovery.LabelServiceName: "dns"},
			},
			AddressType: discovery.AddressTypeIPv4,
			Ports: []discovery.EndpointPort{
				{Name: ptr("dns"), Port: ptr[int32](5353), Protocol: ptr(v1.ProtocolUDP)},
				{Name: ptr("dns-tcp"), Port: ptr[int32](5353), Protocol: ptr(v1.ProtocolTCP)},
			},
			Endpoints: eps,
		}
	}
	pod := func(ip, node string, ready, serving, terminating bool) discovery.Endpoint {
		return discovery.Endpoint{
			Addresses:  []string{ip},
			NodeName:   &node,
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		}
	}
	udp := servicemap.PortName{Namespace: "kube-system", Name: "dns", Port: "dns", Protocol: v1.ProtocolUDP}
	show := func(snap endpoints.Snapshot, ch endpoints.Changes) {
		fmt.Println("changed:", ch.Changed, "conntrack cleanup:", ch.ConntrackCleanup)
		for _, e := range snap.Get(udp) {
			fmt.Printf("  %s node=%s ready=%v serving=%v terminating=%v\n", e.String(), e.NodeName, e.Ready, e.Serving, e.Terminating)
		}
		fmt.Println("  serving or ready:", snap.Port(udp).Serving)
	}

	tracker := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	// Two slices of one Service; 198.18.1.2 is listed in both, and the
	// non-terminating copy wins.
	must.Used(tracker.Update(dnsSlice("dns-a", pod("198.18.1.3", "node-b", t, t, f), pod("198.18.1.2", "node-a", f, t, t))))
	must.Used(tracker.Update(dnsSlice("dns-b", pod("198.18.1.2", "node-a", t, t, f))))
	show(tracker.Snapshot())

	// A pod is added: nothing to clean up.
	must.Used(tracker.Update(dnsSlice("dns-b", pod("198.18.1.2", "node-a", t, t, f), pod("198.18.1.4", "node-b", t, t, f))))
	show(tracker.Snapshot())

	// A pod stops serving: its UDP flows must be flushed, its TCP ones not.
	must.Used(tracker.Update(dnsSlice("dns-a", pod("198.18.1.3", "node-b", f, f, t))))
	show(tracker.Snapshot())
	// Output:
	// changed: [kube-system/dns:dns kube-system/dns:dns-tcp] conntrack cleanup: []
	//   198.18.1.2:5353 node=node-a ready=true serving=true terminating=false
	//   198.18.1.3:5353 node=node-b ready=true serving=true terminating=false
	//   serving or ready: [198.18.1.2:5353 198.18.1.3:5353]
	// changed: [kube-system/dns:dns kube-system/dns:dns-tcp] conntrack cleanup: []
	//   198.18.1.2:5353 node=node-a ready=true serving=true terminating=false
	//   198.18.1.3:5353 node=node-b ready=true serving=true terminating=false
	//   198.18.1.4:5353 node=node-b ready=true serving=true terminating=false
	//   serving or ready: [198.18.1.2:5353 198.18.1.3:5353 198.18.1.4:5353]
	// changed: [kube-system/dns:dns kube-system/dns:dns-tcp] conntrack cleanup: [kube-system/dns:dns]
	//   198.18.1.2:5353 node=node-a ready=true serving=true terminating=false
	//   198.18.1.3:5353 node=node-b ready=false serving=false terminating=true
	//   198.18.1.4:5353 node=node-b ready=true serving=true terminating=false
	//   serving or ready: [198.18.1.2:5353 198.18.1.4:5353]
}

// Merge combines the parsed slices of one Service, whatever their order.
func ExampleMerge() {
	parse := func(name, ip string) *endpoints.Slice {
		s, skipped, ws := endpoints.FromSlice(&discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "shop", Name: name,
				Labels: map[string]string{discovery.LabelServiceName: "web"},
			},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
			Endpoints:   []discovery.Endpoint{{Addresses: []string{ip}}},
		}, v1.IPv4Protocol, servicemap.Filter{})
		warnings.Must(warnings.Example).Used(skipped, ws)
		return s
	}
	merged := endpoints.Merge([]*endpoints.Slice{parse("web-b", "198.18.0.9"), parse("web-a", "198.18.0.3")})
	for name, eps := range merged {
		fmt.Println(name, eps[0].String(), eps[1].String())
	}
	// Output:
	// shop/web:http 198.18.0.3:8080 198.18.0.9:8080
}

// PortOf gives the Port a Snapshot would hold for a port's endpoints,
// sorted by address and port: with the addresses existing connections may
// keep using, and a summary that lets a reader rule out cases without
// reading each endpoint.
func ExamplePortOf() {
	p := endpoints.PortOf([]endpoints.Endpoint{
		{Addr: netip.MustParseAddr("198.18.1.2"), Port: 8080, Ready: true, Serving: true, NodeName: "node-a"},
		{Addr: netip.MustParseAddr("198.18.1.3"), Port: 8080, Ready: true, Serving: true, NodeName: "node-b"},
	})
	fmt.Println("serving:", p.Serving)
	fmt.Println("all ready, no hints:", p.AllReadyUnhinted())
	fmt.Println("maybe on node-a:", p.MaybeOnNode("node-a"))
	fmt.Println("maybe on node-c:", p.MaybeOnNode("node-c"))
	// Output:
	// serving: [198.18.1.2:8080 198.18.1.3:8080]
	// all ready, no hints: true
	// maybe on node-a: true
	// maybe on node-c: false
}

// PortsOf reads the endpoints of many ports in one ordered walk, as a
// full sync does: the ports of a servicemap snapshot, in the order All
// yields them, each with its Port (none for a Service without slices).
func ExampleSnapshot_PortsOf() {
	must := warnings.Must(warnings.Example)
	svcs := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	port, portName := int32(8080), "http"
	for i, name := range []string{"api", "db", "web"} {
		must.Used(svcs.Update(&v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: v1.ServiceSpec{
				ClusterIPs: []string{fmt.Sprintf("198.19.0.%d", 10+i)},
				Ports:      []v1.ServicePort{{Name: "http", Port: 80}},
			},
		}))
		if name == "db" {
			continue
		}
		must.Used(eps.Update(&discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints:   []discovery.Endpoint{{Addresses: []string{fmt.Sprintf("198.18.1.%d", 1+i)}}},
		}))
	}
	ss, _ := svcs.Snapshot()
	es, _ := eps.Snapshot()
	ports := slices.Collect(ss.All())
	for i, p := range es.PortsOf(ports) {
		fmt.Println(ports[i].Name, p.Serving)
	}
	// Output:
	// shop/api:http [198.18.1.1:8080]
	// shop/db:http []
	// shop/web:http [198.18.1.3:8080]
}
