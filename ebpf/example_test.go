package ebpf_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// A Service with two endpoints becomes one services element and two
// backends elements; when an endpoint goes, the change is one backend
// element rewritten, one deleted and the service's count updated.
func Example() {
	build := func(addrs ...string) *ruleset.Ruleset {
		services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
		eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
		services.Update(&v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
			Spec:       v1.ServiceSpec{ClusterIP: "198.19.0.10", Ports: []v1.ServicePort{{Name: "http", Port: 80}}},
		})
		es := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
		}
		for _, a := range addrs {
			es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{a}, NodeName: ptr("node-b")})
		}
		eps.Update(es)
		b, _ := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
		svcSnap, _ := services.Snapshot()
		epSnap, _ := eps.Snapshot()
		rs, _ := b.Build(svcSnap, epSnap)
		return rs
	}
	before := ebpf.Render(build("198.18.64.2", "198.18.65.2"), nil)
	for k, v := range before.Maps().Services {
		fmt.Printf("service %v -> group %d, %d backends\n", k, v.ID, v.Count)
	}
	after := ebpf.Render(build("198.18.65.2"), before)
	ops := ebpf.Diff(before.Maps(), after.Maps())
	for _, e := range ops.PutBackends {
		fmt.Printf("put backend %d/%d = %v\n", e.Key.ID, e.Key.Slot, e.Value.AddrPort())
	}
	for _, e := range ops.PutServices {
		fmt.Printf("put service %v -> group %d, %d backends\n", e.Key, e.Value.ID, e.Value.Count)
	}
	for _, k := range ops.DelBackends {
		fmt.Printf("delete backend %d/%d\n", k.ID, k.Slot)
	}
	t := after.Maps().Lookup(ebpf.ProtoTCP, netip.MustParseAddrPort("198.19.0.10:80"))
	fmt.Println(t.Verdict, t.Backends)
	fmt.Println(after.Maps().Lookup(ebpf.ProtoTCP, netip.MustParseAddrPort("198.19.0.10:81")).Verdict)
	// Output:
	// service 198.19.0.10:80/6 -> group 0, 2 backends
	// put backend 0/0 = 198.18.65.2:8080
	// put service 198.19.0.10:80/6 -> group 0, 1 backends
	// delete backend 0/1
	// forwarded [198.18.65.2:8080]
	// rejected
}
