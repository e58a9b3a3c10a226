package ruleset_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// exampleService is a Service demo/name with one TCP port "http" 80.
func exampleService(name, clusterIP string, nodePort int32, etp v1.ServiceExternalTrafficPolicy) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeClusterIP,
			ClusterIPs:            []string{clusterIP},
			ExternalTrafficPolicy: etp,
			Ports:                 []v1.ServicePort{{Name: "http", Port: 80, NodePort: nodePort}},
		},
	}
	if nodePort != 0 {
		svc.Spec.Type = v1.ServiceTypeNodePort
	}
	return svc
}

// exampleSlice is an EndpointSlice of Service demo/name with port "http" 8080
// and one ready endpoint per address, on the given nodes.
func exampleSlice(name string, nodesByAddr ...string) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "demo", Name: name + "-1",
			Labels: map[string]string{discovery.LabelServiceName: name},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
	}
	for i := 0; i+1 < len(nodesByAddr); i += 2 {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{
			Addresses: []string{nodesByAddr[i]},
			NodeName:  ptr(nodesByAddr[i+1]),
		})
	}
	return es
}

func printTargets(kind string, ts []ruleset.Target) {
	for i, t := range ts {
		local := ""
		if t.Local {
			local = " (local)"
		}
		fmt.Printf("  %s %s with probability %v%s\n", kind, t.Endpoint, ruleset.Probability(i, len(ts)).RatString(), local)
	}
}

// A NodePort Service with externalTrafficPolicy Local and three endpoints,
// one on this node, and a Service with no endpoints, built for node-a.
func ExampleBuilder_Build() {
	must := warnings.Must(warnings.Example)
	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(exampleService("shop", "198.19.0.20", 30080, v1.ServiceExternalTrafficPolicyLocal)))
	must.Used(services.Update(exampleService("empty", "198.19.0.40", 0, "")))
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(eps.Update(exampleSlice("shop", "198.18.2.3", "node-b", "198.18.1.7", "node-a", "198.18.2.4", "node-b")))

	b, err := ruleset.NewBuilder(ruleset.Config{
		Family: v1.IPv4Protocol,
		Node:   topology.Node{Name: "node-a"},
	})
	if err != nil {
		panic(err)
	}
	svcSnap, _ := services.Snapshot()
	epSnap, _ := eps.Snapshot()
	rs, warnings := b.Build(svcSnap, epSnap)
	for _, s := range rs.Services() {
		fmt.Printf("%s: internal %v, external %v\n", s.Name, s.Internal, s.External)
		printTargets("cluster", s.ClusterTargets)
		printTargets("local", s.LocalTargets)
	}
	fmt.Println("warnings:", len(warnings))
	// Output:
	// demo/empty:http: internal reject, external none
	// demo/shop:http: internal cluster, external local
	//   cluster 198.18.1.7:8080 with probability 1/3 (local)
	//   cluster 198.18.2.3:8080 with probability 1/2
	//   cluster 198.18.2.4:8080 with probability 1
	//   local 198.18.1.7:8080 with probability 1 (local)
	// warnings: 0
}

// Diff tells a backend which ServicePorts to rewrite after a change: here one
// endpoint of demo/web went away and demo/api is new.
func ExampleDiff() {
	must := warnings.Must(warnings.Example)
	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	b, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	if err != nil {
		panic(err)
	}
	build := func() *ruleset.Ruleset {
		svcSnap, _ := services.Snapshot()
		epSnap, _ := eps.Snapshot()
		rs, ws := b.Build(svcSnap, epSnap)
		must.None(ws)
		return rs
	}

	must.Used(services.Update(exampleService("web", "198.19.0.10", 0, "")))
	must.Used(services.Update(exampleService("db", "198.19.0.12", 0, "")))
	must.Used(eps.Update(exampleSlice("web", "198.18.1.1", "node-a", "198.18.2.1", "node-b")))
	first := build()
	fmt.Printf("first sync: %+v\n", ruleset.Diff(nil, first))

	must.Used(services.Update(exampleService("api", "198.19.0.11", 0, "")))
	must.Used(eps.Update(exampleSlice("web", "198.18.1.1", "node-a")))
	second := build()
	ch := ruleset.Diff(first, second)
	fmt.Println("added:", ch.Added)
	fmt.Println("changed:", ch.Changed)
	fmt.Println("removed:", ch.Removed)
	fmt.Println("full sync needed:", ch.ConfigChanged)
	fmt.Println("nothing to do next time:", ruleset.Diff(second, build()).Empty())
	// Output:
	// first sync: {Added:[demo/db:http demo/web:http] Changed:[] Removed:[] ConfigChanged:false}
	// added: [demo/api:http]
	// changed: [demo/web:http]
	// removed: []
	// full sync needed: false
	// nothing to do next time: true
}

// NodeAddresses fills Config.NodePortAddresses from a Node object: an
// address NewBuilder would refuse is skipped with a warning instead.
func ExampleNodeAddresses() {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "fe80::1%eth0"},
			{Type: v1.NodeInternalIP, Address: "2001:db8::10"},
			{Type: v1.NodeHostName, Address: "node-a"},
		}},
	}
	addrs, warnings := ruleset.NodeAddresses(node, v1.IPv6Protocol)
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	b, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv6Protocol, NodePortAddresses: addrs})
	fmt.Println(addrs, b != nil, err)
	// Output:
	// warning: Node node-a: InternalIP address "fe80::1%eth0" has a zone: skipped
	// [2001:db8::10] true <nil>
}
