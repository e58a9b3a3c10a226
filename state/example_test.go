package state_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// A dual-stack proxy: one State for both families, each family's Ruleset
// built from its part of a Snapshot, then updated from the next one. The
// dual-stack Service's bad externalIP is reported once.
func Example() {
	must := warnings.Must(warnings.Example)
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, "node-a", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	web := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIPs:  []string{"198.19.0.10", "2001:db8:19::10"},
			Ports:       []v1.ServicePort{{Name: "http", Port: 80}},
			ExternalIPs: []string{"not-an-ip"},
		},
	}
	for _, w := range st.UpdateService(web) {
		fmt.Println("warning:", w)
	}
	port, portName := int32(8080), "http"
	for _, es := range []struct {
		name   string
		family discovery.AddressType
		addrs  []string
	}{
		{"web-v4", discovery.AddressTypeIPv4, []string{"198.18.1.1"}},
		{"web-v6", discovery.AddressTypeIPv6, []string{"2001:db8:18::1", "2001:db8:18::2"}},
	} {
		slice := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: es.name, Labels: map[string]string{discovery.LabelServiceName: "web"}},
			AddressType: es.family,
			Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
		}
		for _, a := range es.addrs {
			slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{Addresses: []string{a}})
		}
		must.None(st.UpdateSlice(slice))
	}

	kept := map[v1.IPFamily]*ruleset.Ruleset{}
	sync := func() {
		snap := st.Snapshot()
		for _, fam := range snap.Families() {
			b, err := ruleset.NewBuilder(ruleset.Config{Family: fam.IPFamily, Node: snap.Node, NodePortAddresses: fam.NodeAddresses})
			if err != nil {
				panic(err)
			}
			rs, changes, ws := b.Update(kept[fam.IPFamily], fam.Services, fam.Endpoints)
			must.None(ws)
			kept[fam.IPFamily] = rs
			for _, s := range rs.Services() {
				fmt.Printf("%s %s: %d targets (%d added, %d changed)\n", fam.IPFamily, s.Name, len(s.ClusterTargets), len(changes.Added), len(changes.Changed))
			}
		}
	}
	sync()
	st.DeleteSlice("demo", "web-v6")
	sync()
	// Output:
	// warning: Service demo/web: invalid externalIP "not-an-ip" dropped
	// IPv4 demo/web:http: 1 targets (1 added, 0 changed)
	// IPv6 demo/web:http: 2 targets (1 added, 0 changed)
	// IPv4 demo/web:http: 1 targets (0 added, 0 changed)
	// IPv6 demo/web:http: 0 targets (0 added, 1 changed)
}
