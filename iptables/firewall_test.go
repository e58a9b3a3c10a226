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
		nodeIP string
		want   bool
	}{{"198.18.0.1", true}, {"198.18.99.1", false}, {"", false}} {
		cfg := testConfig()
		cfg.NodePortAddresses = nil
		if tt.nodeIP != "" {
			cfg.NodePortAddresses = []netip.Addr{netip.MustParseAddr(tt.nodeIP)}
		}
		rs := build(t, cfg,
			service("ns1", "lb", "198.19.0.20", loadBalancer(30090, "198.19.200.1"), sourceRanges("198.18.0.0/24")),
			slice("ns1", "lb", "lb-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
		if got := strings.Contains(string(Render(DefaultNames(), rs)), lbSource); got != tt.want {
			t.Errorf("node address %q: rule letting the load-balancer IP through present = %v, want %v", tt.nodeIP, got, tt.want)
		}
	}
}
