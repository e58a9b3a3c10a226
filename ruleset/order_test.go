package ruleset

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSortTargets: kube-proxy's order of a port's endpoints is that of their
// text (pkg/proxy/endpointslicecache.go sorts by Endpoint.String(),
// "address:port", compared byte by byte: ":" sorts after the digits), not
// the addresses' numeric order.
func TestSortTargets(t *testing.T) {
	for _, tt := range []struct {
		name     string
		in, want []string
	}{
		{"IPv4: text order", []string{"198.18.64.2:8080", "198.18.64.10:8080", "198.18.64.100:8080", "198.18.64.9:8080"},
			[]string{"198.18.64.100:8080", "198.18.64.10:8080", "198.18.64.2:8080", "198.18.64.9:8080"}},
		{"ports as text", []string{"198.18.64.2:9", "198.18.64.2:10"}, []string{"198.18.64.2:10", "198.18.64.2:9"}},
		{"IPv6", []string{"[2001:db8::a]:80", "[2001:db8::1a]:80", "[2001:db8::1]:80"}, []string{"[2001:db8::1]:80", "[2001:db8::1a]:80", "[2001:db8::a]:80"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := make([]Target, len(tt.in))
			for i, s := range tt.in {
				ts[i].Endpoint = netip.MustParseAddrPort(s)
			}
			sortTargets(ts)
			var got []string
			for _, tg := range ts {
				got = append(got, tg.Endpoint.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCompareEndpointTextIsTextOrder: the comparison without formatting
// agrees with comparing the texts, over IPv4 addresses and ports whose
// numbers have different lengths.
func TestCompareEndpointTextIsTextOrder(t *testing.T) {
	var aps []netip.AddrPort
	for _, o := range []byte{0, 1, 2, 9, 10, 19, 99, 100, 199, 255} {
		for _, port := range []uint16{1, 9, 10, 80, 443, 8080, 65535} {
			aps = append(aps, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, o, 10}), port),
				netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, o, 64, o}), port),
				netip.AddrPortFrom(netip.AddrFrom4([4]byte{o, 18, 64, 2}), port))
		}
	}
	for _, a := range aps {
		for _, b := range aps {
			want := strings.Compare(a.String(), b.String())
			if got := compareEndpointText(a, b); got != want {
				t.Fatalf("compareEndpointText(%v, %v) = %d, want %d", a, b, got, want)
			}
		}
	}
}
