package state_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

var (
	v4, v6    = v1.IPv4Protocol, v1.IPv6Protocol
	dualStack = []v1.IPFamily{v6, v4}
	addrOpts  = cmp.Options{
		cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
		cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
		cmpopts.EquateEmpty(),
	}
)

func newState(t *testing.T, families ...v1.IPFamily) *state.State {
	t.Helper()
	s, err := state.New(families, "n1", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// service is Service ns/name with one TCP port 80 and the given cluster IPs
// (dual-stack when there are two) and externalIPs.
func service(name string, clusterIPs []string, externalIPs ...string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{
			ClusterIP:   clusterIPs[0],
			ClusterIPs:  clusterIPs,
			Ports:       []v1.ServicePort{{Name: "p", Protocol: v1.ProtocolTCP, Port: 80}},
			ExternalIPs: externalIPs,
		},
	}
}

var dualIPs = []string{"198.19.0.1", "2001:db8:19::1"}

// slice is EndpointSlice ns/name of Service service with one endpoint per
// address, whose family is that of the first address.
func slice(service, name string, addrs ...string) *discovery.EndpointSlice {
	port, portName := int32(8080), "p"
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
	}
	if netip.MustParseAddr(addrs[0]).Is6() {
		es.AddressType = discovery.AddressTypeIPv6
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{a}})
	}
	return es
}

// node is Node name in zone with the given InternalIP addresses.
func node(name, zone string, addrs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelTopologyZone: zone}}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	return n
}

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

func strings(ws []svcproxy.Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.String())
	}
	return out
}
