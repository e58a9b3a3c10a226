package topology_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

func show(label string, eps []endpoints.Endpoint) {
	if eps == nil {
		fmt.Printf("%s: unused\n", label)
		return
	}
	fmt.Printf("%s:", label)
	for _, e := range eps {
		fmt.Printf(" %s", e.String())
	}
	fmt.Println()
}

// A Service with internalTrafficPolicy Local and three endpoints: one ready on
// this node, one on this node that is shutting down, one ready elsewhere. Only
// the ready local endpoint gets the traffic.
func ExampleCategorize() {
	sp := &servicemap.ServicePort{Port: 80, InternalPolicyLocal: true}
	eps := []endpoints.Endpoint{
		{Addr: netip.MustParseAddr("10.0.1.5"), Port: 8080, Ready: true, Serving: true, NodeName: "node-a"},
		{Addr: netip.MustParseAddr("10.0.1.6"), Port: 8080, Serving: true, Terminating: true, NodeName: "node-a"},
		{Addr: netip.MustParseAddr("10.0.2.7"), Port: 8080, Ready: true, Serving: true, NodeName: "node-b"},
	}
	r := topology.Categorize(sp, eps, topology.Node{Name: "node-a", Zone: "zone-1"})
	show("cluster", r.Cluster)
	show("local", r.Local)
	show("all reachable", r.AllReachable)
	fmt.Println("has any endpoints:", r.HasAnyEndpoints)
	// Output:
	// cluster: unused
	// local: 10.0.1.5:8080
	// all reachable: 10.0.1.5:8080
	// has any endpoints: true
}

// Select decides as Categorize does, without copying: the caller asks of
// each endpoint where it goes, here to build its own list of addresses.
func ExampleSelect() {
	sp := &servicemap.ServicePort{Port: 80, NodePort: 30080, ExternalPolicyLocal: true}
	eps := []endpoints.Endpoint{
		{Addr: netip.MustParseAddr("10.0.1.5"), Port: 8080, Ready: true, Serving: true, NodeName: "node-a"},
		{Addr: netip.MustParseAddr("10.0.2.7"), Port: 8080, Ready: true, Serving: true, NodeName: "node-b"},
	}
	sel := topology.Select(sp, eps, topology.Node{Name: "node-a"})
	for i := range eps {
		fmt.Printf("%s cluster=%v local=%v\n", eps[i].String(), sel.Cluster(&eps[i]), sel.Local(&eps[i]))
	}
	fmt.Println("has any endpoints:", sel.HasAnyEndpoints())
	// Output:
	// 10.0.1.5:8080 cluster=true local=true
	// 10.0.2.7:8080 cluster=true local=false
	// has any endpoints: true
}

// With externalTrafficPolicy Local, a node whose only local endpoint is
// terminating still sends its external traffic there, while cluster traffic
// goes to the ready endpoint elsewhere.
func ExampleCategorize_terminatingFallback() {
	sp := &servicemap.ServicePort{Port: 80, NodePort: 30080, ExternalPolicyLocal: true}
	eps := []endpoints.Endpoint{
		{Addr: netip.MustParseAddr("10.0.1.6"), Port: 8080, Serving: true, Terminating: true, NodeName: "node-a"},
		{Addr: netip.MustParseAddr("10.0.2.7"), Port: 8080, Ready: true, Serving: true, NodeName: "node-b"},
	}
	r := topology.Categorize(sp, eps, topology.Node{Name: "node-a"})
	show("cluster", r.Cluster)
	show("local", r.Local)
	show("all reachable", r.AllReachable)
	// Output:
	// cluster: 10.0.2.7:8080
	// local: 10.0.1.6:8080
	// all reachable: 10.0.1.6:8080 10.0.2.7:8080
}

// Hints lets a proxy honour trafficDistribution for endpoints that did not pass
// through the EndpointSlice controller: here cluster traffic stays in zone-1.
func ExampleHints() {
	sp := &servicemap.ServicePort{Port: 80, TrafficDistribution: v1.ServiceTrafficDistributionPreferSameZone}
	eps := []endpoints.Endpoint{
		{Addr: netip.MustParseAddr("10.0.1.5"), Port: 8080, Ready: true, Serving: true, NodeName: "node-a", Zone: "zone-1"},
		{Addr: netip.MustParseAddr("10.0.2.7"), Port: 8080, Ready: true, Serving: true, NodeName: "node-b", Zone: "zone-2"},
		{Addr: netip.MustParseAddr("10.0.3.9"), Port: 8080, Ready: true, Serving: true, NodeName: "node-c", Zone: "zone-1"},
	}
	hinted := topology.Hints(sp.TrafficDistribution, eps)
	for _, e := range hinted {
		fmt.Println(e.String(), "zone hints:", e.ZoneHints)
	}
	r := topology.Categorize(sp, hinted, topology.Node{Name: "node-a", Zone: "zone-1"})
	show("cluster", r.Cluster)
	// Output:
	// 10.0.1.5:8080 zone hints: [zone-1]
	// 10.0.2.7:8080 zone hints: [zone-2]
	// 10.0.3.9:8080 zone hints: [zone-1]
	// cluster: 10.0.1.5:8080 10.0.3.9:8080
}

func ExampleNodeFromObject() {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   "node-a",
		Labels: map[string]string{v1.LabelTopologyZone: "zone-1"},
	}}
	fmt.Printf("%+v\n", topology.NodeFromObject(n))
	fmt.Printf("%+v\n", topology.NodeFromObject(nil))
	// Output:
	// {Name:node-a Zone:zone-1}
	// {Name: Zone:}
}
