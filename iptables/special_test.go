package iptables

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
)

// TestSpecialAddressesRenderedAsOrdinary: cluster IPs and load-balancer IPs
// in the special-purpose ranges the API server accepts there (a ServiceCIDR
// may cover any range; an ingress IP is checked for its form only) are
// rendered as kube-proxy renders them, exactly as an ordinary address in
// their place: its rules have no case for them. The Service has a node
// port and source ranges, with an endpoint and without (the filter
// rules).
func TestSpecialAddressesRenderedAsOrdinary(t *testing.T) {
	type family struct {
		v1.IPFamily
		cluster, lb, endpoint, podCIDR, sourceRange string
		specialClusterIPs, specialLBIPs             []string
	}
	for _, f := range []family{{
		v1.IPv4Protocol, "198.19.0.20", "198.19.200.1", "198.18.64.2", "198.18.64.0/18", "198.18.32.0/19",
		[]string{"127.0.0.10", "169.254.0.10", "224.0.0.10", "239.1.2.3"},
		[]string{"0.0.0.0", "127.0.0.5", "169.254.169.254", "224.0.0.5", "239.1.2.3"},
	}, {
		v1.IPv6Protocol, "2001:db8:19::20", "2001:db8:19:200::1", "2001:db8:18:40::2", "2001:db8:18:40::/58", "2001:db8:18:20::/64",
		[]string{"::1", "fe80::10", "ff02::10", "ff05::10"},
		[]string{"::", "::1", "fe80::5", "ff02::5", "ff05::5"},
	}} {
		render := func(t *testing.T, clusterIP, lbIP string, withEndpoint bool, warnings ...string) string {
			t.Helper()
			cfg := testConfig()
			cfg.Family = f.IPFamily
			cfg.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix(f.podCIDR)}
			objs := []any{service("ns1", "lb", clusterIP, loadBalancer(30090, lbIP), sourceRanges(f.sourceRange))}
			if withEndpoint {
				objs = append(objs, slice("ns1", "lb", "lb-1", 8080, v1.ProtocolTCP, ep{ip: f.endpoint, node: testNode, ready: true}))
			}
			rules := Render(DefaultNames(), fixture.RulesetWarned(t, cfg, warnings, objs...))
			if _, err := applyRestore(newModel(), rules); err != nil {
				t.Errorf("model rejects the rendering: %v", err)
			}
			return string(rules)
		}
		check := func(t *testing.T, clusterIP, lbIP, special, ordinary, warning string) {
			for _, withEndpoint := range []bool{true, false} {
				got := render(t, clusterIP, lbIP, withEndpoint, warning)
				if !strings.Contains(got, " -d "+special+" --dport 80 ") {
					t.Errorf("endpoint %v: no rule for -d %s --dport 80:\n%s", withEndpoint, special, got)
				}
				want := replaceToken(render(t, f.cluster, f.lb, withEndpoint), ordinary, special)
				if got != want {
					t.Errorf("endpoint %v: rendered unlike %s in its place:\n%s", withEndpoint, ordinary, lineDiff(want, got))
				}
			}
		}
		for _, ip := range f.specialClusterIPs {
			t.Run("cluster IP "+ip, func(t *testing.T) { check(t, ip, f.lb, ip, f.cluster, "cluster IP "+ip+" served") })
		}
		for _, ip := range f.specialLBIPs {
			t.Run("load-balancer IP "+ip, func(t *testing.T) {
				check(t, f.cluster, ip, ip, f.lb, "load-balancer ingress IP "+ip+" served")
			})
		}
	}
}

// replaceToken replaces each space-separated token of text equal to old
// with new.
func replaceToken(text, old, new string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		tokens := strings.Split(l, " ")
		for j, tok := range tokens {
			if tok == old {
				tokens[j] = new
			}
		}
		lines[i] = strings.Join(tokens, " ")
	}
	return strings.Join(lines, "\n")
}
