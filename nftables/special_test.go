package nftables_test

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

// TestSpecialAddressesRenderedAsOrdinary: cluster IPs and load-balancer IPs
// in the special-purpose ranges the API server accepts there (a ServiceCIDR
// may cover any range; an ingress IP is checked for its form only) are
// rendered as kube-proxy renders them, in both layouts as an ordinary
// address in their place (up to the order of lines and elements, which
// follows the addresses): its rules have no case for them. The
// Service has a node port and source ranges, with an endpoint and without.
func TestSpecialAddressesRenderedAsOrdinary(t *testing.T) {
	type family struct {
		cfg                                func() ruleset.Config
		cluster, lb, endpoint, sourceRange string
		specialClusterIPs, specialLBIPs    []string
	}
	for _, f := range []family{{
		config4, "198.19.0.20", "198.19.200.1", "198.18.64.2", "198.18.32.0/19",
		[]string{"127.0.0.10", "169.254.0.10", "224.0.0.10", "239.1.2.3"},
		[]string{"0.0.0.0", "127.0.0.5", "169.254.169.254", "224.0.0.5", "239.1.2.3"},
	}, {
		config6, "2001:db8:19::20", "2001:db8:19:200::1", "2001:db8:18:40::2", "2001:db8:18:20::/64",
		[]string{"::1", "fe80::10", "ff02::10", "ff05::10"},
		[]string{"::", "::1", "fe80::5", "ff02::5", "ff05::5"},
	}} {
		build := func(t *testing.T, clusterIP, lbIP string, withEndpoint bool, warnings ...string) *ruleset.Ruleset {
			t.Helper()
			objs := []any{svc("ns1", "lb", clusterIP, loadBalancer(lbIP), nodePort(30090), sourceRanges(f.sourceRange))}
			if withEndpoint {
				objs = append(objs, slice("ns1", "lb", 8080, ep{ip: f.endpoint, node: node}))
			}
			return fixture.RulesetWarned(t, f.cfg(), warnings, objs...)
		}
		layouts := map[string]func(t *testing.T, rs *ruleset.Ruleset) string{
			"kube-proxy layout": func(t *testing.T, rs *ruleset.Ruleset) string {
				fake := knftables.NewFake(nftables.Family(rs.Config().Family), nftables.DefaultTable)
				tx := fake.NewTransaction()
				if _, err := nftables.Render(tx, rs, nftables.Options{}, nil); err != nil {
					t.Fatal(err)
				}
				apply(t, fake, tx)
				return fake.Dump()
			},
			"flat layout": func(t *testing.T, rs *ruleset.Ruleset) string {
				_, script, _ := flat.Script(rs, flat.Options{})
				return script
			},
		}
		check := func(t *testing.T, clusterIP, lbIP, special, ordinary, warning string) {
			for layout, script := range layouts {
				for _, withEndpoint := range []bool{true, false} {
					got := script(t, build(t, clusterIP, lbIP, withEndpoint, warning))
					if !strings.Contains(got, " "+special+" ") {
						t.Errorf("%s, endpoint %v: %s not in the rules:\n%s", layout, withEndpoint, special, got)
					}
					want := replaceToken(script(t, build(t, f.cluster, f.lb, withEndpoint)), ordinary, special)
					if got, want := unordered(got), unordered(want); got != want {
						t.Errorf("%s, endpoint %v: rendered unlike %s in its place:\n got: %s\nwant: %s", layout, withEndpoint, ordinary, got, want)
					}
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

// unordered is text with its lines sorted, and the elements of each line's
// "{ … }" list sorted.
func unordered(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		start, end := strings.Index(l, "{ "), strings.LastIndex(l, " }")
		if start < 0 || end < start+2 {
			continue
		}
		elems := strings.Split(l[start+2:end], ", ")
		slices.Sort(elems)
		lines[i] = l[:start+2] + strings.Join(elems, ", ") + l[end:]
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
