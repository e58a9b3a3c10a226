package conntrack_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// A DNS Service whose pod 198.18.64.2 was replaced by 198.18.64.3: entries
// that still lead to the old pod are stale, whether the client came through
// the cluster IP or the node port; TCP entries are left alone.
func ExampleStaleFilters() {
	must := warnings.Must(warnings.Example)
	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dns"},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeNodePort,
			ClusterIP:  "198.19.0.10",
			ClusterIPs: []string{"198.19.0.10"},
			Ports: []v1.ServicePort{
				{Name: "dns", Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, NodePort: 30054, Protocol: v1.ProtocolTCP},
			},
		},
	}))
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	port, udp, tcp := int32(53), v1.ProtocolUDP, v1.ProtocolTCP
	dnsName, dnsTCPName := "dns", "dns-tcp"
	must.Used(eps.Update(&discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-system", Name: "dns-1",
			Labels: map[string]string{discovery.LabelServiceName: "dns"},
		},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"198.18.64.3"}}},
		Ports: []discovery.EndpointPort{
			{Name: &dnsName, Port: &port, Protocol: &udp},
			{Name: &dnsTCPName, Port: &port, Protocol: &tcp},
		},
	}))
	b, _ := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	svcSnap, _ := services.Snapshot()
	epSnap, _ := eps.Snapshot()
	rs, ws := b.Build(svcSnap, epSnap)
	must.None(ws)

	filters := conntrack.StaleFilters(rs, conntrack.Options{})
	for _, f := range filters {
		fmt.Println(f.String())
	}
	m := conntrack.NewMatcher(filters)
	for _, f := range []conntrack.Flow{
		{Protocol: v1.ProtocolUDP, OrigDst: netip.MustParseAddrPort("198.19.0.10:53"), ReplySrc: netip.MustParseAddrPort("198.18.64.2:53")},
		{Protocol: v1.ProtocolUDP, OrigDst: netip.MustParseAddrPort("198.19.0.10:53"), ReplySrc: netip.MustParseAddrPort("198.18.64.3:53")},
		{Protocol: v1.ProtocolUDP, OrigDst: netip.MustParseAddrPort("198.18.0.1:30053"), ReplySrc: netip.MustParseAddrPort("198.18.64.2:53")},
		{Protocol: v1.ProtocolTCP, OrigDst: netip.MustParseAddrPort("198.19.0.10:53"), ReplySrc: netip.MustParseAddrPort("198.18.64.2:53")},
	} {
		fmt.Printf("%v stale: %v\n", f, m.Matches(f))
	}
	// Output:
	// udp 198.19.0.10:53 keep [198.18.64.3:53] (kube-system/dns:dns)
	// udp *:30053 keep [198.18.64.3:53] (kube-system/dns:dns)
	// udp 198.19.0.10:53 → 198.18.64.2:53 stale: true
	// udp 198.19.0.10:53 → 198.18.64.3:53 stale: false
	// udp 198.18.0.1:30053 → 198.18.64.2:53 stale: true
	// tcp 198.19.0.10:53 → 198.18.64.2:53 stale: false
}

// kube-proxy's default sizing on a 16-CPU machine.
func ExampleSizing_Settings() {
	settings, err := conntrack.DefaultSizing().Settings(16)
	if err != nil {
		panic(err)
	}
	for _, s := range settings {
		fmt.Println(s)
	}
	// Output:
	// net/netfilter/nf_conntrack_max=524288
	// net/netfilter/nf_conntrack_buckets>=131072
	// net/netfilter/nf_conntrack_tcp_timeout_established=86400
	// net/netfilter/nf_conntrack_tcp_timeout_close_wait=3600
}

// The writer changes only what differs; here a directory stands in for
// /proc/sys.
func ExampleSysctlWriter() {
	root, _ := os.MkdirTemp("", "sysctl")
	defer os.RemoveAll(root)
	os.MkdirAll(filepath.Join(root, "net/netfilter"), 0o755)
	os.WriteFile(filepath.Join(root, conntrack.SysctlTCPEstablishedTimeout), []byte("432000\n"), 0o644)
	os.WriteFile(filepath.Join(root, conntrack.SysctlTCPCloseWaitTimeout), []byte("3600\n"), 0o644)

	settings, _ := conntrack.Sizing{TCPEstablishedTimeout: conntrack.DefaultTCPEstablishedTimeout, TCPCloseWaitTimeout: conntrack.DefaultTCPCloseWaitTimeout}.Settings(1)
	changes, err := conntrack.SysctlWriter{Root: root}.Apply(settings)
	fmt.Println(changes, err)
	// Output:
	// [net/netfilter/nf_conntrack_tcp_timeout_established: 432000 → 86400] <nil>
}

// Two readings a minute apart: the table is 75% full and two packets were
// lost to insert races on CPU 1.
func ExampleAssess() {
	const header = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n"
	before, _ := conntrack.ParseStat([]byte(header +
		"00017700  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n" +
		"00017700  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000005 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n"))
	after, _ := conntrack.ParseStat([]byte(header +
		"00018000  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n" +
		"00018000  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000007 00000000 00000000 00000000  00000000 00000000 00000000 00000000\n"))
	h := conntrack.Assess(
		&conntrack.Sample{Count: 96000, Max: 131072, CPUs: before},
		conntrack.Sample{Count: 98304, Max: 131072, CPUs: after},
	)
	fmt.Println(h.Level)
	for _, r := range h.Reasons {
		fmt.Println(r)
	}
	// Output:
	// critical
	// insert_failed grew by 2: packets lost to conntrack insert races (the UDP "DNS takes 5 seconds" race)
	// conntrack table 75.0% full (98304 of 131072 entries)
}
