package ruleset_test

import (
	"fmt"

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
	spec.ExternalIPs = subset(t, "externalIPs", "198.19.100.1", "203.0.113.5", "2001:db8:100::1", "2001:db8:101::1", "198.19.200.1")
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

// genBuilt is the Ruleset of a generated cluster: its family, its history
// of objects fed in a drawn order, and a Config, drawn in that order; with
// the Config, the Services' snapshot and Build's warnings.
func genBuilt(t *rapid.T) (ruleset.Config, servicemap.Snapshot, *ruleset.Ruleset, []svcproxy.Warning) {
	family := genFamily(t, "family")
	h := genHistory(t, family)
	cfg := genConfig(t, family)
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatalf("NewBuilder: %v", err)
	}
	ss, es := feed(family, h.order(t, "order"))
	rs, warnings := b.Build(ss, es)
	return cfg, ss, rs, warnings
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
