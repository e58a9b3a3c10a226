package iptables

import (
	"bytes"
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// world is a set of Services and EndpointSlices, by namespace/name.
type world struct {
	services map[string]*v1.Service
	slices   map[string]*discovery.EndpointSlice
}

func (w world) objects() []any {
	var objs []any
	for _, k := range slices.Sorted(maps.Keys(w.services)) {
		objs = append(objs, w.services[k])
	}
	for _, k := range slices.Sorted(maps.Keys(w.slices)) {
		objs = append(objs, w.slices[k])
	}
	return objs
}

var (
	genNamespaces = []string{"ns0", "ns1", "ns2"}
	genNames      = []string{"a", "b", "c", "d"}
	genNodes      = []string{testNode, "node-b", "node-c"}
)

// genService draws a Service ns/name of family v6 or IPv4 with one or two
// ports and any mix of type, traffic policies, affinity, external IPs,
// load-balancer IPs and source ranges. Addresses come from small pools so
// that Services share them and changes revisit them.
func genService(t *rapid.T, ns, name string, v6 bool) *v1.Service {
	ip := func(pool string, i int) string {
		if v6 {
			return fmt.Sprintf("2001:db8:19:%s::%x", pool, i+1)
		}
		return fmt.Sprintf("198.19.%s.%d", pool, i+1)
	}
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	cip := ip("0", rapid.IntRange(0, 200).Draw(t, "clusterIP"))
	s.Spec.ClusterIP, s.Spec.ClusterIPs = cip, []string{cip}
	s.Spec.Type = rapid.SampledFrom([]v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer}).Draw(t, "type")
	for i, pn := range []string{"p80", "p81"}[:rapid.IntRange(1, 2).Draw(t, "ports")] {
		p := v1.ServicePort{Name: pn, Port: int32(80 + i), Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")}
		if s.Spec.Type != v1.ServiceTypeClusterIP {
			p.NodePort = int32(rapid.IntRange(30000, 30010).Draw(t, "nodePort"))
		}
		s.Spec.Ports = append(s.Spec.Ports, p)
	}
	if rapid.Bool().Draw(t, "eTPLocal") {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		if s.Spec.Type == v1.ServiceTypeLoadBalancer && rapid.Bool().Draw(t, "hc") {
			s.Spec.HealthCheckNodePort = int32(rapid.IntRange(32000, 32005).Draw(t, "hcPort"))
		}
	}
	if rapid.Bool().Draw(t, "iTPLocal") {
		s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
	}
	if rapid.Bool().Draw(t, "affinity") {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(rapid.IntRange(1, 86400).Draw(t, "timeout")))}}
	}
	for i := range rapid.IntRange(0, 2).Draw(t, "externalIPs") {
		s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, ip("100", rapid.IntRange(0, 3).Draw(t, fmt.Sprint("eip", i))))
	}
	if s.Spec.Type == v1.ServiceTypeLoadBalancer {
		for i := range rapid.IntRange(0, 2).Draw(t, "lbIPs") {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip("200", rapid.IntRange(0, 3).Draw(t, fmt.Sprint("lbip", i)))})
		}
		ranges := []string{"198.18.32.0/19", "198.18.0.0/24", "0.0.0.0/0"}
		if v6 {
			ranges = []string{"2001:db8:18:20::/59", "2001:db8:18::/64", "::/0"}
		}
		for i := range rapid.IntRange(0, 2).Draw(t, "ranges") {
			s.Spec.LoadBalancerSourceRanges = append(s.Spec.LoadBalancerSourceRanges, rapid.SampledFrom(ranges).Draw(t, fmt.Sprint("range", i)))
		}
	}
	return s
}

// genSlice draws an EndpointSlice of ns/svc named name, with endpoints from
// a pool of 12 addresses, for port p80 and maybe p81.
func genSlice(t *rapid.T, ns, svc, name string, v6 bool) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if v6 {
		at = discovery.AddressTypeIPv6
	}
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: at,
	}
	proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "slice-proto")
	es.Ports = append(es.Ports, discovery.EndpointPort{Name: ptr("p80"), Port: ptr(int32(8080)), Protocol: ptr(proto)})
	if rapid.Bool().Draw(t, "p81") {
		es.Ports = append(es.Ports, discovery.EndpointPort{Name: ptr("p81"), Port: ptr(int32(8081)), Protocol: ptr(proto)})
	}
	n := rapid.IntRange(0, 5).Draw(t, "endpoints")
	ids := rapid.SliceOfNDistinct(rapid.IntRange(0, 11), n, n, rapid.ID[int]).Draw(t, "ids")
	for _, id := range ids {
		addr := fmt.Sprintf("198.18.%d.2", 64+id)
		if v6 {
			addr = fmt.Sprintf("2001:db8:18:%x::2", 0x40+id)
		}
		ready := rapid.Bool().Draw(t, "ready")
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{
			Addresses: []string{addr},
			Conditions: discovery.EndpointConditions{
				Ready:       ptr(ready),
				Serving:     ptr(ready || rapid.Bool().Draw(t, "serving")),
				Terminating: ptr(!ready && rapid.Bool().Draw(t, "terminating")),
			},
			NodeName: ptr(rapid.SampledFrom(genNodes).Draw(t, "node")),
		})
	}
	return es
}

// genConfig draws a Config of either family.
func genConfig(t *rapid.T) ruleset.Config {
	v6 := rapid.Bool().Draw(t, "v6")
	cfg := ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: testNode}}
	cidrs := []string{"198.18.64.0/19", "198.18.96.0/19"}
	npa := []string{"198.18.0.1", "127.0.0.1"}
	if v6 {
		cfg.Family = v1.IPv6Protocol
		cidrs = []string{"2001:db8:18:40::/59", "2001:db8:18:60::/59"}
		npa = []string{"2001:db8:18::1", "::1"}
	}
	for _, c := range cidrs[:rapid.IntRange(0, 2).Draw(t, "cidrs")] {
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, netip.MustParsePrefix(c))
	}
	for _, a := range npa[:rapid.IntRange(0, 2).Draw(t, "nodePortAddresses")] {
		cfg.NodePortAddresses = append(cfg.NodePortAddresses, netip.MustParseAddr(a))
	}
	cfg.NoNodePortAddresses = len(cfg.NodePortAddresses) == 0 && rapid.IntRange(0, 3).Draw(t, "noNodePortAddresses") == 0
	cfg.MasqueradeAll = rapid.Bool().Draw(t, "masqueradeAll")
	cfg.LocalhostNodePorts = rapid.Bool().Draw(t, "localhostNodePorts")
	return cfg
}

// genWorld draws Services and their slices.
func genWorld(t *rapid.T, v6 bool) world {
	w := world{services: map[string]*v1.Service{}, slices: map[string]*discovery.EndpointSlice{}}
	for range rapid.IntRange(0, 6).Draw(t, "services") {
		mutate(t, w, v6)
	}
	return w
}

// mutate applies one random change to w: a Service or a slice added,
// changed or deleted.
func mutate(t *rapid.T, w world, v6 bool) {
	ns := rapid.SampledFrom(genNamespaces).Draw(t, "ns")
	name := rapid.SampledFrom(genNames).Draw(t, "name")
	switch rapid.IntRange(0, 4).Draw(t, "op") {
	case 0, 1:
		w.services[ns+"/"+name] = genService(t, ns, name, v6)
	case 2:
		delete(w.services, ns+"/"+name)
	case 3:
		sl := name + "-" + rapid.SampledFrom([]string{"1", "2"}).Draw(t, "slice")
		w.slices[ns+"/"+sl] = genSlice(t, ns, name, sl, v6)
	case 4:
		sl := name + "-" + rapid.SampledFrom([]string{"1", "2"}).Draw(t, "slice")
		delete(w.slices, ns+"/"+sl)
	}
}

// buildFrom feeds objs to fresh trackers in order; stale versions may come
// first in noise, each replaced by its final version later in objs.
func buildFrom(t tb, cfg ruleset.Config, objs []any) *ruleset.Ruleset {
	st := servicemap.NewTracker(cfg.Family, servicemap.Filter{})
	et := endpoints.NewTracker(cfg.Family, servicemap.Filter{})
	for _, o := range objs {
		switch o := o.(type) {
		// Generated objects may be malformed on purpose: their warnings
		// are servicemap's and endpoints' to check.
		case *v1.Service:
			_, _ = st.Update(o)
		case *discovery.EndpointSlice:
			_, _ = et.Update(o)
		case deleted:
			if o.slice {
				et.Delete(o.ns, o.name)
			} else {
				st.Delete(o.ns, o.name)
			}
		}
	}
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	svcs, _ := st.Snapshot()
	eps, _ := et.Snapshot()
	rs, ws := b.Build(svcs, eps)
	warnings.None(t, ws)
	return rs
}

// tb is what buildFrom needs of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// deleted is a delete event in an object stream.
type deleted struct {
	slice    bool
	ns, name string
}

// TestRenderDeterministic: the same objects, fed to the trackers in any
// order and with any history of earlier versions and deletions, give
// byte-identical text.
func TestRenderDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		v6 := cfg.Family == v1.IPv6Protocol
		w := genWorld(t, v6)
		objs := w.objects()

		stream := func(label string) []any {
			perm := rapid.Permutation(objs).Draw(t, label)
			// Noise: earlier versions of some objects, and objects
			// added then deleted, before the final versions.
			var noise []any
			other := genWorld(t, v6)
			for _, o := range other.objects() {
				noise = append(noise, o)
				switch o := o.(type) {
				case *v1.Service:
					if _, ok := w.services[o.Namespace+"/"+o.Name]; !ok {
						noise = append(noise, deleted{false, o.Namespace, o.Name})
					}
				case *discovery.EndpointSlice:
					if _, ok := w.slices[o.Namespace+"/"+o.Name]; !ok {
						noise = append(noise, deleted{true, o.Namespace, o.Name})
					}
				}
			}
			return append(noise, perm...)
		}
		a := buildFrom(t, cfg, stream("first"))
		b := buildFrom(t, cfg, stream("second"))
		if d := ruleset.Diff(a, b); !d.Empty() {
			t.Fatalf("rulesets differ: %+v", d)
		}
		names := rapid.SampledFrom([]Names{{}, mustNames("CNI")}).Draw(t, "names")
		ta, tb := Render(names, a), Render(names, b)
		if !bytes.Equal(ta, tb) {
			t.Fatalf("renders differ:\n%s", lineDiff(string(ta), string(tb)))
		}
		if !bytes.Equal(ta, Render(names, a)) {
			t.Fatal("rendering the same Ruleset twice differs")
		}
		if _, err := applyRestore(newModel(), ta); err != nil {
			t.Fatalf("model rejects the rendering: %v\n%s", err, ta)
		}
	})
}

var (
	probRuleRE = regexp.MustCompile(`^-A (\S+) -m comment --comment "[^"]*" (?:-m statistic --mode random --probability ([0-9.]+) )?-j (\S+)$`)
)

// TestProbabilities: for N from 1 to 100 endpoints, the rules of the
// Service chain reach each endpoint with probability 1/N: exactly with
// ruleset's rational probabilities, within 1e-9 with the rendered decimals,
// and within 1e-9 with what the kernel stores.
//
// The kernel (xt_statistic) keeps round(p·2^31) and matches when a random
// 31-bit number is below it, so the effective probability of a rule is
// P/2^31 with P = round(p·2^31): |p_kernel − 1/R| ≤ δ = 5e-11 (10-decimal
// rounding) + 2^-32 (kernel rounding) ≈ 2.83e-10. Endpoint i is reached
// with π_i = p_i·Π_{j<i}(1−p_j). To first order
// |Δπ_i| ≤ δ·Π_{j<i}(1−p_j) + p_i·Π_{j<i}(1−p_j)·Σ_{j<i} δ/(1−p_j)
// = δ(N−i)/N + (δ/N)·Σ_{j<i}(N−j)/(N−j−1) ≤ δ + 2δ·i/N ≤ 3δ ≈ 8.5e-10,
// and the second-order terms (~N²δ²) are below 1e-15: 1e-9 holds.
func TestProbabilities(t *testing.T) {
	two31 := new(big.Rat).SetInt64(1 << 31)
	tol := big.NewRat(1, 1_000_000_000)
	var worstDec, worstKernel float64
	for n := 1; n <= 100; n++ {
		rs := build(t, testConfig(),
			service("ns1", "web", "198.19.0.10"),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(n, false)...))
		s := rs.Services()[0]
		want := big.NewRat(1, int64(n))

		// Exact: ruleset's rationals.
		if len(s.ClusterTargets) != n {
			t.Fatalf("N=%d: %d cluster targets", n, len(s.ClusterTargets))
		}
		rest := big.NewRat(1, 1)
		for i := range s.ClusterTargets {
			got := new(big.Rat).Mul(rest, ruleset.Probability(i, n))
			if got.Cmp(want) != 0 {
				t.Fatalf("N=%d target %d: exact probability %v, want %v", n, i, got, want)
			}
			rest.Sub(rest, got)
		}
		if rest.Sign() != 0 {
			t.Fatalf("N=%d: %v of the traffic reaches no target", n, rest)
		}

		// Rendered: parse the Service chain.
		chain := DefaultNames().ServiceChain(s.Name)
		var decimals []string
		var endpointChains []string
		for _, line := range strings.Split(string(Render(Names{}, rs)), "\n") {
			if !strings.HasPrefix(line, "-A "+chain+" ") || strings.Contains(line, "KUBE-MARK-MASQ") {
				continue
			}
			m := probRuleRE.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("N=%d: unexpected rule %q", n, line)
			}
			decimals = append(decimals, m[2])
			endpointChains = append(endpointChains, m[3])
		}
		if len(decimals) != n {
			t.Fatalf("N=%d: %d rules in %s", n, len(decimals), chain)
		}
		if slices.Sort(endpointChains); len(slices.Compact(endpointChains)) != n {
			t.Fatalf("N=%d: rules do not reach %d distinct endpoint chains", n, n)
		}
		restDec, restKernel := big.NewRat(1, 1), big.NewRat(1, 1)
		for i, d := range decimals {
			pDec, pKernel := big.NewRat(1, 1), big.NewRat(1, 1)
			if i < n-1 {
				if d == "" || !regexp.MustCompile(`^0\.[0-9]{10}$`).MatchString(d) {
					t.Fatalf("N=%d rule %d: probability %q is not 10 decimals", n, i, d)
				}
				pDec.SetString(d)
				// lround(p·2^31): p > 0, so round half up.
				scaled := new(big.Rat).Mul(pDec, two31)
				q := new(big.Int).Quo(new(big.Int).Add(new(big.Int).Mul(scaled.Num(), big.NewInt(2)), scaled.Denom()), new(big.Int).Mul(scaled.Denom(), big.NewInt(2)))
				pKernel.SetFrac(q, big.NewInt(1<<31))
			} else if d != "" {
				t.Fatalf("N=%d: last rule has probability %q", n, d)
			}
			for _, c := range []struct {
				p, rest *big.Rat
				worst   *float64
				what    string
			}{{pDec, restDec, &worstDec, "rendered"}, {pKernel, restKernel, &worstKernel, "kernel"}} {
				reach := new(big.Rat).Mul(c.rest, c.p)
				diff := new(big.Rat).Abs(new(big.Rat).Sub(reach, want))
				if diff.Cmp(tol) > 0 {
					t.Fatalf("N=%d rule %d: %s probability %s, want 1/%d within 1e-9", n, i, c.what, reach.FloatString(15), n)
				}
				f, _ := diff.Float64()
				*c.worst = max(*c.worst, f)
				c.rest.Sub(c.rest, reach)
			}
		}
	}
	t.Logf("largest error: %.3g with the rendered decimals, %.3g with the kernel's fixed point", worstDec, worstKernel)
}

// TestPartialEqualsFull: over random sequences of changes, applying each
// partial render on top of the previous state gives exactly the state a full
// render of the new Ruleset gives on empty tables, and a full render that
// also deletes the previous Ruleset's stale chains (as the Executor does)
// gives it too. Some worlds hold a Service that no change touches, with
// enough endpoints that the others take the Ruleset in and out of
// large-cluster mode: there the chains a partial render does not write
// keep the comments of the mode they were written in, as kube-proxy's do,
// and the states differ in those alone.
func TestPartialEqualsFull(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		v6 := cfg.Family == v1.IPv6Protocol
		names := rapid.SampledFrom([]Names{{}, mustNames("CNI")}).Draw(t, "names")
		w := genWorld(t, v6)
		var ballast []any
		if rapid.IntRange(0, 3).Draw(t, "ballast") == 0 {
			ballast = ballastObjects(v6, largeClusterEndpoints-rapid.IntRange(0, 20).Draw(t, "headroom"))
		}
		objects := func() []any { return append(w.objects(), ballast...) }
		prev := buildFrom(t, cfg, objects())
		state, err := applyRestore(newModel(), Render(names, prev))
		if err != nil {
			t.Fatalf("full render rejected: %v", err)
		}
		for step := range rapid.IntRange(1, 8).Draw(t, "steps") {
			for range rapid.IntRange(1, 3).Draw(t, "changes") {
				mutate(t, w, v6)
			}
			next := buildFrom(t, cfg, objects())
			ch := ruleset.Diff(prev, next)
			partial, err := RenderPartial(names, prev, next, ch)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			got, err := applyRestore(state, partial)
			if err != nil {
				t.Fatalf("step %d: partial rejected: %v\n%s", step, err, partial)
			}
			want, err := applyRestore(newModel(), Render(names, next))
			if err != nil {
				t.Fatalf("step %d: full render rejected: %v", step, err)
			}
			d := modelDiff(want, got)
			if ballast != nil {
				d = diffAfterPartial(names, want, got, partial)
			}
			if d != "" {
				t.Fatalf("step %d (changes %+v): partial sync state differs from full (-full +partial):\n%s\npartial input:\n%s", step, ch, d, partial)
			}
			// A full sync on top of the old state, deleting the chains
			// the old Ruleset had and the new one lacks.
			stale := staleChains(names, prev, next)
			overOld, err := applyRestore(state, renderFull(names, next, renderOptions{stale: stale, listTables: true}))
			if err != nil {
				t.Fatalf("step %d: full sync over old state rejected: %v", step, err)
			}
			if d := modelDiff(want, overOld); d != "" {
				t.Fatalf("step %d: full sync over old state differs (-want +got):\n%s", step, d)
			}
			state, prev = got, next
		}
	})
}

// ballastObjects are the Service big/ballast, which no change of a world
// touches, and a slice of it with n endpoints, 2 ready and the others not
// ready: they count towards large-cluster mode, but have no rules to
// render.
func ballastObjects(v6 bool, n int) []any {
	ip := "198.19.1.1"
	if v6 {
		ip = "2001:db8:19:1::1"
	}
	eps := append(manyEPs(0, 2, v6, true), manyEPs(2, n-2, v6, false)...)
	return []any{service("big", "ballast", ip), slice("big", "ballast", "ballast-1", 8080, v1.ProtocolTCP, eps...)}
}

// diffAfterPartial says how got, the tables partial renders left, differs
// from want, those of a full render, beyond what a change of
// large-cluster mode explains: the chains partial, the last partial
// render, declares (and so writes) must be exactly as in want, the others
// as in want but for the comments of endpoint rules. "" when it does not.
func diffAfterPartial(names Names, want, got model, partial []byte) string {
	if d := modelDiff(stripModel(names, want), stripModel(names, got)); d != "" {
		return d
	}
	table := ""
	for _, line := range strings.Split(string(partial), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			chain, _, _ := strings.Cut(line[1:], " ")
			if !slices.Equal(want[table][chain], got[table][chain]) {
				d := cmp.Diff(want[table][chain], got[table][chain])
				return table + " " + chain + ", which the partial render wrote:\n" + d
			}
		}
	}
	return ""
}

// modelDiff is cmp.Diff(want, got), found faster when there is none.
func modelDiff(want, got model) string {
	if maps.EqualFunc(want, got, func(w, g map[string][]string) bool {
		return maps.EqualFunc(w, g, slices.Equal)
	}) {
		return ""
	}
	return cmp.Diff(want, got)
}

// TestRenderPartialNeedsFull: no previous Ruleset, or a Config change, ask
// for a full sync.
func TestRenderPartialNeedsFull(t *testing.T) {
	a := build(t, testConfig(), service("ns1", "web", "198.19.0.10"))
	cfg := testConfig()
	cfg.MasqueradeAll = true
	b := build(t, cfg, service("ns1", "web", "198.19.0.10"))
	if _, err := RenderPartial(Names{}, nil, a, ruleset.Diff(nil, a)); err != svcproxy.ErrFullSyncNeeded {
		t.Errorf("nil old: %v, want svcproxy.ErrFullSyncNeeded", err)
	}
	if _, err := RenderPartial(Names{}, a, b, ruleset.Diff(a, b)); err != svcproxy.ErrFullSyncNeeded {
		t.Errorf("config change: %v, want svcproxy.ErrFullSyncNeeded", err)
	}
}
