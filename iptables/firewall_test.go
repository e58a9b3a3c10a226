package iptables

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestFirewallAllowsNodeOnlyWhenItsAddressIsAllowed: traffic that the node
// sends to its own load-balancer IP arrives from that IP; it passes the
// source-range firewall only when the ranges let the node's addresses
// through, as kube-proxy decides.
func TestFirewallAllowsNodeOnlyWhenItsAddressIsAllowed(t *testing.T) {
	lbSource := `-A KUBE-FW-NLSY6DROL7JRYYAN -m comment --comment "ns1/lb:p80 loadbalancer IP" -s 198.19.200.1 -j KUBE-EXT-NLSY6DROL7JRYYAN`
	for _, tt := range []struct {
		nodePortAddr, nodeIP string
		want                 bool
	}{
		{nodePortAddr: "198.18.0.1", want: true},
		{nodePortAddr: "198.18.99.1", want: false},
		{want: false},
		// kube-proxy's node IP decides, whatever the NodePort addresses.
		{nodeIP: "198.18.0.1", want: true},
		{nodePortAddr: "198.18.0.1", nodeIP: "198.18.99.1", want: false},
	} {
		cfg := testConfig()
		cfg.NodePortAddresses = nil
		if tt.nodePortAddr != "" {
			cfg.NodePortAddresses = []netip.Addr{netip.MustParseAddr(tt.nodePortAddr)}
		}
		if tt.nodeIP != "" {
			cfg.NodeIP = netip.MustParseAddr(tt.nodeIP)
		}
		rs := build(t, cfg,
			service("ns1", "lb", "198.19.0.20", loadBalancer(30090, "198.19.200.1"), sourceRanges("198.18.0.0/24")),
			slice("ns1", "lb", "lb-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
		if got := strings.Contains(string(Render(DefaultNames(), rs)), lbSource); got != tt.want {
			t.Errorf("NodePort address %q, node IP %q: rule letting the load-balancer IP through present = %v, want %v", tt.nodePortAddr, tt.nodeIP, got, tt.want)
		}
	}
}
