package iptables

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
)

// endpointCommentRe is the comment of a rule, as a render writes it.
var endpointCommentRe = regexp.MustCompile(` -m comment --comment ("[^"]*"|[^ ]+)`)

// isEndpointRule reports whether line is a rule that kube-proxy writes
// without its comment in large-cluster mode: a rule of an endpoint chain,
// or one that jumps to one (the spreading and the affinity rules of the
// policy chains).
func isEndpointRule(names Names, line string) bool {
	sep := names.Prefix() + "-SEP-"
	chain, rest, ok := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
	return ok && strings.HasPrefix(line, "-A ") && (strings.HasPrefix(chain, sep) || strings.Contains(rest, "-j "+sep))
}

// withoutEndpointComments is text with the comments of its endpoint rules
// removed: what large-cluster mode renders where text has them.
func withoutEndpointComments(names Names, text string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if isEndpointRule(names, line) {
			lines[i] = endpointCommentRe.ReplaceAllString(line, "")
		}
	}
	return strings.Join(lines, "\n")
}

// endpointComments counts the endpoint rules of text, and those of them
// with a comment.
func endpointComments(names Names, text string) (rules, commented int) {
	for _, line := range strings.Split(text, "\n") {
		if isEndpointRule(names, line) {
			rules++
			if strings.Contains(line, " -m comment ") {
				commented++
			}
		}
	}
	return rules, commented
}

// manyEPs is n ready endpoints on other nodes, from address index first
// on: 198.18.(64+i/250).(i%250+1), or 2001:db8:18:1::i+1.
func manyEPs(first, n int, v6 bool, ready bool) []ep {
	eps := make([]ep, n)
	for j := range eps {
		i := first + j
		ip := fmt.Sprintf("198.18.%d.%d", 64+i/250, i%250+1)
		if v6 {
			ip = fmt.Sprintf("2001:db8:18:1::%x", i+1)
		}
		eps[j] = ep{ip: ip, node: "node-b", ready: ready}
	}
	return eps
}

// largeClusterObjects are the Services ns1/web (ClientIP affinity,
// externalTrafficPolicy Local: cluster, local, external and endpoint
// chains; three ready endpoints, two on this node, and one not ready) and
// ns1/bulk (996 ready endpoints and notReady not ready), of family v6 or
// IPv4: 1000 + notReady endpoints listed, and the same rules whatever
// notReady is, since an endpoint that is not ready has none.
func largeClusterObjects(v6 bool, notReady int) []any {
	clusterIP, bulkIP := "198.19.0.10", "198.19.0.11"
	if v6 {
		clusterIP, bulkIP = "2001:db8:19::10", "2001:db8:19::11"
	}
	web := append(readyEPs(3, v6), manyEPs(2000, 1, v6, false)...)
	return []any{
		service("ns1", "web", clusterIP, nodePort(30080), eTPLocal(0), clientIP(10800)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, web...),
		service("ns1", "bulk", bulkIP),
		slice("ns1", "bulk", "bulk-1", 8080, v1.ProtocolTCP, append(manyEPs(0, 996, v6, true), manyEPs(1000, notReady, v6, false)...)...),
	}
}

func familyConfig(v6 bool) ruleset.Config {
	if v6 {
		return ruleset.Config{Family: v1.IPv6Protocol, Node: testConfig().Node,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8:18:40::/59")}}
	}
	return testConfig()
}

// TestLargeClusterBoundary: with 1000 endpoints listed (ready or not) every
// rule keeps its comment; with 1001, kube-proxy's large-cluster mode, the
// rules of the endpoint chains and those that jump to them (spreading and
// ClientIP affinity) lose theirs, in either family, and nothing else in the
// render changes.
func TestLargeClusterBoundary(t *testing.T) {
	names := DefaultNames()
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "IPv4", true: "IPv6"}[v6], func(t *testing.T) {
			cfg := familyConfig(v6)
			at1000 := build(t, cfg, largeClusterObjects(v6, 0)...)
			at1001 := build(t, cfg, largeClusterObjects(v6, 1)...)
			if at1000.ListedEndpoints() != 1000 || at1001.ListedEndpoints() != 1001 {
				t.Fatalf("ListedEndpoints %d and %d, want 1000 and 1001", at1000.ListedEndpoints(), at1001.ListedEndpoints())
			}
			small, large := string(Render(names, at1000)), string(Render(names, at1001))
			// 999 endpoint chains of 2 rules, 3+996 spreading rules,
			// 3 affinity checks in web's cluster chain, 2 spreading
			// rules and 2 affinity checks in its local chain.
			const endpointRules = 2*999 + 999 + 3 + 2 + 2
			if rules, commented := endpointComments(names, small); rules != endpointRules || commented != rules {
				t.Errorf("1000 endpoints: %d of %d endpoint rules commented, want all of %d", commented, rules, endpointRules)
			}
			if rules, commented := endpointComments(names, large); rules != endpointRules || commented != 0 {
				t.Errorf("1001 endpoints: %d of %d endpoint rules commented, want none of %d", commented, rules, endpointRules)
			}
			if got := withoutEndpointComments(names, small); got != large {
				t.Errorf("the 1001-endpoint render is not the 1000-endpoint one without the endpoint rules' comments:\n%s",
					cmp.Diff(strings.Split(got, "\n"), strings.Split(large, "\n")))
			}

			// kube-proxy's rules, exactly, for one endpoint of web.
			web := servicemap.PortName{Namespace: "ns1", Name: "web", Port: "p80", Protocol: v1.ProtocolTCP}
			addr, mask := "198.18.64.2", "255.255.255.255"
			if v6 {
				addr, mask = "2001:db8:18:40::2", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
			}
			sep := names.EndpointChain(web, netip.AddrPortFrom(netip.MustParseAddr(addr), 8080))
			svc, svl := names.ServiceChain(web), names.LocalChain(web)
			dnat := addr + ":8080"
			if v6 {
				dnat = "[" + addr + "]:8080"
			}
			for _, tc := range []struct{ small, large string }{
				{"-A " + sep + " -m comment --comment ns1/web:p80 -s " + addr + " -j KUBE-MARK-MASQ",
					"-A " + sep + " -s " + addr + " -j KUBE-MARK-MASQ"},
				{"-A " + sep + " -m comment --comment ns1/web:p80 -m recent --name " + sep + " --set -m tcp -p tcp -j DNAT --to-destination " + dnat,
					"-A " + sep + " -m recent --name " + sep + " --set -m tcp -p tcp -j DNAT --to-destination " + dnat},
				{"-A " + svc + ` -m comment --comment "ns1/web:p80 -> ` + dnat + `" -m recent --name ` + sep + " --mask " + mask + " --rcheck --seconds 10800 --reap -j " + sep,
					"-A " + svc + " -m recent --name " + sep + " --mask " + mask + " --rcheck --seconds 10800 --reap -j " + sep},
				{"-A " + svc + ` -m comment --comment "ns1/web:p80 -> ` + dnat + `" -m statistic --mode random --probability 0.3333333333 -j ` + sep,
					"-A " + svc + " -m statistic --mode random --probability 0.3333333333 -j " + sep},
				{"-A " + svl + ` -m comment --comment "ns1/web:p80 -> ` + dnat + `" -m recent --name ` + sep + " --mask " + mask + " --rcheck --seconds 10800 --reap -j " + sep,
					"-A " + svl + " -m recent --name " + sep + " --mask " + mask + " --rcheck --seconds 10800 --reap -j " + sep},
				{"-A " + svl + ` -m comment --comment "ns1/web:p80 -> ` + dnat + `" -m statistic --mode random --probability 0.5000000000 -j ` + sep,
					"-A " + svl + " -m statistic --mode random --probability 0.5000000000 -j " + sep},
			} {
				if !hasLine(small, tc.small) {
					t.Errorf("1000 endpoints: no line\n%s", tc.small)
				}
				if !hasLine(large, tc.large) {
					t.Errorf("1001 endpoints: no line\n%s", tc.large)
				}
			}
			// The other comments of web's chains stay.
			for _, want := range []string{`-m comment --comment "ns1/web:p80 cluster IP"`, `-m comment --comment "masquerade LOCAL traffic for ns1/web:p80 external destinations"`} {
				if !strings.Contains(large, want) {
					t.Errorf("1001 endpoints: no %s", want)
				}
			}
			// The evaluator follows web's flows through the rules without
			// those comments where the tracer says they go.
			webService, _ := at1001.Service(web)
			var packets []trace.Packet
			for _, p := range goldenPackets(at1001) {
				if p.Dst.Addr() == webService.ClusterIP || p.Dst.Port() == webService.NodePort {
					packets = append(packets, p)
				}
			}
			if len(packets) < 10 {
				t.Fatalf("%d packets to web's frontends, want at least 10", len(packets))
			}
			if d := disagreement(evalCase{rs: at1001, names: names, packets: packets}, withJumps(names, []byte(large)), map[string]int{}); d != "" {
				t.Error(d)
			}
		})
	}
}

func hasLine(text, line string) bool {
	return strings.Contains("\n"+text+"\n", "\n"+line+"\n")
}

// TestLargeClusterDualStack: each family counts its own endpoints: a
// dual-stack cluster can be large in one family only.
func TestLargeClusterDualStack(t *testing.T) {
	names := DefaultNames()
	dualStack := func(s *v1.Service) {
		v6 := strings.Replace(s.Spec.ClusterIP, "198.19.0.", "2001:db8:19::", 1)
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP, v6}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.IPFamilyPolicy = ptr(v1.IPFamilyPolicyRequireDualStack)
	}
	svcs := []any{service("ns1", "web", "198.19.0.10", dualStack), service("ns1", "bulk", "198.19.0.11", dualStack)}
	v4 := build(t, familyConfig(false), append(svcs,
		slice("ns1", "web", "web-v4", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		slice("ns1", "bulk", "bulk-v4", 8080, v1.ProtocolTCP, manyEPs(0, 999, false, true)...))...)
	v6 := build(t, familyConfig(true), append(svcs,
		slice("ns1", "web", "web-v6", 8080, v1.ProtocolTCP, readyEPs(2, true)...),
		slice("ns1", "bulk", "bulk-v6", 8080, v1.ProtocolTCP, manyEPs(0, 10, true, true)...))...)
	if v4.ListedEndpoints() != 1001 || v6.ListedEndpoints() != 12 {
		t.Fatalf("ListedEndpoints: IPv4 %d, IPv6 %d; want 1001 and 12", v4.ListedEndpoints(), v6.ListedEndpoints())
	}
	if rules, commented := endpointComments(names, string(Render(names, v4))); rules == 0 || commented != 0 {
		t.Errorf("IPv4, 1001 endpoints: %d of %d endpoint rules commented, want none", commented, rules)
	}
	if rules, commented := endpointComments(names, string(Render(names, v6))); rules == 0 || commented != rules {
		t.Errorf("IPv6, 12 endpoints: %d of %d endpoint rules commented, want all", commented, rules)
	}
}

// kubeProxyLargeClusterWorld is the cluster of kube-proxy's
// TestSyncProxyRulesLargeClusterMode (pkg/proxy/iptables/proxier_test.go,
// v1.37.2), with its addresses, so that the chain names are those of its
// expected lines: ns1/svc1:p80 and ns2/svc2:p8080 with 499 endpoints each,
// ns3/svc3:p8081 with the endpoints of svc3 (kube-proxy adds 3), and
// ns4/svc4:p8082 with those of svc4, when not nil. These rules are only
// rendered, never restored.
func kubeProxyLargeClusterWorld(svc3, svc4 []string) []any {
	svc := func(ns, name, ip, port string, number int32) *v1.Service {
		s := service(ns, name, ip)
		s.Spec.Ports = []v1.ServicePort{{Name: port, Port: number, Protocol: v1.ProtocolTCP}}
		return s
	}
	es := func(ns, name, port string, number int32, addrs []string) *discovery.EndpointSlice {
		out := &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr(port), Port: ptr(number), Protocol: ptr(v1.ProtocolTCP)}},
		}
		for _, a := range addrs {
			out.Endpoints = append(out.Endpoints, discovery.Endpoint{Addresses: []string{a}})
		}
		return out
	}
	half := func(second int) []string {
		addrs := make([]string, largeClusterEndpoints/2-1)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("10.%d.%d.%d", second, i%256, i/256)
		}
		return addrs
	}
	objs := []any{
		svc("ns1", "svc1", "172.30.0.41", "p80", 80), es("ns1", "svc1", "p80", 80, half(0)),
		svc("ns2", "svc2", "172.30.0.42", "p8080", 8080), es("ns2", "svc2", "p8080", 8080, half(1)),
		svc("ns3", "svc3", "172.30.0.43", "p8081", 8081),
	}
	if svc3 != nil {
		objs = append(objs, es("ns3", "svc3", "p8081", 8081, svc3))
	}
	if svc4 != nil {
		objs = append(objs, svc("ns4", "svc4", "172.30.0.44", "p8082", 8082), es("ns4", "svc4", "p8082", 8082, svc4))
	}
	return objs
}

// TestLargeClusterPartial: the mode is decided at each render from the new
// Ruleset, and a partial render writes the chains it rewrites in that
// mode, leaving those of unchanged Service ports as they were written, as
// kube-proxy does (its TestSyncProxyRulesLargeClusterMode, whose expected
// lines these are); a full render writes all in the new mode. Over the
// whole sequence, the state partial renders leave differs from a full
// render's only in the comments of endpoint rules.
func TestLargeClusterPartial(t *testing.T) {
	names := DefaultNames()
	cfg := testConfig()
	cfg.MasqueradeAll = true
	svc3 := []string{"203.0.113.4", "203.0.113.8", "203.0.113.12"}
	steps := []struct {
		name       string
		svc3, svc4 []string
		listed     int
		// want are lines the partial render has, wantFull those the
		// full one has; endpoints is the number of endpoint chains
		// the partial render writes (DNAT rules).
		want, wantFull []string
		endpoints      int
	}{
		{name: "998 endpoints", listed: 998,
			wantFull: []string{"-A KUBE-SEP-DKGQUZGBKLTPAR56 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80"}},
		{name: "svc3's 3 endpoints: 1001, large", svc3: svc3, listed: 1001, endpoints: 3,
			want:     []string{"-A KUBE-SEP-RUVVH7YV3PHQBDOS -m tcp -p tcp -j DNAT --to-destination 203.0.113.4:8081"},
			wantFull: []string{"-A KUBE-SEP-DKGQUZGBKLTPAR56 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80"}},
		{name: "svc4 added", svc3: svc3, svc4: []string{"10.4.0.1"}, listed: 1002, endpoints: 1,
			want: []string{"-A KUBE-SEP-SU5STNODRYEWJAUF -m tcp -p tcp -j DNAT --to-destination 10.4.0.1:8082"}},
		{name: "svc3's endpoints gone: 999, not large", svc3: []string{}, svc4: []string{"10.4.0.1"}, listed: 999},
		{name: "svc4 changed: rewritten with comments", svc3: []string{}, svc4: []string{"10.4.0.1", "10.4.0.2"}, listed: 1000, endpoints: 2,
			want: []string{"-A KUBE-SEP-SU5STNODRYEWJAUF -m comment --comment ns4/svc4:p8082 -m tcp -p tcp -j DNAT --to-destination 10.4.0.1:8082"}},
	}
	var prev *ruleset.Ruleset
	var state model
	for _, step := range steps {
		rs := build(t, cfg, kubeProxyLargeClusterWorld(step.svc3, step.svc4)...)
		if rs.ListedEndpoints() != step.listed {
			t.Fatalf("%s: ListedEndpoints() = %d, want %d", step.name, rs.ListedEndpoints(), step.listed)
		}
		full := string(Render(names, rs))
		for _, line := range step.wantFull {
			if !hasLine(full, line) {
				t.Errorf("%s: the full render has no line\n%s", step.name, line)
			}
		}
		if rules, commented := endpointComments(names, full); commented != map[bool]int{false: rules, true: 0}[step.listed > largeClusterEndpoints] {
			t.Errorf("%s: the full render comments %d of %d endpoint rules", step.name, commented, rules)
		}
		want, err := applyRestore(newModel(), []byte(full))
		if err != nil {
			t.Fatal(err)
		}
		if prev == nil {
			prev, state = rs, want
			continue
		}
		partial, err := RenderPartial(names, prev, rs, ruleset.Diff(prev, rs))
		if err != nil {
			t.Fatal(err)
		}
		text := string(partial)
		for _, line := range step.want {
			if !hasLine(text, line) {
				t.Errorf("%s: the partial render has no line\n%s\nin\n%s", step.name, line, text)
			}
		}
		if n := strings.Count(text, "-j DNAT"); n != step.endpoints {
			t.Errorf("%s: the partial render writes %d endpoint chains, want %d", step.name, n, step.endpoints)
		}
		if rules, commented := endpointComments(names, text); commented != map[bool]int{false: rules, true: 0}[step.listed > largeClusterEndpoints] {
			t.Errorf("%s: the partial render comments %d of %d endpoint rules", step.name, commented, rules)
		}
		if state, err = applyRestore(state, partial); err != nil {
			t.Fatalf("%s: partial rejected: %v", step.name, err)
		}
		if d := cmp.Diff(stripModel(names, want), stripModel(names, state)); d != "" {
			t.Errorf("%s: partial state differs from the full one beyond endpoint comments (-full +partial):\n%s", step.name, d)
		}
		prev = rs
	}
	// svc1 was written before the cluster grew and not since: its
	// chains kept their comments through both flips, as kube-proxy's.
	if rules := state["nat"]["KUBE-SEP-DKGQUZGBKLTPAR56"]; len(rules) != 2 || !strings.Contains(rules[1], "-m comment --comment ns1/svc1:p80") {
		t.Errorf("svc1's endpoint chain after the partial syncs: %q, want its commented rules", rules)
	}
}

// stripModel is m with the comments of its endpoint rules removed.
func stripModel(names Names, m model) model {
	out := m.clone()
	for _, chains := range out {
		for chain, rules := range chains {
			for i, r := range rules {
				if line := "-A " + chain + " " + r; isEndpointRule(names, line) {
					rules[i] = strings.TrimPrefix(endpointCommentRe.ReplaceAllString(line, ""), "-A "+chain+" ")
				}
			}
		}
	}
	return out
}

// TestLargeClusterDeepCheck: the deep check finds no drift in tables that
// partial syncs left with the endpoint rules of some Service ports in one
// mode and some in the other, and still finds a rule of an endpoint chain
// deleted, and a spreading rule that jumps elsewhere, with no comment to
// read.
func TestLargeClusterDeepCheck(t *testing.T) {
	web := servicemap.PortName{Namespace: "ns1", Name: "web", Port: "p80", Protocol: v1.ProtocolTCP}
	for _, tc := range []struct {
		name   string
		tamper func(k *fakeKernel, n Names)
		want   string
	}{
		{"untouched", func(*fakeKernel, Names) {}, ""},
		{"an endpoint chain's DNAT rule deleted", func(k *fakeKernel, n Names) {
			c := n.EndpointChain(web, netip.MustParseAddrPort("198.18.64.2:8080"))
			k.tables["nat"][c] = k.tables["nat"][c][:1]
		}, "has 1 rules, want 2"},
		{"two spreading rules swapped", func(k *fakeKernel, n Names) {
			rules := k.tables["nat"][n.ServiceChain(web)]
			last := len(rules) - 1
			rules[last-1], rules[last] = rules[last], rules[last-1]
		}, "jumps elsewhere than it should"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			k := newFakeKernel(t, v1.IPv4Protocol)
			e := newTestExecutor(t, k)
			small := build(t, testConfig(), largeClusterObjects(false, 0)...)
			large := build(t, testConfig(), append(largeClusterObjects(false, 1),
				service("ns2", "api", "198.19.0.12"),
				slice("ns2", "api", "api-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...))...)
			if _, err := e.Apply(ctx, small); err != nil {
				t.Fatal(err)
			}
			if res, err := e.Apply(ctx, large); err != nil || res.Full {
				t.Fatalf("Sync into large-cluster mode: %+v, %v; want a partial one", res, err)
			}
			// web's chains keep their comments, api's have none.
			sep := e.names.EndpointChain(web, netip.MustParseAddrPort("198.18.64.2:8080"))
			api := e.names.EndpointChain(servicemap.PortName{Namespace: "ns2", Name: "api", Port: "p80", Protocol: v1.ProtocolTCP}, netip.MustParseAddrPort("198.18.64.2:8080"))
			if !strings.Contains(k.tables["nat"][sep][0], "--comment") || strings.Contains(k.tables["nat"][api][0], "--comment") {
				t.Fatalf("after the partial sync: web's %q, api's %q; want a comment in web's only", k.tables["nat"][sep], k.tables["nat"][api])
			}
			tc.tamper(k, e.names)
			e.deepDue = time.Time{}
			d, err := e.CheckState(ctx)
			if err != nil || d.Found() != (tc.want != "") || !strings.Contains(d.What, tc.want) || (tc.want != "" && d.Kind != svcproxy.DriftRule) {
				t.Fatalf("CheckState: %+v, %v; want %q", d, err, tc.want)
			}
			if tc.want == "" {
				return
			}
			// Repaired by a full sync, in the new mode throughout.
			e.RequestFullSync()
			if _, err := e.Apply(ctx, large); err != nil {
				t.Fatal(err)
			}
			wantState(t, k, large, nil)
			if strings.Contains(k.tables["nat"][sep][0], "--comment") {
				t.Errorf("after the full sync, web's endpoint chain: %q, want no comment", k.tables["nat"][sep])
			}
		})
	}
}
