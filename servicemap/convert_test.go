package servicemap_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

const injection = "bad name\n-j ACCEPT"

type convertCase struct {
	name   string
	svc    *v1.Service
	family v1.IPFamily // IPv4 when empty
	filter servicemap.Filter
	want   []servicemap.ServicePort
	// wantSkipped is a substring of the skip reason; "" means not skipped.
	wantSkipped string
	// wantWarnings are substrings of the warnings' reasons, in order.
	wantWarnings []string
}

func runConvertCases(t *testing.T, cases []convertCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			family := tc.family
			if family == "" {
				family = v1.IPv4Protocol
			}
			got, skipped, warnings := servicemap.FromService(tc.svc, family, tc.filter)
			if diff := cmp.Diff(tc.want, got, cmpOpts); diff != "" {
				t.Errorf("FromService ports (-want +got):\n%s", diff)
			}
			switch {
			case tc.wantSkipped == "" && skipped != "":
				t.Errorf("skipped = %q, want not skipped", skipped)
			case tc.wantSkipped != "" && !strings.Contains(skipped, tc.wantSkipped):
				t.Errorf("skipped = %q, want it to contain %q", skipped, tc.wantSkipped)
			}
			if len(got) == 0 && skipped == "" {
				t.Errorf("no ports and no skip reason")
			}
			checkWarnings(t, tc.svc, warnings, tc.wantWarnings)
		})
	}
}

func TestFromServicePortsAndFamilies(t *testing.T) {
	dualStack := clusterIPs("10.96.0.10", "fd00:10:96::a")
	v6 := func(sp *servicemap.ServicePort) {
		sp.Family = v1.IPv6Protocol
		sp.ClusterIP = addrs("fd00:10:96::a")[0]
	}
	runConvertCases(t, []convertCase{{
		name: "one port",
		svc:  service(),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "one ServicePort per port, sorted by name whatever the spec order",
		svc: service(ports(
			v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP},
			v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
			v1.ServicePort{Name: "http", Port: 80, Protocol: v1.ProtocolTCP},
		)),
		want: []servicemap.ServicePort{
			port(func(sp *servicemap.ServicePort) { sp.Name.Port, sp.Name.Protocol, sp.Port = "dns", v1.ProtocolUDP, 53 }),
			port(),
			port(func(sp *servicemap.ServicePort) { sp.Name.Port, sp.Port = "https", 443 }),
		},
	}, {
		name: "same unnamed port number over two protocols is two ports",
		svc: service(ports(
			v1.ServicePort{Port: 53, Protocol: v1.ProtocolUDP},
			v1.ServicePort{Port: 53, Protocol: v1.ProtocolTCP},
		)),
		want: []servicemap.ServicePort{
			port(func(sp *servicemap.ServicePort) { sp.Name.Port, sp.Port = "", 53 }),
			port(func(sp *servicemap.ServicePort) { sp.Name.Port, sp.Name.Protocol, sp.Port = "", v1.ProtocolUDP, 53 }),
		},
	}, {
		name: "protocol defaults to TCP",
		svc:  service(ports(v1.ServicePort{Name: "http", Port: 80})),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "SCTP",
		svc:  service(ports(v1.ServicePort{Name: "sig", Port: 3868, Protocol: v1.ProtocolSCTP})),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) {
			sp.Name.Port, sp.Name.Protocol, sp.Port = "sig", v1.ProtocolSCTP, 3868
		})},
	}, {
		name: "dual-stack, IPv4 tracker takes the IPv4 cluster IP",
		svc:  service(dualStack),
		want: []servicemap.ServicePort{port()},
	}, {
		name:   "dual-stack, IPv6 tracker takes the IPv6 cluster IP",
		svc:    service(dualStack),
		family: v1.IPv6Protocol,
		want:   []servicemap.ServicePort{port(v6)},
	}, {
		name:   "dual-stack IPv6-primary, IPv6 tracker",
		svc:    service(clusterIPs("fd00:10:96::a", "10.96.0.10")),
		family: v1.IPv6Protocol,
		want:   []servicemap.ServicePort{port(v6)},
	}, {
		name: "dual-stack IPv6-primary, IPv4 tracker",
		svc:  service(clusterIPs("fd00:10:96::a", "10.96.0.10")),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "legacy clusterIP field alone",
		svc:  service(func(s *v1.Service) { s.Spec.ClusterIPs = nil }),
		want: []servicemap.ServicePort{port()},
	}, {
		name:        "legacy clusterIP field alone, other family",
		svc:         service(func(s *v1.Service) { s.Spec.ClusterIPs = nil }),
		family:      v1.IPv6Protocol,
		wantSkipped: "no IPv6 cluster IP",
	}, {
		name:        "single-stack IPv4 Service in the IPv6 tracker",
		svc:         service(),
		family:      v1.IPv6Protocol,
		wantSkipped: "no IPv6 cluster IP",
	}, {
		name:        "single-stack IPv6 Service in the IPv4 tracker",
		svc:         service(clusterIPs("fd00:10:96::a")),
		wantSkipped: "no IPv4 cluster IP",
	}, {
		name: "nodePort is kept for NodePort Services",
		svc: service(ofType(v1.ServiceTypeNodePort),
			ports(v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.NodePort = 30080 })},
	}, {
		name: "nodePort is kept for LoadBalancer Services",
		svc: service(ofType(v1.ServiceTypeLoadBalancer),
			ports(v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.NodePort = 30080 })},
	}, {
		name: "a stale nodePort on a ClusterIP Service is ignored",
		svc:  service(ports(v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "empty type means ClusterIP",
		svc: service(ofType(""),
			ports(v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "LoadBalancer without node ports",
		svc:  service(ofType(v1.ServiceTypeLoadBalancer)),
		want: []servicemap.ServicePort{port()},
	}})
}

func TestFromServiceExternalAndLoadBalancerIPs(t *testing.T) {
	extIPs := func(ips ...string) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
	}
	ingress := func(ings ...v1.LoadBalancerIngress) func(*v1.Service) {
		return func(s *v1.Service) { s.Status.LoadBalancer.Ingress = ings }
	}
	mixedExternal := extIPs("192.0.2.2", "192.0.2.1", "2001:db8::2", "192.0.2.2", "not-an-ip", " 192.0.2.3 ", "2001:db8::1", "2001:db8::1")
	lbIngress := ingress(
		v1.LoadBalancerIngress{IP: "203.0.113.2"},
		v1.LoadBalancerIngress{IP: "203.0.113.1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
		v1.LoadBalancerIngress{IP: "203.0.113.9", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
		v1.LoadBalancerIngress{Hostname: "lb.example.com"},
		v1.LoadBalancerIngress{IP: "2001:db8:1::1"},
		v1.LoadBalancerIngress{IP: "2001:db8:1::9", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
		v1.LoadBalancerIngress{IP: "203.0.113.2"},
		v1.LoadBalancerIngress{IP: " 203.0.113.3 "},
	)
	v6 := func(sp *servicemap.ServicePort) {
		sp.Family = v1.IPv6Protocol
		sp.ClusterIP = addrs("fd00:10:96::a")[0]
	}
	runConvertCases(t, []convertCase{{
		name:         "externalIPs of the family, sorted and deduplicated; invalid ones dropped with a warning",
		svc:          service(mixedExternal),
		want:         []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs("192.0.2.1", "192.0.2.2", "192.0.2.3") })},
		wantWarnings: []string{`"not-an-ip"`},
	}, {
		name:   "externalIPs, IPv6 tracker",
		svc:    service(clusterIPs("10.96.0.10", "fd00:10:96::a"), mixedExternal),
		family: v1.IPv6Protocol,
		want: []servicemap.ServicePort{port(v6, func(sp *servicemap.ServicePort) {
			sp.ExternalIPs = addrs("2001:db8::1", "2001:db8::2")
		})},
		wantWarnings: []string{`"not-an-ip"`},
	}, {
		name: "externalIPs the API server refuses (unspecified, loopback, link-local, link-local multicast, zoned, IPv4-mapped) are dropped with a warning",
		svc: service(extIPs("127.0.0.1", "0.0.0.0", "169.254.169.254", "224.0.0.1", "::1", "::", "fe80::1", "ff02::1", "fe80::1%eth0",
			"::ffff:192.0.2.1", "192.0.2.1")),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs("192.0.2.1") })},
		wantWarnings: []string{
			`"127.0.0.1" dropped: the API server refuses`, `"0.0.0.0" dropped: the API server refuses`, `"169.254.169.254" dropped: the API server refuses`,
			`"224.0.0.1" dropped: the API server refuses`, `"::1" dropped: the API server refuses`, `"::" dropped: the API server refuses`,
			`"fe80::1" dropped: the API server refuses`, `"ff02::1" dropped: the API server refuses`, `invalid externalIP "fe80::1%eth0"`,
			`invalid externalIP "::ffff:192.0.2.1"`,
		},
	}, {
		name:         "multicast externalIPs the API server accepts are used, as kube-proxy uses them, with a warning",
		svc:          service(extIPs("239.1.2.3", "192.0.2.1", "ff05::1")),
		want:         []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.ExternalIPs = addrs("192.0.2.1", "239.1.2.3") })},
		wantWarnings: []string{"multicast externalIP 239.1.2.3 served, as kube-proxy serves it"},
	}, {
		name:         "an externalIP cannot inject text into the warning",
		svc:          service(extIPs("192.0.2.1\n-j ACCEPT")),
		want:         []servicemap.ServicePort{port()},
		wantWarnings: []string{`"192.0.2.1\n-j ACCEPT"`},
	}, {
		name: "load-balancer IPs: family, sorted, dedup, spaces trimmed, ipMode Proxy excluded, hostname-only ignored",
		svc:  service(ofType(v1.ServiceTypeLoadBalancer), clusterIPs("10.96.0.10", "fd00:10:96::a"), lbIngress),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) {
			sp.LoadBalancerIPs = addrs("203.0.113.1", "203.0.113.2", "203.0.113.3")
		})},
	}, {
		name:   "load-balancer IPs, IPv6 tracker",
		svc:    service(ofType(v1.ServiceTypeLoadBalancer), clusterIPs("10.96.0.10", "fd00:10:96::a"), lbIngress),
		family: v1.IPv6Protocol,
		want: []servicemap.ServicePort{port(v6, func(sp *servicemap.ServicePort) {
			sp.LoadBalancerIPs = addrs("2001:db8:1::1")
		})},
	}, {
		name: "load-balancer status of a Service that is no longer a LoadBalancer is ignored",
		svc:  service(ofType(v1.ServiceTypeNodePort), lbIngress),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "load-balancer status on a ClusterIP Service is ignored",
		svc:  service(lbIngress),
		want: []servicemap.ServicePort{port()},
	}, {
		name: "load-balancer IPs the API server refuses (unparsable, zoned, IPv4-mapped) dropped with a warning",
		svc: service(ofType(v1.ServiceTypeLoadBalancer), ingress(
			v1.LoadBalancerIngress{IP: "203.0.113.300"},
			v1.LoadBalancerIngress{IP: "fe80::1%eth0"},
			v1.LoadBalancerIngress{IP: "::ffff:203.0.113.1"},
			v1.LoadBalancerIngress{IP: "203.0.113.001"},
			v1.LoadBalancerIngress{IP: "203.0.113.1"},
		)),
		want:         []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.LoadBalancerIPs = addrs("203.0.113.1") })},
		wantWarnings: []string{`"203.0.113.300"`, `"fe80::1%eth0"`, `"::ffff:203.0.113.1"`, `"203.0.113.001"`},
	}, {
		// The API server checks only the form of a load-balancer IP, and
		// kube-proxy's rules take any address it accepts.
		name: "unspecified, loopback, link-local and multicast load-balancer IPs the API server accepts are served, as kube-proxy serves them, with a warning",
		svc: service(ofType(v1.ServiceTypeLoadBalancer), ingress(
			v1.LoadBalancerIngress{IP: "0.0.0.0", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "127.0.0.5", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "169.254.169.254", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "224.0.0.1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "239.1.2.3"},
			v1.LoadBalancerIngress{IP: "127.0.0.9", IPMode: ptr(v1.LoadBalancerIPModeProxy)},
			v1.LoadBalancerIngress{IP: "::1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
		)),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) {
			sp.LoadBalancerIPs = addrs("0.0.0.0", "127.0.0.5", "169.254.169.254", "224.0.0.1", "239.1.2.3")
		})},
		wantWarnings: []string{
			"unspecified load-balancer ingress IP 0.0.0.0 served, as kube-proxy serves it",
			"loopback load-balancer ingress IP 127.0.0.5 served",
			"link-local load-balancer ingress IP 169.254.169.254 served",
			"multicast load-balancer ingress IP 224.0.0.1 served",
			"multicast load-balancer ingress IP 239.1.2.3 served",
		},
	}, {
		name: "unspecified, loopback, link-local and multicast load-balancer IPs, IPv6 tracker",
		svc: service(ofType(v1.ServiceTypeLoadBalancer), clusterIPs("10.96.0.10", "fd00:10:96::a"), ingress(
			v1.LoadBalancerIngress{IP: "::", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "::1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "fe80::1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "ff02::1", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
			v1.LoadBalancerIngress{IP: "127.0.0.5", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
		)),
		family: v1.IPv6Protocol,
		want: []servicemap.ServicePort{port(v6, func(sp *servicemap.ServicePort) {
			sp.LoadBalancerIPs = addrs("::", "::1", "fe80::1", "ff02::1")
		})},
		wantWarnings: []string{"unspecified load-balancer ingress IP :: served", "loopback load-balancer ingress IP ::1 served",
			"link-local load-balancer ingress IP fe80::1 served", "multicast load-balancer ingress IP ff02::1 served"},
	}, {
		name: "a load-balancer IP with an ipMode the API server refuses is not served, as kube-proxy does not serve it, with a warning",
		svc: service(ofType(v1.ServiceTypeLoadBalancer), ingress(
			v1.LoadBalancerIngress{IP: "203.0.113.1", IPMode: ptr(v1.LoadBalancerIPMode("Direct"))},
			v1.LoadBalancerIngress{IP: "203.0.113.2", IPMode: ptr(v1.LoadBalancerIPModeVIP)},
		)),
		want:         []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) { sp.LoadBalancerIPs = addrs("203.0.113.2") })},
		wantWarnings: []string{`203.0.113.1 with unknown ipMode "Direct" not served`},
	}})
}

func TestFromServiceSourceRanges(t *testing.T) {
	ranges := func(rs ...string) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = rs }
	}
	lb := ofType(v1.ServiceTypeLoadBalancer)
	mixed := ranges(" 10.1.2.3/8 ", "192.168.0.0/16", "10.0.0.0/8", "2001:db8::1/32", "203.0.113.7/32")
	runConvertCases(t, []convertCase{{
		name: "trimmed, masked, sorted, deduplicated, other family dropped",
		svc:  service(lb, mixed),
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) {
			sp.LoadBalancerSourceRanges = prefixes("10.0.0.0/8", "192.168.0.0/16", "203.0.113.7/32")
		})},
	}, {
		name:   "IPv6 tracker keeps the IPv6 ranges",
		svc:    service(lb, clusterIPs("10.96.0.10", "fd00:10:96::a"), mixed),
		family: v1.IPv6Protocol,
		want: []servicemap.ServicePort{port(func(sp *servicemap.ServicePort) {
			sp.Family = v1.IPv6Protocol
			sp.ClusterIP = addrs("fd00:10:96::a")[0]
			sp.LoadBalancerSourceRanges = prefixes("2001:db8::/32")
		})},
	}, {
		name: "only ranges of the other family: no restriction in this family",
		svc:  service(lb, ranges("2001:db8::/32")),
		want: []servicemap.ServicePort{port()},
	}, {
		name:         "prefix length out of range skips the whole Service",
		svc:          service(lb, ranges("10.0.0.0/8", "10.0.0.0/33")),
		wantSkipped:  "10.0.0.0/33",
		wantWarnings: []string{`"10.0.0.0/33"`},
	}, {
		name:         "address without a prefix length skips the whole Service",
		svc:          service(lb, ranges("10.0.0.1")),
		wantSkipped:  "loadBalancerSourceRange",
		wantWarnings: []string{`"10.0.0.1"`},
	}, {
		name:         "an invalid range of the other family still skips the Service",
		svc:          service(lb, ranges("10.0.0.0/8", "2001:db8::/129")),
		wantSkipped:  "loadBalancerSourceRange",
		wantWarnings: []string{`"2001:db8::/129"`},
	}, {
		name:         "injection attempt in a range",
		svc:          service(lb, ranges("0.0.0.0/0 -j ACCEPT")),
		wantSkipped:  "loadBalancerSourceRange",
		wantWarnings: []string{`"0.0.0.0/0 -j ACCEPT"`},
	}})
}

// A cluster IP is allocated from a ServiceCIDR, which the API server takes
// in any range: loopback, link-local and multicast cluster IPs reach
// kube-proxy, and its rules take them like any other.
func TestFromServiceSpecialClusterIPs(t *testing.T) {
	ip := func(s string) func(*servicemap.ServicePort) {
		return func(sp *servicemap.ServicePort) {
			sp.ClusterIP = addrs(s)[0]
			if sp.ClusterIP.Is6() {
				sp.Family = v1.IPv6Protocol
			}
		}
	}
	runConvertCases(t, []convertCase{{
		name:         "loopback",
		svc:          service(clusterIPs("127.0.0.10")),
		want:         []servicemap.ServicePort{port(ip("127.0.0.10"))},
		wantWarnings: []string{"loopback cluster IP 127.0.0.10 served, as kube-proxy serves it"},
	}, {
		name:         "link-local",
		svc:          service(clusterIPs("169.254.0.10")),
		want:         []servicemap.ServicePort{port(ip("169.254.0.10"))},
		wantWarnings: []string{"link-local cluster IP 169.254.0.10 served"},
	}, {
		name:         "multicast, link-local multicast included",
		svc:          service(clusterIPs("224.0.0.10")),
		want:         []servicemap.ServicePort{port(ip("224.0.0.10"))},
		wantWarnings: []string{"multicast cluster IP 224.0.0.10 served"},
	}, {
		name:         "IPv6 loopback, warned about in its family only",
		svc:          service(clusterIPs("10.96.0.10", "::1")),
		family:       v1.IPv6Protocol,
		want:         []servicemap.ServicePort{port(ip("::1"))},
		wantWarnings: []string{"loopback cluster IP ::1 served"},
	}, {
		name: "IPv6 loopback in the other family: no warning",
		svc:  service(clusterIPs("10.96.0.10", "::1")),
		want: []servicemap.ServicePort{port()},
	}, {
		name:         "IPv6 link-local",
		svc:          service(clusterIPs("fe80::10")),
		family:       v1.IPv6Protocol,
		want:         []servicemap.ServicePort{port(ip("fe80::10"))},
		wantWarnings: []string{"link-local cluster IP fe80::10 served"},
	}})
}
