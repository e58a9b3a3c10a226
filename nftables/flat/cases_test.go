package flat_test

// The drawn clusters, packets and changes of the property tests, and the
// kernel listing they compare, are those of package nftables' tests (its
// property_test.go and evaluate_property_test.go draw the same values in
// the same order), so that both layouts are checked on the same cases.

import (
	"fmt"
	"math/big"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	svcaffinity "github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// benchWorld builds n Services with 10 endpoints each, and the same with
// one more endpoint on the first Service.
func benchWorld(b *testing.B, n int) (before, after *ruleset.Ruleset) {
	w := newWorld(b, config4())
	for i := range n {
		name := fmt.Sprintf("svc%05d", i)
		var eps []ep
		for j := range 10 {
			eps = append(eps, ep{ip: fmt.Sprintf("198.18.%d.%d", 64+(i*10+j)/250%64, (i*10+j)%250+2), node: node})
		}
		w.add(svc("bench", name, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)), slice("bench", name, 8080, eps...))
	}
	before = w.build()
	var eps []ep
	for j := range 11 {
		eps = append(eps, ep{ip: fmt.Sprintf("198.18.127.%d", j+2), node: node})
	}
	w.add(slice("bench", "svc00000", 8080, eps...))
	return before, w.build()
}

// genEvalConfig is genConfig with the Config's other settings drawn too:
// the node (node-a or node-b), ServiceCIDRs (none; the cluster IPs only;
// also the load-balancer IPs), LocalhostNodePorts and the masquerade mark.
func genEvalConfig(t *rapid.T) (ruleset.Config, flat.Options, pools, evalAddrs) {
	cfg, opts, p := genConfig(t)
	a := evalAddrs4
	if cfg.Family == v1.IPv6Protocol {
		a = evalAddrs6
	}
	cfg.Node.Name = rapid.SampledFrom([]string{node, "node-b"}).Draw(t, "node")
	switch rapid.IntRange(0, 2).Draw(t, "serviceCIDRs") {
	case 1:
		cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(a.narrowCIDR)}
	case 2:
		cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(a.wideCIDR)}
	}
	cfg.LocalhostNodePorts = rapid.Bool().Draw(t, "localhostNodePorts")
	if rapid.IntRange(0, 3).Draw(t, "mark") == 0 {
		cfg.MasqueradeMark = 1 << 3
	}
	return cfg, opts, p, a
}

// genCluster draws a cluster: each Service of the universe is there or
// not, and has an EndpointSlice or not, whose ports have the Service ports'
// protocols (so that most Services have endpoints).
func genCluster(t *rapid.T, cfg ruleset.Config, p pools) *ruleset.Ruleset {
	w := newWorld(t, cfg)
	for _, ns := range namespaces {
		for _, name := range names {
			if !rapid.Bool().Draw(t, "present") {
				continue
			}
			s := genService(t, p, ns, name)
			w.add(s)
			if rapid.IntRange(0, 4).Draw(t, "noSlice") == 0 {
				continue
			}
			es := genSlice(t, p, ns, name)
			for i := range min(len(es.Ports), len(s.Spec.Ports)) {
				proto := s.Spec.Ports[i].Protocol
				es.Ports[i].Protocol = &proto
			}
			w.add(es)
		}
	}
	return w.build()
}

// genPacket draws the first packet of a flow: to a cluster IP (on a
// Service port or not), a node port on a node address or the loopback, an
// external or load-balancer IP, an unallocated address of the Service
// CIDRs, or an address that is none of them; from a pod (which may be the
// endpoint it reaches: hairpin), from the node, from a client outside, or
// from a load-balancer IP.
func genPacket(t *rapid.T, p pools, a evalAddrs) trace.Packet {
	pk := trace.Packet{Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")}
	var dst string
	port := rapid.SampledFrom([]uint16{80, 81, 82}).Draw(t, "port")
	switch rapid.IntRange(0, 5).Draw(t, "to") {
	case 0:
		dst = rapid.SampledFrom(p.clusterIPs).Draw(t, "clusterIP")
	case 1:
		dst = rapid.SampledFrom([]string{a.node, a.node2, a.loopback}).Draw(t, "nodeAddr")
		port = rapid.SampledFrom([]uint16{30001, 30002, 30003, 30004}).Draw(t, "nodePort")
		pk.ToNode = true
	case 2:
		dst = rapid.SampledFrom(p.externalIPs).Draw(t, "externalIP")
	case 3:
		dst = rapid.SampledFrom(p.lbIPs).Draw(t, "lbIP")
	case 4:
		dst = a.unallocated
	default:
		dst = a.other
	}
	var src string
	switch rapid.IntRange(0, 3).Draw(t, "from") {
	case 0:
		src = rapid.SampledFrom(p.podIPs).Draw(t, "pod")
	case 1:
		src, pk.FromNode = a.node, true
	case 2:
		src = rapid.SampledFrom([]string{a.clientIn, a.clientOut}).Draw(t, "client")
	default:
		src = rapid.SampledFrom(p.lbIPs).Draw(t, "lbSource")
		pk.FromNode = rapid.Bool().Draw(t, "lbSourceFromNode")
	}
	if dst == a.loopback {
		src, pk.FromNode = rapid.SampledFrom([]string{a.loopback, a.node}).Draw(t, "loopbackSource"), true
	}
	pk.Src = netip.AddrPortFrom(netip.MustParseAddr(src), 40000)
	pk.Dst = netip.AddrPortFrom(netip.MustParseAddr(dst), port)
	return pk
}

// outcomeOptions compare trace.Outcomes field by field.
var outcomeOptions = []cmp.Option{
	cmp.Comparer(func(a, b *big.Rat) bool { return a.Cmp(b) == 0 }),
	cmp.Comparer(func(a, b svcaffinity.Policy) bool { return a == b }),
	cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}),
	cmpopts.EquateEmpty(),
}

// divergenceAfter is divergence comparing what normalize keeps of the
// outcomes.
func divergenceAfter(rs *ruleset.Ruleset, text string, packets []trace.Packet, normalize func(trace.Outcome) trace.Outcome) (string, error) {
	table, err := nfttrace.Parse(text)
	if err != nil {
		return "", err
	}
	for _, p := range packets {
		got, path, err := table.Evaluate(p)
		if err != nil {
			return "", err
		}
		want := trace.Trace(rs, p, trace.NFTablesMode)
		if diff := outcomeDiff(normalize(want), normalize(got)); diff != "" {
			return fmt.Sprintf("%v (to the node: %v): rules differ from the tracer (-tracer +rules):\n%s\npath:\n%s", p, p.ToNode, diff, path), nil
		}
	}
	return "", nil
}

// evalCase is a drawn cluster on one node, its rendered table and packets.
type evalCase struct {
	rs      *ruleset.Ruleset
	text    string
	packets []trace.Packet
}

var pools4 = pools{
	clusterIPs:   []string{"198.19.0.1", "198.19.0.2", "198.19.0.3", "198.19.0.4"},
	externalIPs:  []string{"198.18.0.100", "198.18.0.101"},
	lbIPs:        []string{"198.19.128.1", "198.19.128.2"},
	podIPs:       []string{"198.18.64.2", "198.18.64.3", "198.18.65.2", "198.18.65.3"},
	sourceRanges: []string{"198.18.32.0/24", "198.18.0.0/24", "0.0.0.0/0"},
}

var pools6 = pools{
	clusterIPs:   []string{"2001:db8:19::1", "2001:db8:19::2", "2001:db8:19::3", "2001:db8:19::4"},
	externalIPs:  []string{"2001:db8:18::100", "2001:db8:18::101"},
	lbIPs:        []string{"2001:db8:19::8001", "2001:db8:19::8002"},
	podIPs:       []string{"2001:db8:18:40::2", "2001:db8:18:40::3", "2001:db8:18:41::2", "2001:db8:18:41::3"},
	sourceRanges: []string{"2001:db8:18:20::/64", "2001:db8:18::/64", "::/0"},
}

// genConfig draws a ruleset Config and Options.
func genConfig(t *rapid.T) (ruleset.Config, flat.Options, pools) {
	cfg, p := config4(), pools4
	if rapid.IntRange(0, 3).Draw(t, "ipv6") == 0 {
		cfg, p = config6(), pools6
	}
	cfg.MasqueradeAll = rapid.IntRange(0, 3).Draw(t, "masqueradeAll") == 0
	if rapid.IntRange(0, 3).Draw(t, "noClusterCIDRs") == 0 {
		cfg.ClusterCIDRs = nil
	}
	if rapid.Bool().Draw(t, "nodePortAddresses") {
		node := netip.MustParseAddr("198.18.0.1")
		if cfg.Family == v1.IPv6Protocol {
			node = netip.MustParseAddr("2001:db8:18::1")
		}
		cfg.NodePortAddresses = []netip.Addr{node}
	} else {
		cfg.NoNodePortAddresses = rapid.IntRange(0, 3).Draw(t, "noNodePortAddresses") == 0
	}
	return cfg, flat.Options{}, p
}

// mutate applies one to three random changes to w.
func mutate(t *rapid.T, w *world, p pools) {
	for _, c := range genChanges(p).Draw(t, "step") {
		c.apply(w)
	}
}

// evalAddrs are the addresses of the evaluation tests besides the pools: the
// node's own (the NodePortAddresses when they are set), another address of
// the node, a client outside the cluster inside one of the pools' source
// ranges and one outside all of them, an unallocated address inside the
// narrow ServiceCIDR, an address that is nothing, and the loopback.
type evalAddrs struct {
	node, node2, clientIn, clientOut, unallocated, other, loopback string
	narrowCIDR, wideCIDR                                           string
}

var (
	evalAddrs4 = evalAddrs{"198.18.0.1", "198.18.0.2", "198.18.32.7", "198.18.9.9", "198.19.0.9", "198.18.5.5", "127.0.0.1", "198.19.0.0/24", "198.19.0.0/16"}
	evalAddrs6 = evalAddrs{"2001:db8:18::1", "2001:db8:18::2", "2001:db8:18:20::7", "2001:db8:18:9::9", "2001:db8:19::9", "2001:db8:18:5::5", "::1", "2001:db8:19::/116", "2001:db8:19::/64"}
)

// outcomeDiff compares outcomes as far as the rules can tell them (see
// nfttrace.Comparable).
func outcomeDiff(want, got trace.Outcome) string {
	return cmp.Diff(nfttrace.Comparable(want), nfttrace.Comparable(got), outcomeOptions...)
}

// pools are the small sets of values random Services draw from, so that
// changes collide: shared cluster IPs, external IPs and node ports.
type pools struct {
	clusterIPs, externalIPs, lbIPs, podIPs []string
	sourceRanges                           []string
}

var (
	namespaces = []string{"a", "b"}
	names      = []string{"s1", "s2", "s3"}
)

func subset(t *rapid.T, label string, from []string) []string {
	var out []string
	for i, s := range from {
		if rapid.Bool().Draw(t, fmt.Sprintf("%s%d", label, i)) {
			out = append(out, s)
		}
	}
	return out
}

// genService draws a Service ns/name with one or two ports.
func genService(t *rapid.T, p pools, ns, name string) *v1.Service {
	clusterIP := rapid.SampledFrom(p.clusterIPs).Draw(t, "clusterIP")
	s := svc(ns, name, clusterIP)
	s.Spec.Type = rapid.SampledFrom([]v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer}).Draw(t, "type")
	nPorts := rapid.IntRange(1, 2).Draw(t, "ports")
	s.Spec.Ports = nil
	for i := range nPorts {
		port := v1.ServicePort{
			Name:     fmt.Sprintf("p%d", 80+i),
			Port:     int32(80 + i),
			Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto"),
		}
		if s.Spec.Type != v1.ServiceTypeClusterIP {
			port.NodePort = rapid.SampledFrom([]int32{0, 30001, 30002, 30003}).Draw(t, "nodePort")
		}
		s.Spec.Ports = append(s.Spec.Ports, port)
	}
	s.Spec.ExternalIPs = subset(t, "externalIP", p.externalIPs)
	if s.Spec.Type == v1.ServiceTypeLoadBalancer {
		for _, ip := range subset(t, "lbIP", p.lbIPs) {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
		s.Spec.LoadBalancerSourceRanges = subset(t, "sourceRange", p.sourceRanges)
	}
	if rapid.Bool().Draw(t, "eTPLocal") && (s.Spec.Type != v1.ServiceTypeClusterIP || len(s.Spec.ExternalIPs) > 0) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	if rapid.IntRange(0, 3).Draw(t, "iTPLocal") == 0 {
		internalLocal(s)
	}
	switch rapid.IntRange(0, 3).Draw(t, "affinity") {
	case 1:
		affinity(60)(s)
	case 2:
		affinity(120)(s)
	}
	return s
}

// genSlice draws the EndpointSlice of Service ns/name.
func genSlice(t *rapid.T, p pools, ns, name string) *discovery.EndpointSlice {
	var eps []discovery.Endpoint
	for i, ip := range p.podIPs {
		if !rapid.Bool().Draw(t, fmt.Sprintf("ep%d", i)) {
			continue
		}
		ready := rapid.IntRange(0, 4).Draw(t, "ready") > 0
		terminating := !ready && rapid.Bool().Draw(t, "terminating")
		serving := ready || rapid.Bool().Draw(t, "serving")
		nodeName := rapid.SampledFrom([]string{node, "node-b"}).Draw(t, "node")
		eps = append(eps, discovery.Endpoint{
			Addresses:  []string{ip},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &nodeName,
		})
	}
	addrType := discovery.AddressTypeIPv4
	if netip.MustParseAddr(p.podIPs[0]).Is6() {
		addrType = discovery.AddressTypeIPv6
	}
	var ports []discovery.EndpointPort
	for i := range 2 {
		name := fmt.Sprintf("p%d", 80+i)
		port := int32(rapid.SampledFrom([]int{8080, 8081}).Draw(t, "targetPort"))
		proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP}).Draw(t, "proto")
		ports = append(ports, discovery.EndpointPort{Name: &name, Port: &port, Protocol: &proto})
	}
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name + "-1",
			Labels: map[string]string{discovery.LabelServiceName: name},
		},
		AddressType: addrType,
		Endpoints:   eps,
		Ports:       ports,
	}
}

// change is one event a proxy may see: a Service or EndpointSlice added,
// updated or deleted.
type change struct {
	svc      *v1.Service
	slice    *discovery.EndpointSlice
	ns, name string // for deletes
	delSvc   bool
}

func (c change) apply(w *world) {
	switch {
	case c.svc != nil:
		w.add(c.svc)
	case c.slice != nil:
		w.add(c.slice)
	case c.delSvc:
		w.Svcs.Delete(c.ns, c.name)
	default:
		w.Eps.Delete(c.ns, c.name+"-1")
	}
}

// genChanges draws one to three changes to the Services of the universe.
func genChanges(p pools) *rapid.Generator[[]change] {
	return rapid.Custom(func(t *rapid.T) []change {
		var out []change
		for range rapid.IntRange(1, 3).Draw(t, "changes") {
			ns := rapid.SampledFrom(namespaces).Draw(t, "ns")
			name := rapid.SampledFrom(names).Draw(t, "name")
			c := change{ns: ns, name: name}
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				c.svc = genService(t, p, ns, name)
			case 2, 3:
				c.slice = genSlice(t, p, ns, name)
			case 4:
				c.delSvc = true
			}
			out = append(out, c)
		}
		return out
	})
}
