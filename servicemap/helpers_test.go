package servicemap_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

// cmpOpts compares the net/netip and affinity values inside ServicePorts by
// value.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b affinity.Policy) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

func ptr[T any](v T) *T { return &v }

// service is a valid single-stack IPv4 ClusterIP Service ns/web with one TCP
// port "http" 80, changed by mods.
func service(mods ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func named(ns, name string) func(*v1.Service) {
	return func(s *v1.Service) { s.Namespace, s.Name = ns, name }
}

func ofType(t v1.ServiceType) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.Type = t }
}

func clusterIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ClusterIPs = ips
		s.Spec.ClusterIP = ""
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
	}
}

func ports(ps ...v1.ServicePort) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.Ports = ps }
}

func labels(kv ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Labels[kv[i]] = kv[i+1]
		}
	}
}

// port is the ServicePort that service() gives for IPv4, changed by mods.
func port(mods ...func(*servicemap.ServicePort)) servicemap.ServicePort {
	sp := servicemap.ServicePort{
		Name:      servicemap.PortName{Namespace: "ns", Name: "web", Port: "http", Protocol: v1.ProtocolTCP},
		Family:    v1.IPv4Protocol,
		ClusterIP: netip.MustParseAddr("10.96.0.10"),
		Port:      80,
	}
	for _, m := range mods {
		m(&sp)
	}
	return sp
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func clientIP(t testing.TB, seconds int32) affinity.Policy {
	t.Helper()
	p, err := affinity.ClientIP(seconds)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkWarnings checks that warnings name svc and that each contains the
// matching substring of want, in order.
func checkWarnings(t *testing.T, svc *v1.Service, got []svcproxy.Warning, want []string) {
	t.Helper()
	var namespace, name string
	if svc != nil {
		namespace, name = svc.Namespace, svc.Name
	}
	warnings.Check(t, "Service", namespace, name, got, want)
}

func portNames(ps []servicemap.ServicePort) []servicemap.PortName {
	var out []servicemap.PortName
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}
