//go:build linux

package differential

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// evaluator answers where a packet goes under one family's rules, with
// the rules that decided.
type evaluator interface {
	evaluate(p trace.Packet) (trace.Outcome, fmt.Stringer, error)
}

type ipEvaluator struct{ r *iptrace.Rules }

func (e ipEvaluator) evaluate(p trace.Packet) (trace.Outcome, fmt.Stringer, error) {
	return e.r.Evaluate(p)
}

type nftEvaluator struct{ t *nfttrace.Table }

func (e nftEvaluator) evaluate(p trace.Packet) (trace.Outcome, fmt.Stringer, error) {
	return e.t.Evaluate(p)
}

// parse reads one family's dump of a backend.
func parse(backend, text string) (evaluator, error) {
	if backend == "iptables" {
		r, err := iptrace.Parse([]byte(text))
		return ipEvaluator{r}, err
	}
	t, err := nfttrace.Parse(text)
	return nftEvaluator{t}, err
}

// source is where a probe comes from.
type source struct {
	name     string
	addr     netip.Addr
	fromNode bool
}

// The pods (see kernelPods) that are the local and the remote pod sources.
const (
	localPodSource  = 12
	remotePodSource = 13
)

// sources are the kinds of client of a Service in one family: a pod on the
// node, a pod elsewhere, the node itself, two outside clients (the first
// inside the load-balancer source ranges the generator draws from, the
// second outside them), and, for hairpin, the Service's endpoints.
func sources(ipv6 bool, endpoints []netip.Addr) []source {
	pick := func(a4, a6 string) netip.Addr {
		if ipv6 {
			return netip.MustParseAddr(a6)
		}
		return netip.MustParseAddr(a4)
	}
	node := nodeAddr4
	if ipv6 {
		node = nodeAddr6
	}
	ss := []source{
		{name: "local pod", addr: podAddr(localPodSource, ipv6)},
		{name: "remote pod", addr: podAddr(remotePodSource, ipv6)},
		{name: "node", addr: node, fromNode: true},
		{name: "node (loopback)", addr: pick("127.0.0.1", "::1"), fromNode: true},
		{name: "outside (in ranges)", addr: pick("198.18.32.2", "2001:db8:18:20::2")},
		{name: "outside", addr: pick("198.18.33.2", "2001:db8:18:21::2")},
	}
	for _, ep := range endpoints {
		ss = append(ss, source{name: "hairpin", addr: ep})
	}
	return ss
}

// frontend is an address and port a Service port is reached at.
type frontend struct {
	kind   string
	dst    netip.AddrPort
	toNode bool
	// nodeOnly: only the node itself sends to it, from the loopback
	// address (the frontend is a node port on the loopback).
	nodeOnly bool
}

// frontends lists the frontends of every port of svc (as the API server
// stored it) in one family, with the port's protocol.
func frontends(svc *v1.Service, ipv6 bool) map[v1.Protocol][]frontend {
	out := map[v1.Protocol][]frontend{}
	inFamily := func(s string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(s)
		return a, err == nil && a.Is6() == ipv6
	}
	for _, p := range svc.Spec.Ports {
		port := uint16(p.Port)
		add := func(kind string, a netip.Addr, port uint16, toNode bool) {
			out[p.Protocol] = append(out[p.Protocol], frontend{kind: kind, dst: netip.AddrPortFrom(a, port), toNode: toNode})
		}
		for _, ip := range svc.Spec.ClusterIPs {
			if a, ok := inFamily(ip); ok {
				add("cluster IP", a, port, false)
			}
		}
		if p.NodePort != 0 {
			node := nodeAddr4
			if ipv6 {
				node = nodeAddr6
			}
			add("node port", node, uint16(p.NodePort), true)
			other := otherAddr4
			if ipv6 {
				other = otherAddr6
			}
			add("node port on another local address", other, uint16(p.NodePort), true)
			lo := netip.MustParseAddr("127.0.0.1")
			if ipv6 {
				lo = netip.IPv6Loopback()
			}
			out[p.Protocol] = append(out[p.Protocol], frontend{kind: "node port on loopback", dst: netip.AddrPortFrom(lo, uint16(p.NodePort)), toNode: true, nodeOnly: true})
		}
		for _, ip := range svc.Spec.ExternalIPs {
			if a, ok := inFamily(ip); ok {
				add("external IP", a, port, false)
			}
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if a, ok := inFamily(ing.IP); ok {
				add("load-balancer IP", a, port, false)
			}
		}
	}
	return out
}

// endpointAddrs are the addresses of a Service's endpoints in one family,
// at most three.
func endpointAddrs(slices_ []*discovery.EndpointSlice, svc string, ipv6 bool) []netip.Addr {
	var out []netip.Addr
	for _, es := range slices_ {
		if es.Labels[discovery.LabelServiceName] != svc {
			continue
		}
		for _, ep := range es.Endpoints {
			for _, s := range ep.Addresses {
				if a, err := netip.ParseAddr(s); err == nil && a.Is6() == ipv6 && !slices.Contains(out, a) && len(out) < 3 {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// endpointNodes reports which endpoint addresses of a Service in one
// family are on this node, and which are listed more than once.
func endpointNodes(slices_ []*discovery.EndpointSlice, svc string, ipv6 bool) (local, duplicated map[netip.Addr]bool) {
	local, duplicated = map[netip.Addr]bool{}, map[netip.Addr]bool{}
	seen := map[netip.Addr]bool{}
	for _, es := range slices_ {
		if es.Labels[discovery.LabelServiceName] != svc || (es.AddressType == discovery.AddressTypeIPv6) != ipv6 {
			continue
		}
		for _, ep := range es.Endpoints {
			a, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil {
				continue
			}
			duplicated[a] = duplicated[a] || seen[a]
			seen[a] = true
			local[a] = local[a] || ep.NodeName != nil && *ep.NodeName == nodeName
		}
	}
	return local, duplicated
}

// probe is one packet of a state, to be evaluated under both proxies'
// rules.
type probe struct {
	service string
	front   frontend
	src     source
	packet  trace.Packet
	// srcLocal: the source is an endpoint on this node (hairpin).
	srcLocal bool
	// shared: another Service port of the state has the same frontend
	// (address, port and protocol).
	shared bool
	// duplicated: an endpoint address of the Service is listed more than
	// once in its EndpointSlices of the family, or the source is a hairpin
	// endpoint that some Service's slices list more than once (whether it
	// is on this node, which decides its hairpin masquerade, then depends
	// on which copy counts).
	duplicated bool
	// localElsewhere: the source is a hairpin endpoint that this Service's
	// slices place on another node (or none) and another Service's slices
	// place on this node.
	localElsewhere bool
}

func (p probe) String() string {
	return fmt.Sprintf("%s %s (%s) from %s: %v", p.service, p.front.kind, p.packet.Protocol, p.src.name, p.packet)
}

// probes lists the packets of a state in one family: every frontend of
// every Service × every source × the port's protocol and one other.
func probes(svcs []*v1.Service, eps []*discovery.EndpointSlice, ipv6 bool) []probe {
	var out []probe
	other := map[v1.Protocol]v1.Protocol{v1.ProtocolTCP: v1.ProtocolUDP, v1.ProtocolUDP: v1.ProtocolTCP, v1.ProtocolSCTP: v1.ProtocolTCP}
	type claim struct {
		proto v1.Protocol
		dst   netip.AddrPort
	}
	claims := map[claim]int{}
	anyLocal, anyDuplicated := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, svc := range svcs {
		local, dup := endpointNodes(eps, svc.Name, ipv6)
		for a, l := range local {
			anyLocal[a] = anyLocal[a] || l
		}
		for a, d := range dup {
			anyDuplicated[a] = anyDuplicated[a] || d
		}
		for proto, fs := range frontends(svc, ipv6) {
			for _, f := range fs {
				claims[claim{proto, f.dst}]++
			}
		}
	}
	for _, svc := range svcs {
		local, dup := endpointNodes(eps, svc.Name, ipv6)
		duplicated := slices.Contains(slices.Collect(maps.Values(dup)), true)
		srcs := sources(ipv6, endpointAddrs(eps, svc.Name, ipv6))
		for proto, fs := range frontends(svc, ipv6) {
			for _, f := range fs {
				for _, s := range srcs {
					// The node reaches its loopback from its loopback, and
					// nothing else from there.
					if f.nodeOnly != (s.name == "node (loopback)") {
						continue
					}
					for _, pr := range []v1.Protocol{proto, other[proto]} {
						p := trace.Packet{Protocol: pr, Src: netip.AddrPortFrom(s.addr, 40000), Dst: f.dst, FromNode: s.fromNode, ToNode: f.toNode}
						out = append(out, probe{service: svc.Namespace + "/" + svc.Name, front: f, src: s, packet: p,
							srcLocal: s.name == "hairpin" && local[s.addr], shared: claims[claim{pr, f.dst}] > 1,
							duplicated:     duplicated || s.name == "hairpin" && anyDuplicated[s.addr],
							localElsewhere: s.name == "hairpin" && !local[s.addr] && anyLocal[s.addr]})
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b probe) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// comparable is what the two proxies' outcomes must agree on: the
// verdict, the targets with their shares and masquerade, masquerade and
// affinity. The Service port and frontend kind are read from rule
// comments, and are not behaviour.
func comparable(o trace.Outcome) trace.Outcome {
	o.Service, o.Kind, o.ShortCircuit = servicemap.PortName{}, 0, false
	return o
}

// exclusion is a known difference between kube-proxy and ours that the
// suite tolerates: named, with its reason, and printed with how many
// probes it covered.
type exclusion struct {
	name, reason string
	// covers reports whether the difference between ref (kube-proxy's
	// outcome) and ours for p is this one.
	covers func(mode string, p probe, ref, ours trace.Outcome) bool
}

// exclusions are the known differences; each is printed by the test with
// the number of probes it covered.
var exclusions = []exclusion{
	{
		name: "one address listed twice in a Service's EndpointSlices",
		reason: "kube-proxy keeps the copy it reads last unless that one is terminating (its result depends on the order " +
			"of slices and endpoints, and is undefined for two non-terminating copies); we keep the best copy " +
			"(non-terminating, ready, serving, with a node name), whatever the order; so the two may disagree on whether " +
			"such an address is on this node, which decides its hairpin masquerade through every Service",
		covers: func(_ string, p probe, _, _ trace.Outcome) bool { return p.duplicated },
	},
	{
		name: "hairpin of an address two Services place on different nodes (flat layout)",
		reason: "the flat layout's hairpin set is keyed by address (endpoint . endpoint): an address that one " +
			"Service's slices place on this node is masqueraded when it reaches itself through any Service; " +
			"kube-proxy keys the set by address, protocol and port, so not through a Service whose slices " +
			"place it elsewhere. Only slices that disagree on where one address runs show it",
		covers: func(mode string, p probe, ref, ours trace.Outcome) bool {
			if mode != "nftables (flat layout)" || !p.localElsewhere {
				return false
			}
			ours.Targets = slices.Clone(ours.Targets)
			for i, c := range ours.Targets {
				if c.Endpoint.Addr() == p.src.addr && c.Masquerade && !ours.Masquerade {
					ours.Targets[i].Masquerade = false
				}
			}
			return iptrace.Agree(comparable(ref), comparable(ours)) == nil
		},
	},
	{
		name: "two Service ports with one frontend",
		reason: "when two Service ports claim the same address, port and protocol, which one kube-proxy's rules " +
			"serve depends on the order it iterates its map of Services; ours is fixed",
		covers: func(_ string, p probe, _, _ trace.Outcome) bool { return p.shared },
	},
}

// difference is a probe whose outcomes differ.
type difference struct {
	probe          probe
	ref, ours      trace.Outcome
	refPath, opath string
	why            string
}

// comparison is the result of comparing one state under one pair of
// proxies.
type comparison struct {
	probes int
	// verdicts counts kube-proxy's outcomes by verdict: how much of each
	// kind of behaviour the probes covered.
	verdicts    map[string]int
	differences []difference
	excluded    map[string]int
}

// compare evaluates every probe under ref's and ours' rules of one family.
func compare(mode string, ref, ours evaluator, ps []probe) comparison {
	c := comparison{excluded: map[string]int{}, verdicts: map[string]int{}}
	for _, p := range ps {
		c.probes++
		ro, rpath, rerr := ref.evaluate(p.packet)
		oo, opath, oerr := ours.evaluate(p.packet)
		v := ro.Verdict.String()
		if ro.Masquerade {
			v += " masqueraded"
		}
		if ro.Affinity != (trace.Outcome{}).Affinity {
			v += " with affinity"
		}
		c.verdicts[v]++
		var why string
		switch {
		case rerr != nil || oerr != nil:
			why = fmt.Sprintf("evaluation errors: kube-proxy %v, ours %v", rerr, oerr)
		default:
			if err := iptrace.Agree(comparable(ro), comparable(oo)); err != nil {
				why = err.Error()
			}
		}
		if why == "" {
			continue
		}
		if i := slices.IndexFunc(exclusions, func(e exclusion) bool { return rerr == nil && oerr == nil && e.covers(mode, p, ro, oo) }); i >= 0 {
			c.excluded[exclusions[i].name]++
			continue
		}
		d := difference{probe: p, ref: ro, ours: oo, why: why}
		if rpath != nil {
			d.refPath = rpath.String()
		}
		if opath != nil {
			d.opath = opath.String()
		}
		c.differences = append(c.differences, d)
	}
	return c
}

func (d difference) String() string {
	return fmt.Sprintf("%v:\n    ours %s\n    kube-proxy: %s\n      rules: %s\n    svcproxy:   %s\n      rules: %s",
		d.probe, d.why, outcomeString(d.ref), d.refPath, outcomeString(d.ours), d.opath)
}

func outcomeString(o trace.Outcome) string {
	s := o.Verdict.String()
	if o.Service != (servicemap.PortName{}) {
		s += fmt.Sprintf(" by %v", o.Service)
	}
	if len(o.Targets) > 0 {
		var ts []string
		for _, c := range o.Targets {
			t := fmt.Sprintf("%v %s", c.Endpoint, c.Share.FloatString(4))
			if c.Masquerade {
				t += " masq"
			}
			ts = append(ts, t)
		}
		s += " to [" + strings.Join(ts, ", ") + "]"
	}
	if o.Masquerade {
		s += " masqueraded"
	}
	if o.Affinity != (trace.Outcome{}).Affinity {
		s += fmt.Sprintf(" affinity %v", o.Affinity)
	}
	return s
}
