package conntrack_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/conntrack"
)

// Invariants of StaleFilters and Matcher over random Services: TCP is never
// stale; an entry to a Service's frontend answered by one of its endpoints is
// never stale; answered by anything else, it always is; the order of the
// Services does not matter.
func TestStaleFiltersProperties(t *testing.T) {
	podAddrs := []string{"198.18.64.2", "198.18.65.2", "198.18.66.2", "198.18.67.2"}
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 6).Draw(rt, "services")
		nodePorts := rapid.Permutation([]int32{30001, 30002, 30003, 30004, 30005, 30006}).Draw(rt, "nodePorts")
		var svcs []svc
		for i := range n {
			s := svc{
				name:      fmt.Sprintf("s%d", i),
				proto:     rapid.SampledFrom([]v1.Protocol{v1.ProtocolUDP, v1.ProtocolTCP}).Draw(rt, "proto"),
				clusterIP: fmt.Sprintf("198.19.0.%d", 10+i),
				port:      rapid.SampledFrom([]int32{53, 30001, 8080}).Draw(rt, "port"),
				target:    rapid.SampledFrom([]int32{53, 5353}).Draw(rt, "target"),
			}
			if rapid.Bool().Draw(rt, "nodePort") {
				s.nodePort = nodePorts[i]
			}
			for _, a := range podAddrs {
				if rapid.Bool().Draw(rt, "ep-"+a) {
					s.eps = append(s.eps, a)
				}
			}
			svcs = append(svcs, s)
		}
		filters := conntrack.StaleFilters(build(rt, v1.IPv4Protocol, svcs...), conntrack.Options{})
		m := conntrack.NewMatcher(filters)
		for _, s := range svcs {
			fronts := []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr(s.clusterIP), uint16(s.port))}
			if s.nodePort != 0 {
				fronts = append(fronts, netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), uint16(s.nodePort)))
			}
			for _, front := range fronts {
				for _, a := range append(slices.Clone(podAddrs), s.clusterIP) {
					for _, port := range []int32{53, 5353} {
						reply := netip.AddrPortFrom(netip.MustParseAddr(a), uint16(port))
						f := conntrack.Flow{Protocol: s.protocol(), OrigDst: front, ReplySrc: reply}
						want := s.protocol() == v1.ProtocolUDP && !(slices.Contains(s.eps, a) && port == s.target)
						if got := m.Matches(f); got != want {
							rt.Fatalf("Matches(%v) = %v, want %v; filters %v", f, got, want, filters)
						}
						if f.Protocol = v1.ProtocolTCP; m.Matches(f) {
							rt.Fatalf("TCP entry %v found stale", f)
						}
					}
				}
			}
		}
		shuffled := slices.Clone(svcs)
		rand.New(rand.NewPCG(uint64(n), 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if diff := cmp.Diff(filters, conntrack.StaleFilters(build(rt, v1.IPv4Protocol, shuffled...), conntrack.Options{}), cmpOpts); diff != "" {
			rt.Fatalf("order matters (-sorted +shuffled):\n%s", diff)
		}
	})
}

func TestFlowFromNetlink(t *testing.T) {
	tests := []struct {
		in     netlink.ConntrackFlow
		want   conntrack.Flow
		wantOK bool
	}{
		{
			in: netlink.ConntrackFlow{
				FamilyType: unix.AF_INET,
				Forward:    netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: netipIP("198.18.32.2"), DstIP: netipIP("198.19.0.10"), SrcPort: 40000, DstPort: 53},
				Reverse:    netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: netipIP("198.18.64.2"), DstIP: netipIP("198.18.32.2"), SrcPort: 5353, DstPort: 40000},
			},
			want:   conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("198.19.0.10:53"), ReplySrc: ap("198.18.64.2:5353")},
			wantOK: true,
		},
		{
			in: netlink.ConntrackFlow{
				FamilyType: unix.AF_INET6,
				Forward:    netlink.IPTuple{Protocol: unix.IPPROTO_TCP, DstIP: netipIP("2001:db8:19::10"), DstPort: 80},
				Reverse:    netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: netipIP("2001:db8:18:40::2"), SrcPort: 8080},
			},
			want:   conntrack.Flow{Protocol: v1.ProtocolTCP, OrigDst: ap("[2001:db8:19::10]:80"), ReplySrc: ap("[2001:db8:18:40::2]:8080")},
			wantOK: true,
		},
		{
			// A 16-byte IPv4 address (as net.ParseIP makes) reads as IPv4.
			in: netlink.ConntrackFlow{
				Forward: netlink.IPTuple{Protocol: unix.IPPROTO_SCTP, DstIP: netipIP("198.19.0.10").To16(), DstPort: 3868},
				Reverse: netlink.IPTuple{Protocol: unix.IPPROTO_SCTP, SrcIP: netipIP("198.18.64.2").To16(), SrcPort: 3868},
			},
			want:   conntrack.Flow{Protocol: v1.ProtocolSCTP, OrigDst: ap("198.19.0.10:3868"), ReplySrc: ap("198.18.64.2:3868")},
			wantOK: true,
		},
		{in: netlink.ConntrackFlow{Forward: netlink.IPTuple{Protocol: unix.IPPROTO_ICMP, DstIP: netipIP("198.19.0.10")}, Reverse: netlink.IPTuple{SrcIP: netipIP("198.18.64.2")}}},
		{in: netlink.ConntrackFlow{Forward: netlink.IPTuple{Protocol: unix.IPPROTO_UDP}}},
	}
	for i, tt := range tests {
		got, ok := conntrack.FlowFromNetlink(&tt.in)
		if ok != tt.wantOK || got != tt.want {
			t.Errorf("%d: FlowFromNetlink = %v, %v; want %v, %v", i, got, ok, tt.want, tt.wantOK)
		}
	}
}

func netipIP(s string) net.IP { return net.IP(netip.MustParseAddr(s).AsSlice()) }
