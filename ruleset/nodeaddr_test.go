package ruleset_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

func TestNodeAddresses(t *testing.T) {
	both := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	warn := func(reason string) svcproxy.Warning {
		return svcproxy.Warning{Kind: "Node", Name: "n1", Reason: reason}
	}
	tests := []struct {
		name      string
		addresses []v1.NodeAddress
		families  []v1.IPFamily
		want      []netip.Addr
		warnings  []svcproxy.Warning
	}{
		{
			name: "internal and external of both families, in order",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeExternalIP, Address: "2001:db8::1"},
				{Type: v1.NodeInternalIP, Address: "198.18.0.1"},
			},
			families: both,
			want:     addrs("2001:db8::1", "198.18.0.1"),
		},
		{
			name: "other address types ignored",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeHostName, Address: "node-1"},
				{Type: v1.NodeInternalDNS, Address: "node-1.example"},
				{Type: v1.NodeInternalIP, Address: "198.18.0.1"},
			},
			families: both,
			want:     addrs("198.18.0.1"),
		},
		{
			name: "duplicates once",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "198.18.0.1"},
				{Type: v1.NodeExternalIP, Address: "198.18.0.1"},
				{Type: v1.NodeExternalIP, Address: "::ffff:198.18.0.1"},
			},
			families: both,
			want:     addrs("198.18.0.1"),
		},
		{
			name: "IPv4-mapped IPv6 is IPv4",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "::ffff:198.18.0.1"},
			},
			families: []v1.IPFamily{v1.IPv4Protocol},
			want:     addrs("198.18.0.1"),
		},
		{
			name: "zone skipped, the rest kept",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "fe80::1%veth0"},
				{Type: v1.NodeInternalIP, Address: "2001:db8::1"},
			},
			families: both,
			want:     addrs("2001:db8::1"),
			warnings: []svcproxy.Warning{warn(`InternalIP address "fe80::1%veth0" has a zone: skipped`)},
		},
		{
			name: "other family skipped",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "198.18.0.1"},
				{Type: v1.NodeExternalIP, Address: "2001:db8::1"},
			},
			families: []v1.IPFamily{v1.IPv4Protocol},
			want:     addrs("198.18.0.1"),
			warnings: []svcproxy.Warning{warn(`ExternalIP address "2001:db8::1" is IPv6, a family not served: skipped`)},
		},
		{
			name: "unparsable, unspecified and multicast skipped",
			addresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "198.18.0.999"},
				{Type: v1.NodeInternalIP, Address: "x\ny"},
				{Type: v1.NodeInternalIP, Address: "0.0.0.0"},
				{Type: v1.NodeInternalIP, Address: "ff02::1"},
				{Type: v1.NodeInternalIP, Address: "198.18.0.1"},
			},
			families: both,
			want:     addrs("198.18.0.1"),
			warnings: []svcproxy.Warning{
				warn(`InternalIP address "198.18.0.999" is not an IP address: skipped`),
				warn(`InternalIP address "x\ny" is not an IP address: skipped`),
				warn(`InternalIP address "0.0.0.0" is not a unicast address: skipped`),
				warn(`InternalIP address "ff02::1" is not a unicast address: skipped`),
			},
		},
		{
			name:      "no families: every address skipped",
			addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "198.18.0.1"}},
			warnings:  []svcproxy.Warning{warn(`InternalIP address "198.18.0.1" is IPv4, a family not served: skipped`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Addresses: tt.addresses}}
			got, warnings := ruleset.NodeAddresses(n, tt.families...)
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.warnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodeAddressesAreAccepted: whatever a Node holds, the addresses
// NodeAddresses returns for one family make a Config that NewBuilder
// accepts.
func TestNodeAddressesAreAccepted(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "fe80::1%veth0"},
		{Type: v1.NodeInternalIP, Address: "fe80::2"},
		{Type: v1.NodeInternalIP, Address: "::ffff:198.18.0.2"},
		{Type: v1.NodeInternalIP, Address: "198.18.0.1"},
		{Type: v1.NodeExternalIP, Address: "2001:db8::1"},
		{Type: v1.NodeExternalIP, Address: "nope"},
	}}}
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		got, ws := ruleset.NodeAddresses(n, f)
		if len(got)+len(ws) != len(n.Status.Addresses) {
			t.Errorf("%s: warnings %v, want one for each address not taken", f, ws)
		}
		if len(got) != 2 {
			t.Errorf("%s: %v, want two addresses", f, got)
		}
		if _, err := ruleset.NewBuilder(ruleset.Config{Family: f, NodePortAddresses: got}); err != nil {
			t.Errorf("%s: NewBuilder refused the Node's addresses %v: %v", f, got, err)
		}
	}
}

func TestNodeAddressesNilNode(t *testing.T) {
	if got, warnings := ruleset.NodeAddresses(nil, v1.IPv4Protocol); got != nil || warnings != nil {
		t.Errorf("nil Node: %v, %v; want nothing", got, warnings)
	}
}
