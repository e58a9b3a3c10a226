// Package rapidgen draws Services, EndpointSlices, their histories and
// ruleset Configs for property tests (pgregory.net/rapid): the generators
// of ruleset's property tests, shared with the tests of the packages above
// it (state's). It sits at the layer of ruleset, which it imports.
package rapidgen

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// The generators draw Services and EndpointSlices from small pools of
// values, so that names, ports and addresses collide often and every
// converter and topology path is taken. Most draws are valid; now and then
// (see Odd) a value is malformed, to check that bad input is skipped without
// disturbing the rest.

// The pools that names, nodes and zones are drawn from.
var (
	GenNamespaces = []string{"ns1", "ns2"}
	GenNames      = []string{"a", "b", "c"}
	GenNodes      = []string{"", "node-a", "node-b", "node-c"}
	GenZones      = []string{"", "z1", "z2"}
)

// Draw draws one of from.
func Draw[T any](t *rapid.T, label string, from ...T) T {
	return rapid.SampledFrom(from).Draw(t, label)
}

// Odd reports, one time in 64, that the next value should be malformed.
// (rapid's integers favour small values; its booleans are fair.)
func Odd(t *rapid.T, label string) bool {
	for range 6 {
		if !rapid.Bool().Draw(t, label+"-Odd") {
			return false
		}
	}
	return true
}

// Pick draws from good, or rarely from bad.
func Pick[T any](t *rapid.T, label string, good []T, bad ...T) T {
	if len(bad) > 0 && Odd(t, label) {
		return Draw(t, label, bad...)
	}
	return Draw(t, label, good...)
}

// Maybe draws nil or a pointer to one of from.
func Maybe[T any](t *rapid.T, label string, from ...T) *T {
	if rapid.IntRange(0, 3).Draw(t, label+"-nil") == 0 {
		return nil
	}
	v := Draw(t, label, from...)
	return &v
}

// Subset draws each of from with probability 1/3.
func Subset(t *rapid.T, label string, from ...string) []string {
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

// GenService draws a Service called key, most often with a cluster IP of
// family.
func GenService(t *rapid.T, key types.NamespacedName, family v1.IPFamily) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if Odd(t, "labels") {
		svc.Labels = map[string]string{Draw(t, "label", servicemap.LabelServiceProxyName, servicemap.LabelHeadless): "x"}
	}
	spec := &svc.Spec
	spec.Type = Pick(t, "type", []v1.ServiceType{"", v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer},
		v1.ServiceTypeExternalName, "Bogus")
	n := rapid.IntRange(0, 255).Draw(t, "clusterIP")
	v4, v6 := fmt.Sprintf("198.19.0.%d", n), fmt.Sprintf("2001:db8:19::%x", n)
	own, other := v4, v6
	if family == v1.IPv6Protocol {
		own, other = v6, v4
	}
	spec.ClusterIPs = Pick(t, "clusterIPs", [][]string{{own}, {own}, {own, other}, {other, own}, {other}},
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
		if Odd(t, "badPort") {
			switch rapid.IntRange(0, 4).Draw(t, "badPortKind") {
			case 0:
				sp.Name = "Bad_Name"
			case 1:
				sp.Protocol = "ICMP"
			case 2:
				sp.Port = Draw[int32](t, "portNumber", 0, -1, 70000)
			case 3:
				sp.NodePort = Draw[int32](t, "nodePortNumber", -5, 70000)
			case 4:
				sp.Protocol = "" // defaults to TCP
			}
		}
		spec.Ports = append(spec.Ports, sp)
	}
	spec.ExternalIPs = Subset(t, "externalIPs", "198.19.100.1", "203.0.113.5", "2001:db8:100::1", "2001:db8:101::1", "198.19.200.1")
	if Odd(t, "externalIP") {
		spec.ExternalIPs = append(spec.ExternalIPs, Draw(t, "badExternalIP", "bogus", "0.0.0.0", " 198.19.100.2 ", "::1"))
	}
	spec.ExternalTrafficPolicy = Pick[v1.ServiceExternalTrafficPolicy](t, "eTP", []v1.ServiceExternalTrafficPolicy{"", "Cluster", "Local", "Local"}, "Weird")
	spec.InternalTrafficPolicy = Pick(t, "iTP", []*v1.ServiceInternalTrafficPolicy{nil, ptr(v1.ServiceInternalTrafficPolicyCluster), ptr(v1.ServiceInternalTrafficPolicyLocal)}, ptr[v1.ServiceInternalTrafficPolicy]("Weird"))
	if rapid.IntRange(0, 3).Draw(t, "hasSourceRanges") == 0 {
		spec.LoadBalancerSourceRanges = Subset(t, "sourceRanges", "203.0.113.0/24", "198.51.100.7/16", "2001:db8:ff::/48")
		if Odd(t, "sourceRange") {
			spec.LoadBalancerSourceRanges = append(spec.LoadBalancerSourceRanges, "bogus")
		}
	}
	for _, ip := range Subset(t, "ingress", "198.19.200.1", "198.19.200.2", "2001:db8:200::1", "") {
		ing := v1.LoadBalancerIngress{IP: ip, Hostname: "lb.example"}
		if rapid.IntRange(0, 4).Draw(t, "proxyMode") == 0 {
			ing.IPMode = ptr(v1.LoadBalancerIPModeProxy)
		}
		if Odd(t, "ingressIP") {
			ing.IP = "bogus"
		}
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
	}
	spec.SessionAffinity = Pick[v1.ServiceAffinity](t, "affinity", []v1.ServiceAffinity{"", "None", "ClientIP"}, "Weird")
	if spec.SessionAffinity == v1.ServiceAffinityClientIP {
		if timeout := Pick(t, "timeout", []*int32{nil, ptr[int32](60), ptr[int32](86400)}, ptr[int32](0), ptr[int32](86401)); timeout != nil {
			spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
	spec.TrafficDistribution = Pick(t, "trafficDistribution", []*string{nil, nil,
		ptr(v1.ServiceTrafficDistributionPreferSameZone), ptr(v1.ServiceTrafficDistributionPreferClose), ptr(v1.ServiceTrafficDistributionPreferSameNode)},
		ptr("Weird"))
	if spec.Type == v1.ServiceTypeLoadBalancer && spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		spec.HealthCheckNodePort = Pick[int32](t, "healthCheckNodePort", []int32{0, 32000}, -1, 70000)
	}
	return svc
}

// GenSlice draws an EndpointSlice called key of the Service service
// (namespace key.Namespace), of family unless Odd.
func GenSlice(t *rapid.T, key types.NamespacedName, service string, family v1.IPFamily) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{}}}
	if !Odd(t, "unlabelled") {
		es.Labels[discovery.LabelServiceName] = service
	}
	if Odd(t, "otherProxy") {
		es.Labels[servicemap.LabelServiceProxyName] = "x"
	}
	six := family == v1.IPv6Protocol
	if Odd(t, "family") {
		six = !six
	}
	es.AddressType = discovery.AddressTypeIPv4
	if six {
		es.AddressType = discovery.AddressTypeIPv6
	}
	if Odd(t, "addressType") {
		es.AddressType = Draw[discovery.AddressType](t, "badAddressType", "FQDN", "Bogus", "IPv4", "IPv6")
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
		if Odd(t, "badPort") {
			switch rapid.IntRange(0, 2).Draw(t, "badPortKind") {
			case 0:
				ep.Port = Draw(t, "portNumber", nil, ptr[int32](0), ptr[int32](70000))
			case 1:
				ep.Protocol = ptr[v1.Protocol]("ICMP")
			case 2:
				ep.Name = ptr("Bad_Name")
			}
		}
		es.Ports = append(es.Ports, ep)
	}
	minEndpoints := 1
	if Odd(t, "noEndpoints") {
		minEndpoints = 0
	}
	for i, n := 0, rapid.IntRange(minEndpoints, 6).Draw(t, "endpoints"); i < n; i++ {
		host := rapid.IntRange(1, 8).Draw(t, "host")
		addr := fmt.Sprintf("198.18.%d.%d", host%3, host)
		if six {
			addr = fmt.Sprintf("2001:db8:18::%d", host)
		}
		if Odd(t, "address") {
			addr = Draw(t, "badAddr", "bogus", "0.0.0.0", "224.0.0.1", "fe80::1%eth0", "::ffff:198.18.1.1", "198.18.1.1", "2001:db8:18::1")
		}
		e := discovery.Endpoint{
			Addresses: []string{addr},
			NodeName:  Pick(t, "node", []*string{ptr("node-a"), ptr("node-b"), ptr("node-c")}, nil),
			Zone:      Pick(t, "zone", []*string{ptr("z1"), ptr("z2")}, nil),
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
				Ready:       Maybe(t, "ready", true, false),
				Serving:     Maybe(t, "serving", true, false),
				Terminating: Maybe(t, "terminating", true, false),
			}
		}
		if rapid.IntRange(0, 3).Draw(t, "hints") == 0 {
			e.Hints = &discovery.EndpointHints{}
			for _, z := range Subset(t, "zoneHints", GenZones[1:]...) {
				e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
			}
			for _, n := range Subset(t, "nodeHints", GenNodes[1:]...) {
				e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: n})
			}
		}
		es.Endpoints = append(es.Endpoints, e)
	}
	return es
}

// Event is an Update of svc or es, or, when both are nil, a Delete of key.
type Event struct {
	Key     types.NamespacedName
	IsSlice bool
	Svc     *v1.Service
	ES      *discovery.EndpointSlice
}

// History is what happens to each object: for each key, the events in the
// order they must be applied. Only the last Event of each key decides what
// the trackers end up with.
type History [][]Event

// GenHistory draws the histories of some Services and EndpointSlices, most
// of them of family.
func GenHistory(t *rapid.T, family v1.IPFamily) History {
	var h History
	type nsName struct{ ns, name string }
	var keys []nsName
	for _, ns := range GenNamespaces {
		for _, n := range GenNames {
			keys = append(keys, nsName{ns, n})
		}
	}
	svcKeys := rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 0, 6, func(k nsName) nsName { return k }).Draw(t, "services")
	for _, k := range svcKeys {
		h = append(h, genEvents(t, types.NamespacedName{Namespace: k.ns, Name: k.name}, "", family))
	}
	for i, n := 0, len(svcKeys)+rapid.IntRange(0, 4).Draw(t, "slices"); i < n; i++ {
		// mostly slices of the Services drawn
		owner := nsName{Draw(t, "sliceNS", GenNamespaces...), Draw(t, "sliceService", GenNames...)}
		if len(svcKeys) > 0 && !Odd(t, "orphan") {
			owner = Draw(t, "owner", svcKeys...)
		}
		key := types.NamespacedName{Namespace: owner.ns, Name: fmt.Sprintf("%s-%d", owner.name, i)}
		h = append(h, genEvents(t, key, owner.name, family))
	}
	return h
}

// genEvents draws the events of one Service, or of one EndpointSlice of the
// Service called service when that is not "".
func genEvents(t *rapid.T, key types.NamespacedName, service string, family v1.IPFamily) []Event {
	var evs []Event
	for i, n := 0, rapid.IntRange(1, 3).Draw(t, "versions"); i < n; i++ {
		ev := Event{Key: key, IsSlice: service != ""}
		// a quarter of the events are deletes
		if !rapid.Bool().Draw(t, "delete1") || !rapid.Bool().Draw(t, "delete2") {
			if service != "" {
				ev.ES = GenSlice(t, key, service, family)
			} else {
				ev.Svc = GenService(t, key, family)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// order draws an interleaving of the histories: each key's events stay in
// order, the keys' events are shuffled together.
func (h History) Order(t *rapid.T, label string) []Event {
	var tokens []int
	for i, evs := range h {
		for range evs {
			tokens = append(tokens, i)
		}
	}
	tokens = rapid.Permutation(tokens).Draw(t, label)
	next := make([]int, len(h))
	out := make([]Event, 0, len(tokens))
	for _, i := range tokens {
		out = append(out, h[i][next[i]])
		next[i]++
	}
	return out
}

// final is each key's last Event alone.
func (h History) Final() []Event {
	var out []Event
	for _, evs := range h {
		out = append(out, evs[len(evs)-1])
	}
	return out
}

// GenConfig draws a Config of family: the node's name and zone from the
// pools, the booleans, allowed external IPs.
func GenConfig(t *rapid.T, family v1.IPFamily) ruleset.Config {
	cfg := ruleset.Config{
		Family:              family,
		Node:                topology.Node{Name: Draw(t, "nodeName", GenNodes...), Zone: Draw(t, "nodeZone", GenZones...)},
		MasqueradeAll:       rapid.Bool().Draw(t, "masqueradeAll"),
		ComputeHints:        rapid.Bool().Draw(t, "computeHints"),
		RestrictExternalIPs: rapid.Bool().Draw(t, "restrictExternalIPs"),
	}
	if family == v1.IPv4Protocol {
		cfg.AllowedExternalIPs = pfx(Subset(t, "allowed", "198.19.100.0/24", "203.0.113.5/32")...)
	} else {
		cfg.AllowedExternalIPs = pfx(Subset(t, "allowed", "2001:db8:100::/48")...)
	}
	return cfg
}

// GenFamily draws IPv4 or IPv6.
func GenFamily(t *rapid.T, label string) v1.IPFamily {
	return Draw(t, label, v1.IPv4Protocol, v1.IPv6Protocol)
}

func ptr[T any](v T) *T { return &v }

// pfx parses prefixes; a bad one panics (the generators' own values).
func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
