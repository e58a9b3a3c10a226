package servicemap_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

func TestFromServicePolicies(t *testing.T) {
	etp := func(p v1.ServiceExternalTrafficPolicy) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = p }
	}
	itp := func(p v1.ServiceInternalTrafficPolicy) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.InternalTrafficPolicy = &p }
	}
	nodePort := ports(v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})
	hcnp := func(n int32) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.HealthCheckNodePort = n }
	}
	extIP := func(s *v1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }
	local := func(sp *servicemap.ServicePort) { sp.ExternalPolicyLocal = true }
	withNodePort := func(sp *servicemap.ServicePort) { sp.NodePort = 30080 }
	runConvertCases(t, []convertCase{{
		name: "eTP Local on a NodePort Service",
		svc:  service(ofType(v1.ServiceTypeNodePort), nodePort, etp(v1.ServiceExternalTrafficPolicyLocal)),
		want: []servicemap.ServicePort{port(withNodePort, local)},
	}, {
		name: "eTP Local on a LoadBalancer Service",
		svc:  service(ofType(v1.ServiceTypeLoadBalancer), nodePort, etp(v1.ServiceExternalTrafficPolicyLocal)),
		want: []servicemap.ServicePort{port(withNodePort, local)},
	}, {
		name: "eTP Local on a ClusterIP Service with externalIPs",
		svc:  service(extIP, etp(v1.ServiceExternalTrafficPolicyLocal)),
		want: []servicemap.ServicePort{port(local, func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs("192.0.2.1") })},
	}, {
		name: "eTP Local on a plain ClusterIP Service means nothing",
		svc:  service(etp(v1.ServiceExternalTrafficPolicyLocal)),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "eTP Cluster",
		svc:  service(ofType(v1.ServiceTypeNodePort), nodePort, etp(v1.ServiceExternalTrafficPolicyCluster)),
		want: []servicemap.ServicePort{port(withNodePort)},
	}, {
		name:         "unknown eTP skips the Service",
		svc:          service(etp("Nearby")),
		wantSkipped:  "externalTrafficPolicy",
		wantWarnings: []string{`"Nearby"`},
	}, {
		name: "iTP Local",
		svc:  service(itp(v1.ServiceInternalTrafficPolicyLocal)),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.InternalPolicyLocal = true })},
	}, {
		name: "iTP Cluster",
		svc:  service(itp(v1.ServiceInternalTrafficPolicyCluster)),
		want: []servicemap.ServicePort{port()},
	}, {
		name:         "unknown iTP skips the Service",
		svc:          service(itp("Node")),
		wantSkipped:  "internalTrafficPolicy",
		wantWarnings: []string{`"Node"`},
	}, {
		name: "trafficDistribution is copied as given",
		svc:  service(func(s *v1.Service) { s.Spec.TrafficDistribution = ptr("PreferClose") }),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.TrafficDistribution = "PreferClose" })},
	}, {
		name: "healthCheckNodePort for LoadBalancer with eTP Local",
		svc:  service(ofType(v1.ServiceTypeLoadBalancer), nodePort, etp(v1.ServiceExternalTrafficPolicyLocal), hcnp(32000)),
		want: []servicemap.ServicePort{port(withNodePort, local, func(sp *servicemap.ServicePort) { sp.HealthCheckNodePort = 32000 })},
	}, {
		name: "no healthCheckNodePort for LoadBalancer with eTP Cluster",
		svc:  service(ofType(v1.ServiceTypeLoadBalancer), nodePort, hcnp(32000)),
		want: []servicemap.ServicePort{port(withNodePort)},
	}, {
		name: "no healthCheckNodePort for NodePort with eTP Local",
		svc:  service(ofType(v1.ServiceTypeNodePort), nodePort, etp(v1.ServiceExternalTrafficPolicyLocal), hcnp(32000)),
		want: []servicemap.ServicePort{port(withNodePort, local)},
	}, {
		name:         "healthCheckNodePort out of range skips the Service",
		svc:          service(ofType(v1.ServiceTypeLoadBalancer), etp(v1.ServiceExternalTrafficPolicyLocal), hcnp(65536)),
		wantSkipped:  "healthCheckNodePort",
		wantWarnings: []string{"65536"},
	}, {
		name:         "negative healthCheckNodePort skips the Service",
		svc:          service(ofType(v1.ServiceTypeLoadBalancer), etp(v1.ServiceExternalTrafficPolicyLocal), hcnp(-1)),
		wantSkipped:  "healthCheckNodePort",
		wantWarnings: []string{"-1"},
	}})
}

func TestFromServiceSessionAffinity(t *testing.T) {
	aff := func(typ v1.ServiceAffinity, timeout *int32) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.SessionAffinity = typ
			if timeout != nil {
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
			}
		}
	}
	withAffinity := func(seconds int32) func(*servicemap.ServicePort) {
		return func(sp *servicemap.ServicePort) { sp.Affinity = clientIP(t, seconds) }
	}
	runConvertCases(t, []convertCase{{
		name: "None",
		svc:  service(aff(v1.ServiceAffinityNone, ptr[int32](60))),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "ClientIP defaults to 10800 s",
		svc:  service(aff(v1.ServiceAffinityClientIP, nil)),
		want: []servicemap.ServicePort{port(withAffinity(10800))},
	}, {
		name: "ClientIP with a config but no ClientIP part defaults to 10800 s",
		svc: service(aff(v1.ServiceAffinityClientIP, nil), func(s *v1.Service) {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{}
		}),
		want: []servicemap.ServicePort{port(withAffinity(10800))},
	}, {
		name: "ClientIP explicit timeout",
		svc:  service(aff(v1.ServiceAffinityClientIP, ptr[int32](60))),
		want: []servicemap.ServicePort{port(withAffinity(60))},
	}, {
		name: "ClientIP largest timeout",
		svc:  service(aff(v1.ServiceAffinityClientIP, ptr[int32](86400))),
		want: []servicemap.ServicePort{port(withAffinity(86400))},
	}, {
		name:         "ClientIP timeout 0",
		svc:          service(aff(v1.ServiceAffinityClientIP, ptr[int32](0))),
		wantSkipped:  "timeout",
		wantWarnings: []string{"timeout 0"},
	}, {
		name:         "ClientIP negative timeout",
		svc:          service(aff(v1.ServiceAffinityClientIP, ptr[int32](-5))),
		wantSkipped:  "timeout",
		wantWarnings: []string{"timeout -5"},
	}, {
		name:         "ClientIP timeout 86401",
		svc:          service(aff(v1.ServiceAffinityClientIP, ptr[int32](86401))),
		wantSkipped:  "timeout",
		wantWarnings: []string{"timeout 86401"},
	}, {
		name:         "unknown affinity type",
		svc:          service(aff("Cookie", nil)),
		wantSkipped:  "sessionAffinity",
		wantWarnings: []string{`"Cookie"`},
	}})
}

func TestFromServiceDeliberateSkips(t *testing.T) {
	runConvertCases(t, []convertCase{{
		name:        "nil Service",
		wantSkipped: "nil",
	}, {
		name:        "ExternalName",
		svc:         service(ofType(v1.ServiceTypeExternalName), clusterIPs()),
		wantSkipped: "ExternalName",
	}, {
		name:        "ExternalName with a stale cluster IP",
		svc:         service(ofType(v1.ServiceTypeExternalName)),
		wantSkipped: "ExternalName",
	}, {
		name:        "headless",
		svc:         service(clusterIPs("None")),
		wantSkipped: "headless",
	}, {
		name:        "headless, legacy field only",
		svc:         service(func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", nil }),
		wantSkipped: "headless",
	}, {
		name:        "headless, IPv6 tracker",
		svc:         service(clusterIPs("None")),
		family:      v1.IPv6Protocol,
		wantSkipped: "headless",
	}, {
		name:        "no cluster IP",
		svc:         service(clusterIPs()),
		wantSkipped: "no cluster IP",
	}, {
		name:        "proxy-name label, default Filter",
		svc:         service(labels(servicemap.LabelServiceProxyName, "cilium")),
		wantSkipped: servicemap.LabelServiceProxyName,
	}, {
		name:        "proxy-name label with an empty value, default Filter",
		svc:         service(labels(servicemap.LabelServiceProxyName, "")),
		wantSkipped: servicemap.LabelServiceProxyName,
	}, {
		name:   "proxy-name label matching Filter.ProxyName",
		svc:    service(labels(servicemap.LabelServiceProxyName, "x")),
		filter: servicemap.Filter{ProxyName: "x"},
		want:   []servicemap.ServicePort{port()},
	}, {
		name:        "proxy-name label for another proxy than Filter.ProxyName",
		svc:         service(labels(servicemap.LabelServiceProxyName, "y")),
		filter:      servicemap.Filter{ProxyName: "x"},
		wantSkipped: servicemap.LabelServiceProxyName + "=x",
	}, {
		name:        "no proxy-name label, Filter.ProxyName set",
		svc:         service(),
		filter:      servicemap.Filter{ProxyName: "x"},
		wantSkipped: servicemap.LabelServiceProxyName + "=x",
	}, {
		name:        "headless label",
		svc:         service(labels(servicemap.LabelHeadless, "")),
		wantSkipped: servicemap.LabelHeadless,
	}, {
		name:        "headless label beats a matching proxy name",
		svc:         service(labels(servicemap.LabelHeadless, "", servicemap.LabelServiceProxyName, "x")),
		filter:      servicemap.Filter{ProxyName: "x"},
		wantSkipped: servicemap.LabelHeadless,
	}, {
		name: "unrelated labels",
		svc:  service(labels("app", "web")),
		want: []servicemap.ServicePort{port()},
	}, {
		name:        "no ports at all",
		svc:         service(ports()),
		wantSkipped: "no usable ports",
	}, {
		name:        "a Service for another proxy is not checked further",
		svc:         service(labels(servicemap.LabelServiceProxyName, "other"), named("ns", injection)),
		wantSkipped: servicemap.LabelServiceProxyName,
	}})
}

func TestFromServiceMalformed(t *testing.T) {
	withPorts := func(ps ...v1.ServicePort) func(*v1.Service) {
		// The valid "http" port comes first, the others after it.
		return ports(append([]v1.ServicePort{{Name: "http", Port: 80}}, ps...)...)
	}
	runConvertCases(t, []convertCase{{
		name:         "invalid namespace",
		svc:          service(named("Bad_NS", "web")),
		wantSkipped:  "namespace",
		wantWarnings: []string{`"Bad_NS"`},
	}, {
		name:         "empty namespace",
		svc:          service(named("", "web")),
		wantSkipped:  "namespace",
		wantWarnings: []string{"namespace"},
	}, {
		name:         "name injection attempt",
		svc:          service(named("ns", injection)),
		wantSkipped:  "name",
		wantWarnings: []string{`"bad name\n-j ACCEPT"`},
	}, {
		name:         "namespace injection attempt",
		svc:          service(named("ns\n-A KUBE-SERVICES", "web")),
		wantSkipped:  "namespace",
		wantWarnings: []string{`"ns\n-A KUBE-SERVICES"`},
	}, {
		name:         "name too long",
		svc:          service(named("ns", strings.Repeat("a", 64))),
		wantSkipped:  "name",
		wantWarnings: []string{"name"},
	}, {
		name:         "port name injection attempt: port skipped, others kept",
		svc:          service(withPorts(v1.ServicePort{Name: injection, Port: 81})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{`"bad name\n-j ACCEPT"`},
	}, {
		name:         "port name with upper case",
		svc:          service(withPorts(v1.ServicePort{Name: "HTTP2", Port: 81})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{`"HTTP2"`},
	}, {
		name:         "protocol injection attempt",
		svc:          service(withPorts(v1.ServicePort{Name: "x", Port: 81, Protocol: "TCP -j ACCEPT"})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{`"TCP -j ACCEPT"`},
	}, {
		name:         "lower-case protocol is not a protocol",
		svc:          service(withPorts(v1.ServicePort{Name: "x", Port: 81, Protocol: "udp"})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{`"udp"`},
	}, {
		name:         "port 0",
		svc:          service(withPorts(v1.ServicePort{Name: "x", Port: 0})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{"port number 0"},
	}, {
		name:         "port 65536",
		svc:          service(withPorts(v1.ServicePort{Name: "x", Port: 65536})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{"port number 65536"},
	}, {
		name:         "port -1",
		svc:          service(withPorts(v1.ServicePort{Name: "x", Port: -1})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{"port number -1"},
	}, {
		name: "port 65535 is fine",
		svc:  service(ports(v1.ServicePort{Name: "http", Port: 65535})),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.Port = 65535 })},
	}, {
		name: "nodePort 65536",
		svc: service(ofType(v1.ServiceTypeNodePort),
			withPorts(v1.ServicePort{Name: "x", Port: 81, NodePort: 65536})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{"nodePort 65536"},
	}, {
		name: "nodePort -1",
		svc: service(ofType(v1.ServiceTypeNodePort),
			withPorts(v1.ServicePort{Name: "x", Port: 81, NodePort: -1})),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{"nodePort -1"},
	}, {
		name: "duplicate ports: the last copy used, as kube-proxy uses it",
		svc: service(withPorts(
			v1.ServicePort{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP},
		)),
		want:         []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.Port = 8080 })},
		wantWarnings: []string{"twice"},
	}, {
		name: "duplicate unnamed ports",
		svc: service(ports(
			v1.ServicePort{Port: 80},
			v1.ServicePort{Port: 81, Protocol: v1.ProtocolTCP},
		)),
		want:         []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.Name.Port = ""; sp.Port = 81 })},
		wantWarnings: []string{"twice"},
	}, {
		name: "port names the API server accepts (RFC 1123 labels) are used",
		svc: service(ports(
			v1.ServicePort{Name: "a-port-name-longer-than-15", Port: 80, Protocol: v1.ProtocolTCP},
			v1.ServicePort{Name: "8080", Port: 81, Protocol: v1.ProtocolTCP},
		)),
		want: []servicemap.ServicePort{
			port(func(sp *servicemap.ServicePort) { sp.Name.Port = "8080"; sp.Port = 81 }),
			port(func(sp *servicemap.ServicePort) { sp.Name.Port = "a-port-name-longer-than-15" }),
		},
	}, {
		name:         "every port malformed",
		svc:          service(ports(v1.ServicePort{Name: "http", Port: 0}, v1.ServicePort{Name: "x", Port: 70000})),
		wantSkipped:  "no usable ports",
		wantWarnings: []string{"port number 0", "port number 70000"},
	}, {
		name:         "unparsable cluster IP",
		svc:          service(clusterIPs("10.96.0.300")),
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"10.96.0.300"`},
	}, {
		name:         "unparsable secondary cluster IP skips the Service",
		svc:          service(clusterIPs("10.96.0.10", "fd00::zz")),
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"fd00::zz"`},
	}, {
		name:         "cluster IP with a zone",
		svc:          service(clusterIPs("fe80::1%eth0")),
		family:       v1.IPv6Protocol,
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"fe80::1%eth0"`},
	}, {
		name:         "IPv4-mapped IPv6 cluster IP",
		svc:          service(clusterIPs("::ffff:10.96.0.10")),
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"::ffff:10.96.0.10"`},
	}, {
		// No ServiceCIDR hands out its network address.
		name:         "unspecified cluster IP",
		svc:          service(clusterIPs("::")),
		family:       v1.IPv6Protocol,
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"::"`},
	}, {
		name:         "unspecified IPv4 cluster IP",
		svc:          service(clusterIPs("0.0.0.0")),
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"0.0.0.0"`},
	}, {
		name:         "cluster IP injection attempt",
		svc:          service(clusterIPs("10.96.0.10 -j ACCEPT")),
		wantSkipped:  "cluster IP",
		wantWarnings: []string{`"10.96.0.10 -j ACCEPT"`},
	}, {
		name:         "unknown type",
		svc:          service(ofType("Weird")),
		wantSkipped:  "type",
		wantWarnings: []string{`"Weird"`},
	}, {
		name:         "unknown family",
		svc:          service(),
		family:       "IPv5",
		wantSkipped:  "family",
		wantWarnings: []string{`"IPv5"`},
	}})
}
