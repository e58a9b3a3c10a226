package ruleset

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/servicemap"
)

// sharedBySort is SharedDestinations as the sort of every frontend finds
// it (sortedDestinations, the Frontend index's path): the oracle of the
// tests below.
func sharedBySort(svcs []*Service) []Frontend {
	var shared []Frontend
	var cur *Frontend
	var first destEntry
	one := true
	eachDestination(sortedDestinations(svcs, [][2]int{{0, len(svcs)}}), func(d *Frontend, e destEntry) {
		switch {
		case cur != nil && *d == *cur:
			one = one && e.svc == first.svc && e.kind == first.kind
			return
		case cur != nil && !one:
			shared = append(shared, *cur)
		}
		cur, first, one = d, e, true
	})
	if cur != nil && !one {
		shared = append(shared, *cur)
	}
	return shared
}

// Pools of the hostile Services: addresses without a frontendKey (zoned),
// an invalid one (a node port's destination), IPv4 and its IPv4-mapped
// form, protocols of none of Kubernetes' three, ports equal to node ports.
var (
	hostileAddrs = []netip.Addr{{}, netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2"),
		netip.MustParseAddr("::ffff:198.19.0.1"), netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("2001:db8::1%eth0"), netip.MustParseAddr("2001:db8::1%eth1")}
	hostileProtocols = []v1.Protocol{"", v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "tcp", "ICMP"}
	hostilePorts     = []uint16{0, 80, 30080}
)

// genHostileServices draws minN to maxN Services, sorted by name, from the
// hostile pools: destinations collide often, within a Service too. Three
// in four have a cluster IP of their own.
func genHostileServices(t *rapid.T, minN, maxN int) []*Service {
	addr := rapid.SampledFrom(hostileAddrs)
	addrs := rapid.SliceOfN(addr, 0, 3)
	port := rapid.SampledFrom(hostilePorts)
	n := rapid.IntRange(minN, maxN).Draw(t, "services")
	svcs := make([]*Service, n)
	for i := range svcs {
		s := &Service{ServicePort: &servicemap.ServicePort{}}
		s.Name = servicemap.PortName{Namespace: "ns", Name: fmt.Sprintf("s%05d", i),
			Protocol: rapid.SampledFrom(hostileProtocols).Draw(t, "protocol")}
		s.ClusterIP = addr.Draw(t, "clusterIP")
		if rapid.IntRange(0, 3).Draw(t, "unique") > 0 {
			s.ClusterIP = netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		}
		s.Port = port.Draw(t, "port")
		s.NodePort = port.Draw(t, "nodePort")
		s.ExternalIPs = addrs.Draw(t, "externalIPs")
		s.LoadBalancerIPs = addrs.Draw(t, "loadBalancerIPs")
		svcs[i] = s
	}
	return svcs
}

// Property: sharedDestinations gives what the sort of every frontend
// gives, for hostile Services, in any number of ranges, and with hashes
// cut to so few bits that most destinations collide (0 bits: all).
func TestPropSharedDestinationsAsSort(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkSharedAsSort(t, genHostileServices(t, 0, 40)) })
}

// Property: as TestPropSharedDestinationsAsSort, for clusters with enough
// frontends that sortByTopBits puts them into buckets.
func TestPropSharedDestinationsAsSortMany(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkSharedAsSort(t, genHostileServices(t, minBucketSort/2, 1000)) })
}

// checkSharedAsSort fails t when sharedDestinations of svcs, in some
// layouts and ranges, differs from sharedBySort's.
func checkSharedAsSort(t *rapid.T, svcs []*Service) {
	want := sharedBySort(svcs)
	full := layoutFor(len(svcs))
	for _, hashBits := range []uint{full.hashBits, 2, 0} {
		l := keyLayout{hashBits: hashBits, svcBits: full.svcBits}
		for _, k := range []int{1, 2, 3, 7} {
			got := sharedDestinations(svcs, parallel.Split(len(svcs), k), l)
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b Frontend) bool { return a == b })); diff != "" {
				t.Fatalf("%d hash bits, %d ranges (-sort +keys):\n%s", hashBits, k, diff)
			}
		}
	}
}

// Property: sortByTopBits sorts any keys, few or many: spread, or equal in
// their top bits (one bucket), or in a few buckets, with duplicates.
func TestPropSortByTopBits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		minLen := rapid.SampledFrom([]int{0, minBucketSort}).Draw(t, "minLen")
		keys := rapid.SliceOfN(rapid.Uint64(), minLen, 4*minBucketSort).Draw(t, "keys")
		mask := rapid.SampledFrom([]uint64{^uint64(0), ^uint64(0) >> 20, 0xF<<60 | 0xFFFF, 0xF<<60 | 1}).Draw(t, "mask")
		for i := range keys {
			keys[i] &= mask
		}
		want := slices.Sorted(slices.Values(keys))
		if len(keys) == 0 {
			want = keys
		}
		if diff := cmp.Diff(want, sortByTopBits(keys)); diff != "" {
			t.Fatalf("(-slices.Sort +sortByTopBits):\n%s", diff)
		}
	})
}

// TestSharedDestinationsCases checks cases named one by one, with the full
// hash and with every destination's hash colliding.
func TestSharedDestinationsCases(t *testing.T) {
	ip := netip.MustParseAddr
	tcp := func(name string, cluster string, port uint16, mods ...func(*Service)) *Service {
		s := &Service{ServicePort: &servicemap.ServicePort{}}
		s.Name = servicemap.PortName{Namespace: "ns", Name: name, Protocol: v1.ProtocolTCP}
		s.ClusterIP, s.Port = ip(cluster), port
		for _, m := range mods {
			m(s)
		}
		return s
	}
	ext := func(ips ...string) func(*Service) {
		return func(s *Service) {
			for _, a := range ips {
				s.ExternalIPs = append(s.ExternalIPs, ip(a))
			}
		}
	}
	lb := func(ips ...string) func(*Service) {
		return func(s *Service) {
			for _, a := range ips {
				s.LoadBalancerIPs = append(s.LoadBalancerIPs, ip(a))
			}
		}
	}
	at := func(addr string, port uint16) Frontend {
		return Frontend{Addr: ip(addr), Protocol: v1.ProtocolTCP, Port: port}
	}
	for _, tc := range []struct {
		name string
		svcs []*Service
		want []Frontend
	}{
		{"none shared", []*Service{tcp("a", "198.19.0.1", 80), tcp("b", "198.19.0.2", 80)}, nil},
		{"external IP of two Services", []*Service{
			tcp("a", "198.19.0.1", 80, ext("203.0.113.1")), tcp("b", "198.19.0.2", 80, ext("203.0.113.1"))},
			[]Frontend{at("203.0.113.1", 80)}},
		{"one Service, an address both external and load-balancer", []*Service{
			tcp("a", "198.19.0.1", 80, ext("203.0.113.1"), lb("203.0.113.1"))},
			[]Frontend{at("203.0.113.1", 80)}},
		{"one Service, an external IP twice", []*Service{
			tcp("a", "198.19.0.1", 80, ext("203.0.113.1", "203.0.113.1"))}, nil},
		{"two ports of one cluster IP", []*Service{tcp("a", "198.19.0.1", 80), tcp("b", "198.19.0.1", 443)},
			[]Frontend{{Addr: ip("198.19.0.1")}}},
		{"zoned, shared and not", []*Service{
			tcp("a", "2001:db8::1%eth0", 80), tcp("b", "2001:db8::1%eth0", 80), tcp("c", "2001:db8::1%eth1", 443)},
			[]Frontend{{Addr: ip("2001:db8::1%eth0")}, at("2001:db8::1%eth0", 80)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := layoutFor(len(tc.svcs))
			for _, hashBits := range []uint{full.hashBits, 0} {
				l := keyLayout{hashBits: hashBits, svcBits: full.svcBits}
				got := sharedDestinations(tc.svcs, [][2]int{{0, len(tc.svcs)}}, l)
				if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b Frontend) bool { return a == b })); diff != "" {
					t.Fatalf("%d hash bits (-want +got):\n%s", hashBits, diff)
				}
			}
		})
	}
}
