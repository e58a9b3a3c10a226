package ruleset_test

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// The generators draw Services and EndpointSlices from small pools of
// values, so that names, ports and addresses collide often and every
// converter and topology path is taken. Most draws are valid; now and then
// (see odd) a value is malformed, to check that bad input is skipped without
// disturbing the rest.

var (
	genNamespaces = []string{"ns1", "ns2"}
	genNames      = []string{"a", "b", "c"}
	genNodes      = []string{"", "node-a", "node-b", "node-c"}
	genZones      = []string{"", "z1", "z2"}
)

func draw[T any](t *rapid.T, label string, from ...T) T {
	return rapid.SampledFrom(from).Draw(t, label)
}

// odd reports, one time in 64, that the next value should be malformed.
// (rapid's integers favour small values; its booleans are fair.)
func odd(t *rapid.T, label string) bool {
	for range 6 {
		if !rapid.Bool().Draw(t, label+"-odd") {
			return false
		}
	}
	return true
}

// pick draws from good, or rarely from bad.
func pick[T any](t *rapid.T, label string, good []T, bad ...T) T {
	if len(bad) > 0 && odd(t, label) {
		return draw(t, label, bad...)
	}
	return draw(t, label, good...)
}

// maybe draws nil or a pointer to one of from.
func maybe[T any](t *rapid.T, label string, from ...T) *T {
	if rapid.IntRange(0, 3).Draw(t, label+"-nil") == 0 {
		return nil
	}
	v := draw(t, label, from...)
	return &v
}

// subset draws each of from with probability 1/3.
func subset(t *rapid.T, label string, from ...string) []string {
	var out []string
	for _, s := range from {
		if rapid.IntRange(0, 2).Draw(t, label) == 0 {
			out = append(out, s)
		}
	}
	return out
}

// genPorts are the Service ports and the matching EndpointSlice ports.
var genPorts = []struct {
	name     string
	protocol v1.Protocol
	port     int32
	target   int32
}{
	{"http", v1.ProtocolTCP, 80, 8080},
	{"dns", v1.ProtocolUDP, 53, 5353},
	{"", v1.ProtocolSCTP, 9999, 9999},
}

// genService draws a Service called key, most often with a cluster IP of
// family.
func genService(t *rapid.T, key types.NamespacedName, family v1.IPFamily) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if odd(t, "labels") {
		svc.Labels = map[string]string{draw(t, "label", servicemap.LabelServiceProxyName, servicemap.LabelHeadless): "x"}
	}
	spec := &svc.Spec
	spec.Type = pick(t, "type", []v1.ServiceType{"", v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer},
		v1.ServiceTypeExternalName, "Bogus")
	n := rapid.IntRange(0, 255).Draw(t, "clusterIP")
	v4, v6 := fmt.Sprintf("198.19.0.%d", n), fmt.Sprintf("2001:db8:19::%x", n)
	own, other := v4, v6
	if family == v1.IPv6Protocol {
		own, other = v6, v4
	}
	spec.ClusterIPs = pick(t, "clusterIPs", [][]string{{own}, {own}, {own, other}, {other, own}, {other}},
		nil, []string{"None"}, []string{"bogus"}, []string{"127.0.0.1"}, []string{v4, "::ffff:198.19.0.9"}, []string{"fe80::1%eth0"})
	if len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	ports := rapid.SliceOfNDistinct(rapid.IntRange(0, len(genPorts)-1), 1, 2, rapid.ID[int]).Draw(t, "ports")
	for _, i := range ports {
		p := genPorts[i]
		sp := v1.ServicePort{Name: p.name, Protocol: p.protocol, Port: p.port}
		if len(ports) > 1 && sp.Name == "" {
			sp.Name = "sctp" // several ports must all be named
		}
		if spec.Type == v1.ServiceTypeNodePort || spec.Type == v1.ServiceTypeLoadBalancer {
			sp.NodePort = 30000 + p.port
		}
		if odd(t, "badPort") {
			switch rapid.IntRange(0, 4).Draw(t, "badPortKind") {
			case 0:
				sp.Name = "Bad_Name"
			case 1:
				sp.Protocol = "ICMP"
			case 2:
				sp.Port = draw[int32](t, "portNumber", 0, -1, 70000)
			case 3:
				sp.NodePort = draw[int32](t, "nodePortNumber", -5, 70000)
			case 4:
				sp.Protocol = "" // defaults to TCP
			}
		}
		spec.Ports = append(spec.Ports, sp)
	}
	spec.ExternalIPs = subset(t, "externalIPs", "198.19.100.1", "203.0.113.5", "2001:db8:100::1", "2001:db8:101::1")
	if odd(t, "externalIP") {
		spec.ExternalIPs = append(spec.ExternalIPs, draw(t, "badExternalIP", "bogus", "0.0.0.0", " 198.19.100.2 ", "::1"))
	}
	spec.ExternalTrafficPolicy = pick[v1.ServiceExternalTrafficPolicy](t, "eTP", []v1.ServiceExternalTrafficPolicy{"", "Cluster", "Local", "Local"}, "Weird")
	spec.InternalTrafficPolicy = pick(t, "iTP", []*v1.ServiceInternalTrafficPolicy{nil, ptr(v1.ServiceInternalTrafficPolicyCluster), ptr(v1.ServiceInternalTrafficPolicyLocal)}, ptr[v1.ServiceInternalTrafficPolicy]("Weird"))
	if rapid.IntRange(0, 3).Draw(t, "hasSourceRanges") == 0 {
		spec.LoadBalancerSourceRanges = subset(t, "sourceRanges", "203.0.113.0/24", "198.51.100.7/16", "2001:db8:ff::/48")
		if odd(t, "sourceRange") {
			spec.LoadBalancerSourceRanges = append(spec.LoadBalancerSourceRanges, "bogus")
		}
	}
	for _, ip := range subset(t, "ingress", "198.19.200.1", "198.19.200.2", "2001:db8:200::1", "") {
		ing := v1.LoadBalancerIngress{IP: ip, Hostname: "lb.example"}
		if rapid.IntRange(0, 4).Draw(t, "proxyMode") == 0 {
			ing.IPMode = ptr(v1.LoadBalancerIPModeProxy)
		}
		if odd(t, "ingressIP") {
			ing.IP = "bogus"
		}
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
	}
	spec.SessionAffinity = pick[v1.ServiceAffinity](t, "affinity", []v1.ServiceAffinity{"", "None", "ClientIP"}, "Weird")
	if spec.SessionAffinity == v1.ServiceAffinityClientIP {
		if timeout := pick(t, "timeout", []*int32{nil, ptr[int32](60), ptr[int32](86400)}, ptr[int32](0), ptr[int32](86401)); timeout != nil {
			spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
	spec.TrafficDistribution = pick(t, "trafficDistribution", []*string{nil, nil,
		ptr(v1.ServiceTrafficDistributionPreferSameZone), ptr(v1.ServiceTrafficDistributionPreferClose), ptr(v1.ServiceTrafficDistributionPreferSameNode)},
		ptr("Weird"))
	if spec.Type == v1.ServiceTypeLoadBalancer && spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		spec.HealthCheckNodePort = pick[int32](t, "healthCheckNodePort", []int32{0, 32000}, -1, 70000)
	}
	return svc
}

// genSlice draws an EndpointSlice called key of the Service service
// (namespace key.Namespace), of family unless odd.
func genSlice(t *rapid.T, key types.NamespacedName, service string, family v1.IPFamily) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{}}}
	if !odd(t, "unlabelled") {
		es.Labels[discovery.LabelServiceName] = service
	}
	if odd(t, "otherProxy") {
		es.Labels[servicemap.LabelServiceProxyName] = "x"
	}
	six := family == v1.IPv6Protocol
	if odd(t, "family") {
		six = !six
	}
	es.AddressType = discovery.AddressTypeIPv4
	if six {
		es.AddressType = discovery.AddressTypeIPv6
	}
	if odd(t, "addressType") {
		es.AddressType = draw[discovery.AddressType](t, "badAddressType", "FQDN", "Bogus", "IPv4", "IPv6")
	}
	// each port with probability 3/4
	var ports []int
	for i := range genPorts {
		if !rapid.Bool().Draw(t, "skipPort1") || !rapid.Bool().Draw(t, "skipPort2") {
			ports = append(ports, i)
		}
	}
	for _, i := range ports {
		p := genPorts[i]
		ep := discovery.EndpointPort{Name: ptr(p.name), Protocol: ptr(p.protocol), Port: ptr(p.target)}
		if p.protocol == v1.ProtocolTCP && rapid.Bool().Draw(t, "defaultProtocol") {
			ep.Protocol = nil
		}
		if p.name == "" && rapid.Bool().Draw(t, "nilName") {
			ep.Name = nil
		}
		if odd(t, "badPort") {
			switch rapid.IntRange(0, 2).Draw(t, "badPortKind") {
			case 0:
				ep.Port = draw(t, "portNumber", nil, ptr[int32](0), ptr[int32](70000))
			case 1:
				ep.Protocol = ptr[v1.Protocol]("ICMP")
			case 2:
				ep.Name = ptr("Bad_Name")
			}
		}
		es.Ports = append(es.Ports, ep)
	}
	minEndpoints := 1
	if odd(t, "noEndpoints") {
		minEndpoints = 0
	}
	for i, n := 0, rapid.IntRange(minEndpoints, 6).Draw(t, "endpoints"); i < n; i++ {
		host := rapid.IntRange(1, 8).Draw(t, "host")
		addr := fmt.Sprintf("198.18.%d.%d", host%3, host)
		if six {
			addr = fmt.Sprintf("2001:db8:18::%d", host)
		}
		if odd(t, "address") {
			addr = draw(t, "badAddr", "bogus", "0.0.0.0", "224.0.0.1", "fe80::1%eth0", "::ffff:198.18.1.1", "198.18.1.1", "2001:db8:18::1")
		}
		e := discovery.Endpoint{
			Addresses: []string{addr},
			NodeName:  pick(t, "node", []*string{ptr("node-a"), ptr("node-b"), ptr("node-c")}, nil),
			Zone:      pick(t, "zone", []*string{ptr("z1"), ptr("z2")}, nil),
		}
		// ready; serving and terminating; terminating; not ready; or, rarely,
		// any combination with nils (publishNotReadyAddresses, old clients).
		switch rapid.IntRange(0, 5).Draw(t, "conditions") {
		case 0, 1:
			e.Conditions = discovery.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
		case 2:
			e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
		case 3:
			e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
		case 4:
			e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
		case 5:
			e.Conditions = discovery.EndpointConditions{
				Ready:       maybe(t, "ready", true, false),
				Serving:     maybe(t, "serving", true, false),
				Terminating: maybe(t, "terminating", true, false),
			}
		}
		if rapid.IntRange(0, 3).Draw(t, "hints") == 0 {
			e.Hints = &discovery.EndpointHints{}
			for _, z := range subset(t, "zoneHints", genZones[1:]...) {
				e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
			}
			for _, n := range subset(t, "nodeHints", genNodes[1:]...) {
				e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: n})
			}
		}
		es.Endpoints = append(es.Endpoints, e)
	}
	return es
}

// event is an Update of svc or es, or, when both are nil, a Delete of key.
type event struct {
	key     types.NamespacedName
	isSlice bool
	svc     *v1.Service
	es      *discovery.EndpointSlice
}

// history is what happens to each object: for each key, the events in the
// order they must be applied. Only the last event of each key decides what
// the trackers end up with.
type history [][]event

// genHistory draws the histories of some Services and EndpointSlices, most
// of them of family.
func genHistory(t *rapid.T, family v1.IPFamily) history {
	var h history
	type nsName struct{ ns, name string }
	var keys []nsName
	for _, ns := range genNamespaces {
		for _, n := range genNames {
			keys = append(keys, nsName{ns, n})
		}
	}
	svcKeys := rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 0, 6, func(k nsName) nsName { return k }).Draw(t, "services")
	for _, k := range svcKeys {
		h = append(h, genEvents(t, types.NamespacedName{Namespace: k.ns, Name: k.name}, "", family))
	}
	for i, n := 0, len(svcKeys)+rapid.IntRange(0, 4).Draw(t, "slices"); i < n; i++ {
		// mostly slices of the Services drawn
		owner := nsName{draw(t, "sliceNS", genNamespaces...), draw(t, "sliceService", genNames...)}
		if len(svcKeys) > 0 && !odd(t, "orphan") {
			owner = draw(t, "owner", svcKeys...)
		}
		key := types.NamespacedName{Namespace: owner.ns, Name: fmt.Sprintf("%s-%d", owner.name, i)}
		h = append(h, genEvents(t, key, owner.name, family))
	}
	return h
}

// genEvents draws the events of one Service, or of one EndpointSlice of the
// Service called service when that is not "".
func genEvents(t *rapid.T, key types.NamespacedName, service string, family v1.IPFamily) []event {
	var evs []event
	for i, n := 0, rapid.IntRange(1, 3).Draw(t, "versions"); i < n; i++ {
		ev := event{key: key, isSlice: service != ""}
		// a quarter of the events are deletes
		if !rapid.Bool().Draw(t, "delete1") || !rapid.Bool().Draw(t, "delete2") {
			if service != "" {
				ev.es = genSlice(t, key, service, family)
			} else {
				ev.svc = genService(t, key, family)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// order draws an interleaving of the histories: each key's events stay in
// order, the keys' events are shuffled together.
func (h history) order(t *rapid.T, label string) []event {
	var tokens []int
	for i, evs := range h {
		for range evs {
			tokens = append(tokens, i)
		}
	}
	tokens = rapid.Permutation(tokens).Draw(t, label)
	next := make([]int, len(h))
	out := make([]event, 0, len(tokens))
	for _, i := range tokens {
		out = append(out, h[i][next[i]])
		next[i]++
	}
	return out
}

// final is each key's last event alone.
func (h history) final() []event {
	var out []event
	for _, evs := range h {
		out = append(out, evs[len(evs)-1])
	}
	return out
}

// feed applies events to fresh trackers of family and returns their
// snapshots.
func feed(family v1.IPFamily, events []event) (servicemap.Snapshot, endpoints.Snapshot) {
	st := servicemap.NewTracker(family, servicemap.Filter{})
	et := endpoints.NewTracker(family, servicemap.Filter{})
	for _, ev := range events {
		switch {
		case ev.svc != nil:
			st.Update(ev.svc)
		case ev.es != nil:
			et.Update(ev.es)
		case ev.isSlice:
			et.Delete(ev.key.Namespace, ev.key.Name)
		default:
			st.Delete(ev.key.Namespace, ev.key.Name)
		}
	}
	ss, _ := st.Snapshot()
	es, _ := et.Snapshot()
	return ss, es
}

func genConfig(t *rapid.T, family v1.IPFamily) ruleset.Config {
	cfg := ruleset.Config{
		Family:              family,
		Node:                topology.Node{Name: draw(t, "nodeName", genNodes...), Zone: draw(t, "nodeZone", genZones...)},
		MasqueradeAll:       rapid.Bool().Draw(t, "masqueradeAll"),
		ComputeHints:        rapid.Bool().Draw(t, "computeHints"),
		RestrictExternalIPs: rapid.Bool().Draw(t, "restrictExternalIPs"),
	}
	if family == v1.IPv4Protocol {
		cfg.AllowedExternalIPs = pfx(subset(t, "allowed", "198.19.100.0/24", "203.0.113.5/32")...)
	} else {
		cfg.AllowedExternalIPs = pfx(subset(t, "allowed", "2001:db8:100::/48")...)
	}
	return cfg
}

func genFamily(t *rapid.T, label string) v1.IPFamily {
	return draw(t, label, v1.IPv4Protocol, v1.IPv6Protocol)
}

// values dereferences the Services so that cmp compares every field rather
// than calling Service.Equal, which looks only at what the rules depend on.
func values(ss []*ruleset.Service) []ruleset.Service {
	out := make([]ruleset.Service, len(ss))
	for i, s := range ss {
		out[i] = *s
	}
	return out
}

// Property: the Ruleset does not depend on the order in which objects
// arrived, nor on updates and deletes that a later event overrode.
func TestPropDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		h := genHistory(t, family)
		cfg := genConfig(t, family)
		b, err := ruleset.NewBuilder(cfg)
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		ss1, es1 := feed(family, h.order(t, "order1"))
		ss2, es2 := feed(family, h.order(t, "order2"))
		ss3, es3 := feed(family, h.final())
		rs1, w1 := b.Build(ss1, es1)
		rs2, w2 := b.Build(ss2, es2)
		rs3, w3 := b.Build(ss3, es3)
		if diff := cmp.Diff(values(rs1.Services()), values(rs2.Services()), cmpOpts); diff != "" {
			t.Fatalf("two arrival orders give different Rulesets (-order1 +order2):\n%s", diff)
		}
		if diff := cmp.Diff(values(rs1.Services()), values(rs3.Services()), cmpOpts); diff != "" {
			t.Fatalf("history and final state give different Rulesets (-history +final):\n%s", diff)
		}
		if ch := ruleset.Diff(rs1, rs2); !ch.Empty() {
			t.Fatalf("Diff of the two orders = %+v, want empty", ch)
		}
		if ch := ruleset.Diff(rs3, rs1); !ch.Empty() {
			t.Fatalf("Diff of final and history = %+v, want empty", ch)
		}
		if diff := cmp.Diff(w1, w2); diff != "" {
			t.Fatalf("Build warnings differ between orders (-order1 +order2):\n%s", diff)
		}
		if diff := cmp.Diff(w1, w3); diff != "" {
			t.Fatalf("Build warnings differ (-history +final):\n%s", diff)
		}
	})
}

// Property: Build never panics, and each ServicePort of the snapshot appears
// exactly once in the Ruleset when the families match, and not at all, with a
// warning naming its Service, when they do not.
func TestPropEveryServicePortOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		trackerFamily := genFamily(t, "trackerFamily")
		ruleFamily := genFamily(t, "rulesetFamily")
		h := genHistory(t, trackerFamily)
		b, err := ruleset.NewBuilder(genConfig(t, ruleFamily))
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		ss, es := feed(trackerFamily, h.order(t, "order"))
		rs, warnings := b.Build(ss, es)

		var want, got []servicemap.PortName
		for _, sp := range ss.Ports() {
			want = append(want, sp.Name)
		}
		for _, s := range rs.Services() {
			got = append(got, s.Name)
			if s.Family != ruleFamily {
				t.Fatalf("%v: family %s in an %s Ruleset", s.Name, s.Family, ruleFamily)
			}
			if found, ok := rs.Service(s.Name); !ok || found != s {
				t.Fatalf("Service(%v) does not find it", s.Name)
			}
		}
		if trackerFamily != ruleFamily {
			if len(got) != 0 {
				t.Fatalf("Ruleset of %s holds %s ports %v", ruleFamily, trackerFamily, got)
			}
			var skipped []servicemap.PortName
			for _, w := range warnings {
				for _, name := range want {
					if w.Kind == "Service" && w.Namespace == name.Namespace && w.Name == name.Name &&
						w.Reason == fmt.Sprintf("port %q is %s, the ruleset is %s: skipped", name.Port, trackerFamily, ruleFamily) {
						skipped = append(skipped, name)
					}
				}
			}
			if diff := cmp.Diff(want, skipped); diff != "" {
				t.Fatalf("skipped-port warnings (-want +got):\n%s", diff)
			}
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Ruleset ports differ from the snapshot's (-snapshot +ruleset):\n%s", diff)
		}
		for _, w := range warnings {
			if w.Kind != "Service" || !slices.ContainsFunc(want, func(n servicemap.PortName) bool {
				return n.Namespace == w.Namespace && n.Name == w.Name
			}) {
				t.Fatalf("warning %v does not name a Service of the snapshot", w)
			}
		}
	})
}

// Property: the structure of every Service is consistent.
func TestPropServiceInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		h := genHistory(t, family)
		cfg := genConfig(t, family)
		b, err := ruleset.NewBuilder(cfg)
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		ss, es := feed(family, h.order(t, "order"))
		rs, warnings := b.Build(ss, es)
		for _, s := range rs.Services() {
			checkService(t, cfg, s, ss, warnings)
		}
	})
}

func checkService(t *rapid.T, cfg ruleset.Config, s *ruleset.Service, ss servicemap.Snapshot, warnings []svcproxy.Warning) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%v: %s\n%+v", s.Name, fmt.Sprintf(format, args...), summarize(s))
	}
	switch s.Internal {
	case ruleset.RouteCluster, ruleset.RouteLocal, ruleset.RouteReject, ruleset.RouteDrop:
	default:
		fail("Internal route %v", s.Internal)
	}
	if (s.External == ruleset.RouteNone) != !s.ExternallyAccessible() {
		fail("External %v, externally accessible %v", s.External, s.ExternallyAccessible())
	}
	for _, r := range []ruleset.Route{s.Internal, s.External} {
		switch r {
		case ruleset.RouteCluster:
			if len(s.ClusterTargets) == 0 {
				fail("route cluster without ClusterTargets")
			}
		case ruleset.RouteLocal:
			if len(s.LocalTargets) == 0 {
				fail("route local without LocalTargets")
			}
		case ruleset.RouteReject:
			if len(s.ClusterTargets)+len(s.LocalTargets) != 0 {
				fail("route reject with targets")
			}
		case ruleset.RouteDrop:
			if len(s.LocalTargets) != 0 {
				fail("route drop with LocalTargets")
			}
		}
	}
	// Internal and external traffic agree on whether the Service has
	// endpoints at all.
	if s.External != ruleset.RouteNone && (s.Internal == ruleset.RouteReject) != (s.External == ruleset.RouteReject) {
		fail("internal %v but external %v", s.Internal, s.External)
	}
	if (s.Internal == ruleset.RouteLocal) != (s.InternalPolicyLocal && len(s.LocalTargets) > 0) {
		fail("internal route %v with internalTrafficPolicy Local %v", s.Internal, s.InternalPolicyLocal)
	}
	if s.ExternalPolicyLocal && !s.ExternallyAccessible() {
		fail("ExternalPolicyLocal on a port that is not externally accessible")
	}

	// Endpoints: sorted, each once, exactly the endpoints targets point at.
	var fromTargets []string
	for _, tg := range slices.Concat(s.ClusterTargets, s.LocalTargets) {
		fromTargets = append(fromTargets, tg.Endpoint.String())
	}
	for i := 1; i < len(s.Endpoints); i++ {
		if s.Endpoints[i-1].Compare(&s.Endpoints[i]) >= 0 {
			fail("Endpoints not sorted or duplicated at %d", i)
		}
	}
	var eps []string
	for _, e := range s.Endpoints {
		eps = append(eps, e.String())
	}
	for _, e := range fromTargets {
		if !slices.Contains(eps, e) {
			fail("target %s is not in Endpoints", e)
		}
	}
	for _, e := range eps {
		if !slices.Contains(fromTargets, e) {
			fail("endpoint %s is no target's", e)
		}
	}

	for _, list := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
		for i, tg := range list {
			if tg.Remaining != len(list)-i {
				fail("target %d of %d has Remaining %d", i, len(list), tg.Remaining)
			}
			j := slices.IndexFunc(s.Endpoints, func(e endpoints.Endpoint) bool { return e.AddrPort() == tg.Endpoint })
			e := s.Endpoints[j]
			if want := cfg.Node.Name != "" && e.NodeName == cfg.Node.Name; tg.Local != want {
				fail("target %s Local %v, endpoint on node %q", tg.Endpoint, tg.Local, e.NodeName)
			}
			if !e.Ready && !(e.Serving && e.Terminating) {
				fail("target %s is not usable: %+v", tg.Endpoint, e)
			}
			if tg.Endpoint.Addr().Is4() != (cfg.Family == v1.IPv4Protocol) {
				fail("target %s of the wrong family", tg.Endpoint)
			}
		}
	}
	for _, tg := range s.LocalTargets {
		if !tg.Local {
			fail("LocalTargets holds %s, not local", tg.Endpoint)
		}
	}

	// ExternalIPs: those of the snapshot, restricted when asked to.
	sp, ok := ss.Get(s.Name)
	if !ok {
		fail("not in the snapshot")
	}
	for _, ip := range sp.ExternalIPs {
		allowed := !cfg.RestrictExternalIPs || slices.ContainsFunc(cfg.AllowedExternalIPs, func(p netip.Prefix) bool { return p.Contains(ip) })
		if slices.Contains(s.ExternalIPs, ip) != allowed {
			fail("externalIP %s served %v, allowed %v", ip, !allowed, allowed)
		}
		warned := slices.Contains(warnings, svcproxy.Warning{
			Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
			Reason: fmt.Sprintf("externalIP %s is not allowed: not served", ip),
		})
		if warned == allowed {
			fail("externalIP %s allowed %v, warned %v", ip, allowed, warned)
		}
	}
}

// reach returns the probability, for each target of a list whose target i
// is taken with probability p[i] when reached, that traffic ends there.
func reach(p []*big.Rat) []*big.Rat {
	out := make([]*big.Rat, len(p))
	left := big.NewRat(1, 1) // probability of reaching target i
	for i := range p {
		out[i] = new(big.Rat).Mul(left, p[i])
		left.Mul(left, new(big.Rat).Sub(big.NewRat(1, 1), p[i]))
	}
	return out
}

// decimal is the probability an iptables rule for a target with this
// Remaining matches, as the renderer writes it: "%0.10f" of 1/Remaining, and
// no probability (always) for the last target.
func decimal(remaining int) *big.Rat {
	if remaining == 1 {
		return big.NewRat(1, 1)
	}
	r, ok := new(big.Rat).SetString(fmt.Sprintf("%0.10f", 1/float64(remaining)))
	if !ok {
		panic("unparsable decimal")
	}
	return r
}

// kernel is the probability the kernel applies for decimal p: iptables'
// statistic match stores lround(p·2^31) and matches when a random 31-bit
// number is below it.
func kernel(p *big.Rat) *big.Rat {
	if p.Cmp(big.NewRat(1, 1)) == 0 {
		return p // the last target has no statistic match
	}
	scale := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 31))
	x := new(big.Rat).Mul(p, scale)
	// round half away from zero, as lround does (x ≥ 0)
	n := new(big.Int).Quo(new(big.Int).Add(new(big.Int).Mul(x.Num(), big.NewInt(2)), x.Denom()), new(big.Int).Mul(x.Denom(), big.NewInt(2)))
	return new(big.Rat).Quo(new(big.Rat).SetInt(n), scale)
}

func absDiff(a, b *big.Rat) *big.Rat { return new(big.Rat).Abs(new(big.Rat).Sub(a, b)) }

// Error bounds. A decimal with 10 places is within 5e-11 of 1/Remaining (plus
// the float64 error of 1/Remaining, below 1e-16), and the kernel's
// lround(p·2^31)/2^31 within 2^-32 of the decimal: each stored per-rule
// probability is off by at most δ = 5e-11 + 2^-32 ≈ 2.83e-10 (the last
// target's, always 1, by nothing). To first order, target i of N is reached
// with an error of at most δ·((N−i)/N + Σ_{j<i} R_j/(R_j−1)/N) (R_j =
// N−j ≥ 2): the first term from its own rule, the sum from the rules before
// it. That factor is at most (N−1)/N + H_{N−1}/N, largest at N = 5 with
// 1.2167; the second-order terms are below (Nδ)² ≈ 1e-15. So the kernel
// probabilities are within 1.25·δ < 3.6e-10 of 1/N, and the decimals alone
// within 1.25·5e-11.
var (
	decimalBound = mustRat("6.3e-11")
	kernelBound  = new(big.Rat).Mul(big.NewRat(5, 4), new(big.Rat).Add(mustRat("5e-11"), big.NewRat(1, 1<<32)))
	issueBound   = mustRat("1e-9")
)

func mustRat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

// checkProbabilities checks that each target of ts is reached with
// probability exactly 1/N, and with the rendered and the kernel's
// probabilities within the bounds above; it returns the largest deviation of
// each.
func checkProbabilities(t interface {
	Helper()
	Fatalf(string, ...any)
}, ts []ruleset.Target) (maxDecimal, maxKernel *big.Rat) {
	t.Helper()
	n := len(ts)
	want := big.NewRat(1, int64(n))
	var exact, dec, kern []*big.Rat
	for i, tg := range ts {
		if tg.Remaining != n-i {
			t.Fatalf("target %d of %d: Remaining %d", i, n, tg.Remaining)
		}
		exact = append(exact, tg.Probability())
		dec = append(dec, decimal(tg.Remaining))
		kern = append(kern, kernel(decimal(tg.Remaining)))
	}
	maxDecimal, maxKernel = new(big.Rat), new(big.Rat)
	sum := new(big.Rat)
	for i, r := range reach(exact) {
		if r.Cmp(want) != 0 {
			t.Fatalf("N=%d: target %d reached with probability %v, want exactly %v", n, i, r, want)
		}
		sum.Add(sum, r)
	}
	if sum.Cmp(big.NewRat(1, 1)) != 0 {
		t.Fatalf("N=%d: probabilities sum to %v", n, sum)
	}
	for i, r := range reach(dec) {
		d := absDiff(r, want)
		if d.Cmp(decimalBound) > 0 || d.Cmp(issueBound) > 0 {
			f, _ := d.Float64()
			t.Fatalf("N=%d: target %d reached with rendered probability %s, %.3g from 1/N", n, i, r.FloatString(15), f)
		}
		if d.Cmp(maxDecimal) > 0 {
			maxDecimal = d
		}
	}
	for i, r := range reach(kern) {
		d := absDiff(r, want)
		if d.Cmp(kernelBound) > 0 || d.Cmp(issueBound) > 0 {
			f, _ := d.Float64()
			t.Fatalf("N=%d: target %d reached with kernel probability %s, %.3g from 1/N", n, i, r.FloatString(15), f)
		}
		if d.Cmp(maxKernel) > 0 {
			maxKernel = d
		}
	}
	return maxDecimal, maxKernel
}

// For every N from 1 to 100, a Service with N endpoints gives each endpoint
// probability exactly 1/N, and its rendered probabilities nearly so.
func TestProbabilities(t *testing.T) {
	maxDec, maxKern := new(big.Rat), new(big.Rat)
	var argDec, argKern int
	for n := 1; n <= 100; n++ {
		var eps []ep
		for i := range n {
			eps = append(eps, ep{ip: fmt.Sprintf("198.18.%d.%d", 1+i/50, 1+(i*37)%50), node: genNodes[1+i%3]})
		}
		rs := build(t, v4Config(), []*v1.Service{service("ns", "web", "198.19.0.10", nodePort, eTPLocal)},
			[]*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", eps...)})
		s, _ := rs.Service(webPort("ns", "web"))
		if len(s.ClusterTargets) != n {
			t.Fatalf("N=%d: %d cluster targets", n, len(s.ClusterTargets))
		}
		for _, ts := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
			d, k := checkProbabilities(t, ts)
			if d.Cmp(maxDec) > 0 {
				maxDec, argDec = d, len(ts)
			}
			if k.Cmp(maxKern) > 0 {
				maxKern, argKern = k, len(ts)
			}
		}
	}
	fd, _ := maxDec.Float64()
	fk, _ := maxKern.Float64()
	bound, _ := kernelBound.Float64()
	t.Logf("largest deviation from 1/N, N ≤ 100: rendered decimals %.4g (N=%d), kernel round(p·2^31)/2^31 %.4g (N=%d); bound %.3g",
		fd, argDec, fk, argKern, bound)
}

// Property: whatever the endpoints, both target lists give each target
// probability 1/N.
func TestPropProbabilities(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		h := genHistory(t, family)
		b, err := ruleset.NewBuilder(genConfig(t, family))
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		rs, _ := b.Build(feed(family, h.order(t, "order")))
		for _, s := range rs.Services() {
			for _, ts := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
				if len(ts) > 0 {
					checkProbabilities(t, ts)
				}
			}
		}
	})
}
