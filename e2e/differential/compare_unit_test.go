//go:build linux

package differential

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestUndefinedCases: the probes of kube-proxy's undefined cases are
// exactly those whose outcome depends on the order kube-proxy iterates a
// map in: a Service port with copies of one endpoint, in different slices,
// that kube-proxy may keep either of, and hairpin from such an address
// with the port's protocol; a frontend that Service ports of two
// Services claim. Each case covers its own probes and no other's.
func TestUndefinedCases(t *testing.T) {
	ready := discovery.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	notReady := discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	terminating := discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	type copy struct {
		node string
		cond discovery.EndpointConditions
	}
	// svc is Service name with one TCP port "p0" on cluster IP ip, 80 →
	// 8000, whose slices list 198.18.64.2 as copies, a slice each (or
	// all in one slice when together), and 198.18.65.2 once.
	svc := func(name, ip string, together bool, copies ...copy) (*v1.Service, []*discovery.EndpointSlice) {
		s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: v1.ServiceSpec{
			ClusterIPs: []string{ip}, Ports: []v1.ServicePort{{Name: "p0", Protocol: v1.ProtocolTCP, Port: 80}}}}
		slice := func(i int, eps ...discovery.Endpoint) *discovery.EndpointSlice {
			return &discovery.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: namespace, Labels: map[string]string{discovery.LabelServiceName: name}},
				AddressType: discovery.AddressTypeIPv4,
				Ports:       []discovery.EndpointPort{{Name: ptr("p0"), Protocol: ptr(v1.ProtocolTCP), Port: ptr[int32](8000)}},
				Endpoints:   eps,
			}
		}
		other := discovery.Endpoint{Addresses: []string{"198.18.65.2"}, Conditions: ready}
		var eps []discovery.Endpoint
		for _, c := range copies {
			eps = append(eps, discovery.Endpoint{Addresses: []string{"198.18.64.2"}, NodeName: ptr(c.node), Conditions: c.cond})
		}
		if together || len(eps) == 0 {
			return s, []*discovery.EndpointSlice{slice(0, append(eps, other)...)}
		}
		out := []*discovery.EndpointSlice{slice(0, other)}
		for i, e := range eps {
			out = append(out, slice(i+1, e))
		}
		return s, out
	}
	for _, tc := range []struct {
		name      string
		together  bool
		copies    []copy
		unordered bool
	}{
		{"one copy", false, []copy{{nodeName, ready}}, false},
		{"copies in one slice", true, []copy{{nodeName, ready}, {"node-b", ready}}, false},
		{"equal copies in two slices", false, []copy{{nodeName, ready}, {nodeName, ready}}, false},
		{"copies on two nodes others than this", false, []copy{{"node-b", ready}, {"node-c", ready}}, false},
		{"one not terminating, one terminating", false, []copy{{"node-b", notReady}, {nodeName, terminating}}, false},
		{"not terminating, on this node and another", false, []copy{{nodeName, ready}, {"node-b", ready}}, true},
		{"not terminating, ready and not", false, []copy{{"node-b", ready}, {"node-b", notReady}}, true},
		{"all terminating, on this node and another", false, []copy{{nodeName, terminating}, {"node-b", terminating}}, true},
	} {
		a, aSlices := svc("a", "198.19.0.10", tc.together, tc.copies...)
		// b lists 198.18.64.2 once, on this node: hairpin from it through
		// b is in kube-proxy's nftables hairpin set whichever copy of a's
		// it keeps, but the element is a's too.
		b, bSlices := svc("b", "198.19.0.11", false, copy{nodeName, ready})
		ps := probes([]*v1.Service{a, b}, append(aSlices, bSlices...), false)
		if len(ps) == 0 {
			t.Fatalf("%s: no probes", tc.name)
		}
		for _, p := range ps {
			hairpinTCP := p.src.name == "hairpin" && p.src.addr == netip.MustParseAddr("198.18.64.2") && p.packet.Protocol == v1.ProtocolTCP
			want := tc.unordered && p.service == namespace+"/a" && p.packet.Protocol == v1.ProtocolTCP
			if p.unordered != want || p.unorderedHairpin != (tc.unordered && hairpinTCP) || p.shared {
				t.Errorf("%s: probe %v: unordered %v, hairpin %v, shared %v, want %v, %v and false", tc.name, p, p.unordered, p.unorderedHairpin, p.shared, want, tc.unordered && hairpinTCP)
			}
			if twice := len(tc.copies) > 1 && p.service == namespace+"/a" && p.packet.Protocol == v1.ProtocolTCP; p.listedTwice != twice {
				t.Errorf("%s: probe %v: listed twice %v, want %v", tc.name, p, p.listedTwice, twice)
			}
		}
	}

	// Two Services with one external IP and port share that frontend; one
	// Service with an address that is both an external and a
	// load-balancer IP does not.
	ext := func(name string, lb bool) *v1.Service {
		s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: v1.ServiceSpec{
			ExternalIPs: []string{"198.19.50.1"}, Ports: []v1.ServicePort{{Name: "p0", Protocol: v1.ProtocolTCP, Port: 80}}}}
		if lb {
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.19.50.1"}}
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		svcs   []*v1.Service
		shared bool
	}{
		{"one Service, external and load-balancer IP", []*v1.Service{ext("a", true)}, false},
		{"two Services, one external IP", []*v1.Service{ext("a", false), ext("b", false)}, true},
	} {
		for _, p := range probes(tc.svcs, nil, false) {
			if want := tc.shared && p.packet.Protocol == v1.ProtocolTCP; p.shared != want || p.unordered || p.unorderedHairpin {
				t.Errorf("%s: probe %v: shared %v, unordered %v, want %v and false", tc.name, p, p.shared, p.unordered, want)
			}
		}
	}

	// Each case covers its own probes.
	copies, shared := []string{"copies of one endpoint in two slices, kept by map order"}, []string{"two Service ports with one frontend"}
	by := func(svc string) trace.Outcome {
		return trace.Outcome{Verdict: ruleset.VerdictForward, Service: servicemap.PortName{Namespace: namespace, Name: svc, Port: "p0", Protocol: v1.ProtocolTCP}}
	}
	for _, tc := range []struct {
		name, mode string
		p          probe
		ref, ours  trace.Outcome
		refRules   string
		want       []string
	}{
		{"unordered copies", "iptables", probe{unordered: true}, by("a"), by("a"), "", copies},
		{"hairpin of unordered copies, nftables", "nftables (flat layout)", probe{unorderedHairpin: true}, by("a"), by("a"), "", copies},
		{"hairpin of unordered copies, iptables (no hairpin set)", "iptables", probe{unorderedHairpin: true}, by("a"), by("a"), "", nil},
		{"shared frontend, kube-proxy chose the other port", "iptables", probe{shared: true}, by("b"), by("a"), "", shared},
		{"shared frontend, kube-proxy chose no port", "iptables", probe{shared: true}, trace.Outcome{}, by("a"), "", shared},
		{"shared frontend, both chose one port", "iptables", probe{shared: true}, by("a"), by("a"), "", nil},
		{"shared frontend, kube-proxy's maps name two ports", "nftables (kube-proxy layout)", probe{shared: true}, by("a"), by("a"),
			`services: vmap @service-ips [... : goto external-X-ns/a/tcp/p0] service-endpoints-check: vmap @no-endpoint-services [... comment "` + namespace + `/b:p0" : goto reject-chain]`, shared},
		{"shared frontend, kube-proxy's rules name the port chosen", "nftables (kube-proxy layout)", probe{shared: true}, by("a"), by("a"),
			`service-endpoints-check: vmap @no-endpoint-services [... comment "` + namespace + `/a:p0" : drop]`, nil},
		{"neither", "nftables (kube-proxy layout)", probe{}, by("b"), by("a"), "", nil},
	} {
		var got []string
		for _, u := range undefinedCases {
			if u.covers(tc.mode, tc.p, tc.ref, tc.ours, tc.refRules) {
				got = append(got, u.name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: covered by %q, want %q", tc.name, got, tc.want)
		}
	}
}
