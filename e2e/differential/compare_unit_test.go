//go:build linux

package differential

import (
	"math/big"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// TestCompareFindsDifferences: the comparison itself (no kernel, no API
// server) reports a probe whose outcomes differ, with both outcomes, and
// none where the rules agree though they are written differently.
func TestCompareFindsDifferences(t *testing.T) {
	rules := func(body string) evaluator {
		t.Helper()
		e, err := parse("iptables", "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\n"+body+"COMMIT\n")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	to := func(eps ...string) string {
		var b strings.Builder
		b.WriteString("-A KUBE-SERVICES -d 198.19.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A\n")
		for i, ep := range eps {
			if i < len(eps)-1 {
				b.WriteString("-A KUBE-SVC-A -m statistic --mode random --probability 0.50000000000 -p tcp -j DNAT --to-destination " + ep + "\n")
			} else {
				b.WriteString("-A KUBE-SVC-A -p tcp -j DNAT --to-destination " + ep + "\n")
			}
		}
		return b.String()
	}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: namespace}, Spec: v1.ServiceSpec{
		ClusterIPs: []string{"198.19.0.10"}, Ports: []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}}}}
	ps := probes([]*v1.Service{svc}, nil, false)
	if len(ps) == 0 {
		t.Fatal("no probes for a cluster IP")
	}
	ref := rules(to("198.18.64.2:8080", "198.18.65.2:8080"))
	for _, tc := range []struct {
		name  string
		ours  evaluator
		diffs int
	}{
		{"the same targets in another order", rules(to("198.18.65.2:8080", "198.18.64.2:8080")), 0},
		{"another target", rules(to("198.18.64.2:8080", "198.18.66.2:8080")), len(ps) / 2}, // the TCP probes, not the UDP ones
		{"no rules", rules(""), len(ps) / 2},
	} {
		c := compare("iptables", ref, tc.ours, ps)
		if c.probes != len(ps) || len(c.differences) != tc.diffs {
			t.Errorf("%s: %d probes, %d differences, want %d and %d: %v", tc.name, c.probes, len(c.differences), len(ps), tc.diffs, c.differences)
		}
		for _, d := range c.differences {
			if d.probe.packet.Protocol != v1.ProtocolTCP || d.ref.Verdict == d.ours.Verdict && tc.name == "no rules" {
				t.Errorf("%s: unexpected difference %v", tc.name, d)
			}
			if s := d.String(); !strings.Contains(s, "198.18.64.2") || !strings.Contains(s, d.probe.src.name) {
				t.Errorf("%s: the report does not name the probe and outcomes: %s", tc.name, s)
			}
		}
	}
	// A probe's packet is what its frontend and source say.
	for _, p := range ps {
		if p.packet.Dst != netip.MustParseAddrPort("198.19.0.10:80") || p.packet.FromNode != p.src.fromNode {
			t.Errorf("probe %v: packet %v", p, p.packet)
		}
	}
}

// TestExclusions: each known difference covers its own case and nothing
// else.
func TestExclusions(t *testing.T) {
	ep := netip.MustParseAddrPort("198.18.65.2:8080")
	forward := func(masq bool) trace.Outcome {
		return trace.Outcome{Verdict: ruleset.VerdictForward, Targets: []ruleset.Choice{{Target: ruleset.Target{Endpoint: ep}, Share: big.NewRat(1, 1), Masquerade: masq}}}
	}
	hairpin := probe{src: source{name: "hairpin", addr: ep.Addr()}}
	local := hairpin
	local.srcLocal = true
	elsewhere := hairpin
	elsewhere.localElsewhere = true
	byName := map[string]exclusion{}
	for _, e := range exclusions {
		byName[e.name] = e
	}
	for _, tc := range []struct {
		name, exclusion, mode string
		p                     probe
		ref, ours             trace.Outcome
		want                  bool
	}{
		{"duplicated", "one address listed twice in a Service's EndpointSlices", "iptables", probe{duplicated: true}, forward(false), trace.Outcome{}, true},
		{"not duplicated", "one address listed twice in a Service's EndpointSlices", "iptables", probe{}, forward(false), trace.Outcome{}, false},
		{"flat, hairpin of an address local by another Service", "hairpin of an address two Services place on different nodes (flat layout)", "nftables (flat layout)", elsewhere, forward(false), forward(true), true},
		{"kube-proxy layout, same probe", "hairpin of an address two Services place on different nodes (flat layout)", "nftables (kube-proxy layout)", elsewhere, forward(false), forward(true), false},
		{"flat, address local nowhere", "hairpin of an address two Services place on different nodes (flat layout)", "nftables (flat layout)", hairpin, forward(false), forward(true), false},
		{"flat, another difference", "hairpin of an address two Services place on different nodes (flat layout)", "nftables (flat layout)", elsewhere, forward(false), trace.Outcome{Verdict: ruleset.VerdictReject}, false},
		{"shared", "two Service ports with one frontend", "iptables", probe{shared: true}, forward(false), trace.Outcome{}, true},
		{"not shared", "two Service ports with one frontend", "iptables", probe{}, forward(false), trace.Outcome{}, false},
	} {
		e, ok := byName[tc.exclusion]
		if !ok {
			t.Fatalf("no exclusion %q", tc.exclusion)
		}
		if got := e.covers(tc.mode, tc.p, tc.ref, tc.ours); got != tc.want {
			t.Errorf("%s: covered %v, want %v", tc.name, got, tc.want)
		}
	}
}
