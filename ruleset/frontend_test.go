package ruleset_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

func TestFrontendString(t *testing.T) {
	tests := []struct {
		f    ruleset.Frontend
		want string
	}{
		{ruleset.Frontend{Kind: ruleset.KindClusterIP, Addr: netip.MustParseAddr("198.19.0.10"), Protocol: v1.ProtocolTCP, Port: 80}, "198.19.0.10:80/TCP"},
		{ruleset.Frontend{Kind: ruleset.KindLoadBalancerIP, Addr: netip.MustParseAddr("2001:db8:19::10"), Protocol: v1.ProtocolUDP, Port: 53}, "[2001:db8:19::10]:53/UDP"},
		{ruleset.Frontend{Kind: ruleset.KindNodePort, Protocol: v1.ProtocolSCTP, Port: 30080}, "node port 30080/SCTP"},
		{ruleset.Frontend{Kind: ruleset.KindClusterAddress, Addr: netip.MustParseAddr("198.19.0.10")}, "198.19.0.10"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.f, got, tt.want)
		}
	}
}
