package ruleset

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestFrontendKeyOrdersAsCompare checks, for every pair of Frontends made
// of some addresses (none, IPv4, IPv4-mapped, IPv6, zoned), protocols,
// ports and kinds, that frontendKey orders them as Frontend.Compare does,
// and that only those with a zone or a protocol of none of Kubernetes'
// three have no key.
func TestFrontendKeyOrdersAsCompare(t *testing.T) {
	addrs := []netip.Addr{{}, netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.1.0"),
		netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("::"), netip.MustParseAddr("::ffff:198.19.0.1"),
		netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:1::"), netip.MustParseAddr("2001:db8::1%eth0")}
	protos := []v1.Protocol{"", v1.ProtocolSCTP, v1.ProtocolTCP, v1.ProtocolUDP, "tcp", "ICMP"}
	var all []Frontend
	for _, a := range addrs {
		for _, p := range protos {
			for _, port := range []uint16{0, 80, 443, 65535} {
				for _, k := range []FrontendKind{0, KindClusterIP, KindNodePort, KindLoadBalancerIP} {
					all = append(all, Frontend{Kind: k, Addr: a, Protocol: p, Port: port})
				}
			}
		}
	}
	sign := func(n int) int { return min(max(n, -1), 1) }
	keys := make([]frontendKey, len(all))
	keyed := make([]bool, len(all))
	for i, f := range all {
		keys[i], keyed[i] = frontendKeyOf(f)
		known := f.Protocol == "" || f.Protocol == v1.ProtocolSCTP || f.Protocol == v1.ProtocolTCP || f.Protocol == v1.ProtocolUDP
		if want := known && f.Addr.Zone() == ""; keyed[i] != want {
			t.Fatalf("frontendKeyOf(%+v) ok = %v, want %v", f, keyed[i], want)
		}
	}
	for i, f := range all {
		for j, g := range all {
			if !keyed[i] || !keyed[j] {
				continue
			}
			if got, want := sign(keys[i].compare(keys[j])), sign(f.Compare(g)); got != want {
				t.Fatalf("key compare of %+v and %+v = %d, Compare = %d", f, g, got, want)
			}
		}
	}
}
