//go:build linux

package differential

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
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
	kind string
	// port is the name of the Service port.
	port   string
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
			out[p.Protocol] = append(out[p.Protocol], frontend{kind: kind, port: p.Name, dst: netip.AddrPortFrom(a, port), toNode: toNode})
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
			out[p.Protocol] = append(out[p.Protocol], frontend{kind: "node port on loopback", port: p.Name, dst: netip.AddrPortFrom(lo, uint16(p.NodePort)), toNode: true, nodeOnly: true})
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
		if es.Namespace != namespace || es.Labels[discovery.LabelServiceName] != svc || es.AddressType == discovery.AddressTypeFQDN {
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

// servicePort names a Service port: the Service, the port's name and
// protocol.
type servicePort struct {
	service, port string
	protocol      v1.Protocol
}

// addrProto is an endpoint address and a protocol.
type addrProto struct {
	addr     netip.Addr
	protocol v1.Protocol
}

// endpointCopy is what kube-proxy keeps of an endpoint of a slice
// (newBaseEndpointInfo): whether it is on this node, its conditions and
// its hints.
type endpointCopy struct {
	local, ready, serving, terminating bool
	zoneHints, nodeHints               string
}

func copyOf(ep *discovery.Endpoint) endpointCopy {
	c := endpointCopy{
		local:       ep.NodeName != nil && *ep.NodeName == nodeName,
		ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
		serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
		terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
	}
	if h := ep.Hints; h != nil {
		var zs, ns []string
		for _, z := range h.ForZones {
			zs = append(zs, z.Name)
		}
		for _, n := range h.ForNodes {
			ns = append(ns, n.Name)
		}
		slices.Sort(zs)
		slices.Sort(ns)
		c.zoneHints, c.nodeHints = strings.Join(slices.Compact(zs), ","), strings.Join(slices.Compact(ns), ",")
	}
	return c
}

// unorderedCopies finds, in one family, the endpoints whose copy
// kube-proxy keeps depends on the order it reads a Service's slices in
// (the order of a Go map): an address and port listed in several slices
// of a Service port where the copies it may keep differ. kube-proxy keeps
// the last copy that is not terminating, or the first when all are, so
// the copies it may keep are the last non-terminating copy of each slice
// that has one, or, when none has, the first copy of each slice. It
// returns the Service ports with such an endpoint, the address and
// protocol of each (the key of kube-proxy's nftables hairpin set, but for
// the port), and the Service ports with an endpoint listed more than once,
// whether kube-proxy's choice depends on the order or not.
func unorderedCopies(eps []*discovery.EndpointSlice, ipv6 bool) (ports map[servicePort]bool, hairpin map[addrProto]bool, listedTwice map[servicePort]bool) {
	type key struct {
		port servicePort
		ep   netip.AddrPort
	}
	type candidates struct {
		last, first map[string]endpointCopy
		copies      int
	}
	byKey := map[key]*candidates{}
	for _, es := range eps {
		want := discovery.AddressTypeIPv4
		if ipv6 {
			want = discovery.AddressTypeIPv6
		}
		if es.AddressType != want || es.Namespace != namespace || es.Labels[discovery.LabelServiceName] == "" {
			continue
		}
		for _, port := range es.Ports {
			if port.Name == nil || port.Port == nil || *port.Port == 0 {
				continue
			}
			sp := servicePort{service: es.Labels[discovery.LabelServiceName], port: *port.Name, protocol: v1.ProtocolTCP}
			if port.Protocol != nil {
				sp.protocol = *port.Protocol
			}
			for i := range es.Endpoints {
				ep := &es.Endpoints[i]
				a, err := netip.ParseAddr(ep.Addresses[0])
				if err != nil {
					continue
				}
				k := key{sp, netip.AddrPortFrom(a, uint16(*port.Port))}
				c := byKey[k]
				if c == nil {
					c = &candidates{last: map[string]endpointCopy{}, first: map[string]endpointCopy{}}
					byKey[k] = c
				}
				cp := copyOf(ep)
				c.copies++
				if _, ok := c.first[es.Name]; !ok {
					c.first[es.Name] = cp
				}
				if !cp.terminating {
					c.last[es.Name] = cp
				}
			}
		}
	}
	ports, hairpin, listedTwice = map[servicePort]bool{}, map[addrProto]bool{}, map[servicePort]bool{}
	for k, c := range byKey {
		listedTwice[k.port] = listedTwice[k.port] || c.copies > 1
		kept := c.last
		if len(kept) == 0 {
			kept = c.first
		}
		if vs := slices.Collect(maps.Values(kept)); slices.ContainsFunc(vs, func(v endpointCopy) bool { return v != vs[0] }) {
			ports[k.port] = true
			hairpin[addrProto{k.ep.Addr(), k.port.protocol}] = true
		}
	}
	return ports, hairpin, listedTwice
}

// probe is one packet of a state, to be evaluated under both proxies'
// rules.
type probe struct {
	service string
	front   frontend
	src     source
	packet  trace.Packet
	// shared: Service ports other than one another have a frontend at the
	// packet's destination (address, port and protocol).
	shared bool
	// unordered: an endpoint of a Service port at the packet's
	// destination is one whose copy kube-proxy keeps depends on the order
	// of its map of slices (unorderedCopies).
	unordered bool
	// unorderedHairpin: the source is, with the packet's protocol, such an
	// endpoint of some Service port: whether it is in kube-proxy's
	// nftables hairpin set depends on that order too.
	unorderedHairpin bool
	// listedTwice: a Service port at the packet's destination has an
	// endpoint listed more than once in its slices (kube-proxy's choice
	// of copy may or may not depend on its map order).
	listedTwice bool
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
	claims := map[claim][]servicePort{}
	for _, svc := range svcs {
		for proto, fs := range frontends(svc, ipv6) {
			for _, f := range fs {
				c := claim{proto, f.dst}
				if sp := (servicePort{svc.Name, f.port, proto}); !slices.Contains(claims[c], sp) {
					claims[c] = append(claims[c], sp)
				}
			}
		}
	}
	unorderedPorts, unorderedHairpin, listedTwice := unorderedCopies(eps, ipv6)
	for _, svc := range svcs {
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
						owners := claims[claim{pr, f.dst}]
						unordered, twice := false, false
						for _, sp := range owners {
							unordered, twice = unordered || unorderedPorts[sp], twice || listedTwice[sp]
						}
						out = append(out, probe{service: svc.Namespace + "/" + svc.Name, front: f, src: s, packet: p,
							shared: len(owners) > 1, unordered: unordered, listedTwice: twice,
							unorderedHairpin: s.name == "hairpin" && unorderedHairpin[addrProto{s.addr, pr}]})
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

// undefinedCase is a case where kube-proxy's outcome is undefined: it
// depends on the order in which kube-proxy iterates a Go map, so that it
// may differ from one run of kube-proxy to the next, where ours is fixed.
// A difference in such a probe is counted under the case's name, printed
// by the test; no other difference is tolerated.
type undefinedCase struct {
	name, reason string
	// covers reports whether p, whose outcomes are ref (kube-proxy's) and
	// ours, is a probe of this case in mode; refRules are the rules
	// kube-proxy's evaluator went through.
	covers func(mode string, p probe, ref, ours trace.Outcome, refRules string) bool
}

// undefinedCases are kube-proxy's undefined cases the generated states
// reach.
var undefinedCases = []undefinedCase{
	{
		name: "copies of one endpoint in two slices, kept by map order",
		reason: "of copies of one address and port in a Service port's slices, kube-proxy keeps the last it reads " +
			"that is not terminating (the first when all are), reading the slices in the order of a Go map; " +
			"where the copies it may keep differ (on this node or not, conditions, hints), its choice varies " +
			"between runs. Ours reads the slices in name order (package endpoints), which is one of kube-proxy's " +
			"orders. Covered: the probes of the Service ports with such an endpoint, and in nftables mode hairpin " +
			"from such an address with the port's protocol through any Service (its element in the hairpin set)",
		covers: func(mode string, p probe, _, _ trace.Outcome, _ string) bool {
			return p.unordered || p.unorderedHairpin && mode != "iptables"
		},
	},
	{
		name: "two Service ports with one frontend",
		reason: "when Service ports of two Services claim the same address, port and protocol (external or " +
			"load-balancer IPs), which one kube-proxy's rules serve depends on the order it iterates its map of " +
			"Service ports (iptables: the first rule written; nftables: the map element written last). Ours " +
			"is fixed (ruleset.Ruleset.Owner) and named in a warning. Covered: the probes to such a frontend " +
			"where the two proxies' rules name different Service ports (kube-proxy chose another), or kube-proxy's " +
			"rules name two (each map keeps the element of the Service port it wrote last: a packet may find " +
			"one Service port's element in one map and another's in the next)",
		covers: func(_ string, p probe, ref, ours trace.Outcome, refRules string) bool {
			return p.shared && (ref.Service != ours.Service || namesOtherPort(refRules, ref.Service))
		},
	},
}

// portComment is a Service port's name in a rule's comment, as both
// proxies write it: "namespace/name:port" (port empty for an unnamed one).
var portComment = regexp.MustCompile(`"([a-z0-9-]+)/([a-z0-9.-]+):([a-z0-9-]*)`)

// namesOtherPort reports whether the rules' comments name a Service port
// other than svc.
func namesOtherPort(rules string, svc servicemap.PortName) bool {
	for _, m := range portComment.FindAllStringSubmatch(rules, -1) {
		if m[1] != svc.Namespace || m[2] != svc.Name || m[3] != svc.Port {
			return true
		}
	}
	return false
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
	// undefined counts the differences in each of kube-proxy's undefined
	// cases (undefinedCases), by the case's name; inCase, the probes of
	// each case, whether their outcomes differ or not.
	undefined, inCase map[string]int
	// listedTwice counts the probes of Service ports with an endpoint
	// listed more than once, of which deterministic are those outside
	// every undefined case (they must agree).
	listedTwice, listedTwiceDeterministic int
}

// compare evaluates every probe under ref's and ours' rules of one family.
func compare(mode string, ref, ours evaluator, ps []probe) comparison {
	c := comparison{undefined: map[string]int{}, inCase: map[string]int{}, verdicts: map[string]int{}}
	for _, p := range ps {
		c.probes++
		ro, rpath, rerr := ref.evaluate(p.packet)
		oo, opath, oerr := ours.evaluate(p.packet)
		var refRules string
		if rpath != nil {
			refRules = rpath.String()
		}
		covered := slices.IndexFunc(undefinedCases, func(u undefinedCase) bool { return u.covers(mode, p, ro, oo, refRules) })
		if covered >= 0 {
			c.inCase[undefinedCases[covered].name]++
		}
		if p.listedTwice {
			c.listedTwice++
			if covered < 0 {
				c.listedTwiceDeterministic++
			}
		}
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
		if covered >= 0 && rerr == nil && oerr == nil {
			c.undefined[undefinedCases[covered].name]++
			continue
		}
		d := difference{probe: p, ref: ro, ours: oo, why: why}
		d.refPath = refRules
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
