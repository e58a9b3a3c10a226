package servicemap_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

func TestUsesClusterAndLocalEndpoints(t *testing.T) {
	type access int
	const (
		internalOnly access = iota
		viaNodePort
		viaExternalIP
		viaLoadBalancerIP
	)
	accessName := []string{"internal only", "NodePort", "externalIP", "LB IP"}
	for _, tc := range []struct {
		itpLocal, etpLocal bool
		access             access
		cluster, local     bool
	}{
		// Internal-only ports: only iTP matters.
		{itpLocal: false, etpLocal: false, access: internalOnly, cluster: true, local: false},
		{itpLocal: true, etpLocal: false, access: internalOnly, cluster: false, local: true},
		// eTP Local on a port nobody outside can reach is inert.
		{itpLocal: false, etpLocal: true, access: internalOnly, cluster: true, local: false},
		{itpLocal: true, etpLocal: true, access: internalOnly, cluster: false, local: true},
	} {
		check(t, tc.itpLocal, tc.etpLocal, accessName[tc.access], servicemap.ServicePort{}, tc.cluster, tc.local)
	}
	for _, acc := range []access{viaNodePort, viaExternalIP, viaLoadBalancerIP} {
		var sp servicemap.ServicePort
		switch acc {
		case viaNodePort:
			sp.NodePort = 30080
		case viaExternalIP:
			sp.ExternalIPs = addrs("192.0.2.1")
		case viaLoadBalancerIP:
			sp.LoadBalancerIPs = addrs("203.0.113.1")
		}
		for _, tc := range []struct {
			itpLocal, etpLocal bool
			cluster, local     bool
		}{
			{itpLocal: false, etpLocal: false, cluster: true, local: false},
			{itpLocal: true, etpLocal: false, cluster: true, local: true},
			{itpLocal: false, etpLocal: true, cluster: true, local: true},
			// kube-proxy still needs the cluster endpoints here: traffic
			// from pods and the node to an external address is
			// short-circuited to them.
			{itpLocal: true, etpLocal: true, cluster: true, local: true},
		} {
			check(t, tc.itpLocal, tc.etpLocal, accessName[acc], sp, tc.cluster, tc.local)
		}
	}
}

func check(t *testing.T, itpLocal, etpLocal bool, access string, sp servicemap.ServicePort, cluster, local bool) {
	t.Helper()
	sp.InternalPolicyLocal, sp.ExternalPolicyLocal = itpLocal, etpLocal
	name := fmt.Sprintf("iTP local=%v eTP local=%v %s", itpLocal, etpLocal, access)
	if got := sp.UsesClusterEndpoints(); got != cluster {
		t.Errorf("%s: UsesClusterEndpoints = %v, want %v", name, got, cluster)
	}
	if got := sp.UsesLocalEndpoints(); got != local {
		t.Errorf("%s: UsesLocalEndpoints = %v, want %v", name, got, local)
	}
	if got, want := sp.ExternallyAccessible(), access != "internal only"; got != want {
		t.Errorf("%s: ExternallyAccessible = %v, want %v", name, got, want)
	}
}

func TestPortNameStringAndCompare(t *testing.T) {
	for _, tc := range []struct {
		name servicemap.PortName
		want string
	}{
		{servicemap.PortName{Namespace: "ns", Name: "web", Port: "http", Protocol: v1.ProtocolTCP}, "ns/web:http"},
		{servicemap.PortName{Namespace: "ns", Name: "web", Protocol: v1.ProtocolUDP}, "ns/web"},
	} {
		if got := tc.name.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.name, got, tc.want)
		}
	}

	want := []servicemap.PortName{
		{Namespace: "a", Name: "z", Port: "z", Protocol: v1.ProtocolUDP},
		{Namespace: "b", Name: "a", Port: "", Protocol: v1.ProtocolUDP},
		{Namespace: "b", Name: "a", Port: "a", Protocol: v1.ProtocolSCTP},
		{Namespace: "b", Name: "a", Port: "a", Protocol: v1.ProtocolTCP},
		{Namespace: "b", Name: "a", Port: "a", Protocol: v1.ProtocolUDP},
		{Namespace: "b", Name: "b", Port: "a", Protocol: v1.ProtocolTCP},
	}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, servicemap.PortName.Compare)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sorted PortNames (-want +got):\n%s", diff)
	}
	for i := range want {
		if c := want[i].Compare(want[i]); c != 0 {
			t.Errorf("%v.Compare(itself) = %d", want[i], c)
		}
	}
}

func TestServicePortEqual(t *testing.T) {
	base := port(func(sp *servicemap.ServicePort) {
		sp.ExternalIPs = addrs("192.0.2.1")
		sp.LoadBalancerIPs = addrs("203.0.113.1")
		sp.LoadBalancerSourceRanges = prefixes("10.0.0.0/8")
	})
	same := base
	same.ExternalIPs = addrs("192.0.2.1") // equal contents, different backing array
	if !base.Equal(&same) {
		t.Errorf("Equal(copy) = false")
	}
	for name, mod := range map[string]func(*servicemap.ServicePort){
		"name":                func(sp *servicemap.ServicePort) { sp.Name.Port = "other" },
		"protocol":            func(sp *servicemap.ServicePort) { sp.Name.Protocol = v1.ProtocolUDP },
		"family":              func(sp *servicemap.ServicePort) { sp.Family = v1.IPv6Protocol },
		"clusterIP":           func(sp *servicemap.ServicePort) { sp.ClusterIP = addrs("10.96.0.11")[0] },
		"port":                func(sp *servicemap.ServicePort) { sp.Port++ },
		"nodePort":            func(sp *servicemap.ServicePort) { sp.NodePort = 30000 },
		"externalIPs":         func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs("192.0.2.2") },
		"no externalIPs":      func(sp *servicemap.ServicePort) { sp.ExternalIPs = nil },
		"loadBalancerIPs":     func(sp *servicemap.ServicePort) { sp.LoadBalancerIPs = addrs("203.0.113.1", "203.0.113.2") },
		"sourceRanges":        func(sp *servicemap.ServicePort) { sp.LoadBalancerSourceRanges = prefixes("10.0.0.0/9") },
		"eTP":                 func(sp *servicemap.ServicePort) { sp.ExternalPolicyLocal = true },
		"iTP":                 func(sp *servicemap.ServicePort) { sp.InternalPolicyLocal = true },
		"trafficDistribution": func(sp *servicemap.ServicePort) { sp.TrafficDistribution = "PreferClose" },
		"affinity":            func(sp *servicemap.ServicePort) { sp.Affinity = clientIP(t, 10) },
		"healthCheckNodePort": func(sp *servicemap.ServicePort) { sp.HealthCheckNodePort = 32000 },
	} {
		other := base
		mod(&other)
		if base.Equal(&other) || other.Equal(&base) {
			t.Errorf("Equal ignores a change of %s", name)
		}
	}
}

func TestFilterSelects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter servicemap.Filter
		labels map[string]string
		want   bool
	}{
		{"nil labels, default", servicemap.Filter{}, nil, true},
		{"nil labels, named proxy", servicemap.Filter{ProxyName: "x"}, nil, false},
		{"proxy label, default", servicemap.Filter{}, map[string]string{servicemap.LabelServiceProxyName: "x"}, false},
		{"matching proxy label", servicemap.Filter{ProxyName: "x"}, map[string]string{servicemap.LabelServiceProxyName: "x"}, true},
		{"other proxy label", servicemap.Filter{ProxyName: "x"}, map[string]string{servicemap.LabelServiceProxyName: "xy"}, false},
		{"headless, default", servicemap.Filter{}, map[string]string{servicemap.LabelHeadless: ""}, false},
		{"headless, named proxy", servicemap.Filter{ProxyName: "x"}, map[string]string{servicemap.LabelHeadless: "", servicemap.LabelServiceProxyName: "x"}, false},
	} {
		got, why := tc.filter.Selects(tc.labels)
		if got != tc.want {
			t.Errorf("%s: Selects = %v (%q), want %v", tc.name, got, why, tc.want)
		}
		if got != (why == "") {
			t.Errorf("%s: Selects = %v with reason %q: a reason must come with false only", tc.name, got, why)
		}
	}
}
