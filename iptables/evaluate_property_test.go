package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// The evaluator of package trace/iptrace, run on what this package writes,
// must give what package trace specifies from the Ruleset: for rapid-made
// clusters (every Service type and policy, both families, the Configs of
// genConfig) on each of the three nodes, and rapid-made packets to every kind
// of address the Ruleset knows and to some it does not.

// evalCase is a Ruleset of one node and packets to evaluate under it.
type evalCase struct {
	rs      *ruleset.Ruleset
	names   Names
	packets []trace.Packet
}

// genEvalCase draws a cluster, a node of it, and 4 to 32 packets.
var genEvalCase = rapid.Custom(func(t *rapid.T) evalCase {
	cfg := genConfig(t)
	cfg.Node.Name = rapid.SampledFrom(genNodes).Draw(t, "node")
	w := genServedWorld(t, cfg.Family == v1.IPv6Protocol)
	c := evalCase{
		rs:    buildFrom(t, cfg, w.objects()),
		names: rapid.SampledFrom([]Names{{}, mustNames("CNI")}).Draw(t, "names"),
	}
	for i := range rapid.IntRange(4, 32).Draw(t, "packets") {
		c.packets = append(c.packets, genPacket(t, c.rs, fmt.Sprint("packet", i)))
	}
	return c
})

// genServedWorld draws one to four Services, most with endpoints of their
// first port's protocol (the first one, 3 times in 4, a load balancer with
// a source range and two ready endpoints), and then up to two of genWorld's
// random changes.
func genServedWorld(t *rapid.T, v6 bool) world {
	w := world{services: map[string]*v1.Service{}, slices: map[string]*discovery.EndpointSlice{}}
	for i := range rapid.IntRange(1, 4).Draw(t, "services") {
		ns, name := genNamespaces[i%len(genNamespaces)], genNames[i]
		s := genService(t, ns, name, v6)
		w.services[ns+"/"+name] = s
		if i == 0 && rapid.Float64Range(0, 1).Draw(t, "firewalled") < 0.75 {
			withSourceRange(s, v6)
			fw := slice(ns, name, name+"-fw", 8080, s.Spec.Ports[0].Protocol, readyEPs(2, v6)...)
			w.slices[ns+"/"+fw.Name] = fw
		}
		for j := range rapid.IntRange(0, 2).Draw(t, "slices") {
			sl := genSlice(t, ns, name, fmt.Sprintf("%s-%d", name, j+1), v6)
			if rapid.Float64Range(0, 1).Draw(t, "sameProtocol") < 0.8 {
				for k := range sl.Ports {
					sl.Ports[k].Protocol = ptr(s.Spec.Ports[0].Protocol)
				}
			}
			w.slices[ns+"/"+sl.Name] = sl
		}
	}
	for range rapid.IntRange(0, 2).Draw(t, "changes") {
		mutate(t, w, v6)
	}
	return w
}

// withSourceRange makes s a LoadBalancer Service with one load-balancer IP
// and one source range, which neither the pods nor most clients are in.
func withSourceRange(s *v1.Service, v6 bool) {
	s.Spec.Type = v1.ServiceTypeLoadBalancer
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = int32(30000 + i)
	}
	ip, sourceRange := "198.19.200.1", "198.18.32.0/19"
	if v6 {
		ip, sourceRange = "2001:db8:19:200::1", "2001:db8:18:20::/59"
	}
	s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
	s.Spec.LoadBalancerSourceRanges = []string{sourceRange}
}

// packetAddrs are the addresses packets are drawn from, by family: the
// node's own (NodePortAddresses draws from the first and the loopback), a
// second address of the node, pods on the node and elsewhere (the endpoint
// pool of genSlice among them), clients outside inside and outside the
// source ranges genService draws, and Service-range addresses no Service
// has.
type packetAddrs struct {
	node, node2, loopback netip.Addr
	pods, outside, spare  []netip.Addr
}

var addrsV4 = packetAddrs{
	node: mustAddr("198.18.0.1"), node2: mustAddr("198.18.0.2"), loopback: mustAddr("127.0.0.1"),
	pods:    []netip.Addr{mustAddr("198.18.64.2"), mustAddr("198.18.65.2"), mustAddr("198.18.70.2"), mustAddr("198.18.64.100"), mustAddr("198.18.100.9")},
	outside: []netip.Addr{mustAddr("198.18.32.5"), mustAddr("198.18.0.9"), mustAddr("198.18.200.7")},
	spare:   []netip.Addr{mustAddr("198.19.0.250"), mustAddr("198.19.100.9"), mustAddr("198.19.200.9")},
}

var addrsV6 = packetAddrs{
	node: mustAddr("2001:db8:18::1"), node2: mustAddr("2001:db8:18::2"), loopback: mustAddr("::1"),
	pods:    []netip.Addr{mustAddr("2001:db8:18:40::2"), mustAddr("2001:db8:18:41::2"), mustAddr("2001:db8:18:46::2"), mustAddr("2001:db8:18:40::100"), mustAddr("2001:db8:18:64::9")},
	outside: []netip.Addr{mustAddr("2001:db8:18:20::5"), mustAddr("2001:db8:18::9"), mustAddr("2001:db8:18:c8::7")},
	spare:   []netip.Addr{mustAddr("2001:db8:19:0::fa"), mustAddr("2001:db8:19:100::9"), mustAddr("2001:db8:19:200::9")},
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// genPacket draws a packet for rs: from a pod (half the time, for a Service
// frontend, one of the Service's endpoints: hairpin), from the node, or
// from outside; to a
// cluster, external or load-balancer IP of a Service with its port or
// another, to a node port on one of the node's addresses or the loopback,
// or to an address no Service has.
func genPacket(t *rapid.T, rs *ruleset.Ruleset, label string) trace.Packet {
	a := addrsV4
	if rs.Config().Family == v1.IPv6Protocol {
		a = addrsV6
	}
	p := trace.Packet{Protocol: rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}).Draw(t, label+"-proto")}
	dst, port, svc, toNode := genDestination(t, rs, a, label)
	if svc != nil && rapid.Float64Range(0, 1).Draw(t, label+"-sameproto") < 0.9 {
		p.Protocol = svc.Name.Protocol
	}
	var src netip.Addr
	switch rapid.SampledFrom([]string{"pod", "node", "outside"}).Draw(t, label+"-from") {
	case "pod":
		src = rapid.SampledFrom(a.pods).Draw(t, label+"-pod")
		if svc != nil && len(svc.Endpoints) > 0 && rapid.Bool().Draw(t, label+"-hairpin") {
			i := rapid.IntRange(0, len(svc.Endpoints)-1).Draw(t, label+"-endpoint")
			src = svc.Endpoints[i].AddrPort().Addr()
		}
	case "node":
		p.FromNode = true
		src = rapid.SampledFrom([]netip.Addr{a.node, a.node2, a.loopback}).Draw(t, label+"-nodeaddr")
	default:
		src = rapid.SampledFrom(a.outside).Draw(t, label+"-client")
	}
	p.Src, p.Dst, p.ToNode = netip.AddrPortFrom(src, 40000), netip.AddrPortFrom(dst, port), toNode
	return p
}

// genDestination draws a destination address and port, and whether the
// address is the node's (Packet.ToNode): most often a frontend of one of
// rs's Services (its cluster IP, an external or load-balancer IP with its
// port, or its node port or health-check node port on one of the node's
// addresses), else one of those addresses or the node's with another port,
// or an address no Service has. svc is the Service port drawn, if any.
func genDestination(t *rapid.T, rs *ruleset.Ruleset, a packetAddrs, label string) (dst netip.Addr, port uint16, svc *ruleset.Service, toNode bool) {
	ports := []uint16{80, 81, 8080, 30000, 30005, 30010, 32000}
	nodeAddrs := []netip.Addr{a.node, a.node2, a.loopback}
	svcs := rs.Services()
	kind := rapid.SampledFrom([]string{"frontend", "frontend", "frontend", "node", "spare"}).Draw(t, label+"-to")
	if len(svcs) == 0 || kind == "node" {
		return rapid.SampledFrom(nodeAddrs).Draw(t, label+"-nodeaddr"), rapid.SampledFrom(ports).Draw(t, label+"-port"), nil, true
	}
	if kind == "spare" {
		return rapid.SampledFrom(a.spare).Draw(t, label+"-spare"), rapid.SampledFrom(ports).Draw(t, label+"-port"), nil, false
	}
	s := rapid.SampledFrom(svcs).Draw(t, label+"-svc")
	port = s.Port
	if rapid.Float64Range(0, 1).Draw(t, label+"-otherport") < 0.1 {
		port = rapid.SampledFrom(ports).Draw(t, label+"-port")
	}
	external := slices.Concat(s.ExternalIPs, s.LoadBalancerIPs)
	var nodePorts []uint16
	for _, np := range []uint16{s.NodePort, uint16(s.HealthCheckNodePort)} {
		if np != 0 {
			nodePorts = append(nodePorts, np)
		}
	}
	switch which := rapid.IntRange(0, 3).Draw(t, label+"-frontend"); {
	case (which == 1 || which == 3) && len(external) > 0:
		// An external or load-balancer IP may be the node's.
		return rapid.SampledFrom(external).Draw(t, label+"-external"), port, s, rapid.Float64Range(0, 1).Draw(t, label+"-local") < 0.2
	case which == 2 && len(nodePorts) > 0:
		return rapid.SampledFrom(nodeAddrs).Draw(t, label+"-nodeaddr"), rapid.SampledFrom(nodePorts).Draw(t, label+"-nodeport"), s, true
	}
	return s.ClusterIP, port, s, false
}

// withJumps is text followed by the jumps from the built-in chains that
// the Executor ensures.
func withJumps(names Names, text []byte) []byte {
	return append(slices.Clip(text), RenderJumps(names)...)
}

// iptablesSpec is what the iptables backend must do with p: what
// trace.Trace says in kube-proxy's iptables mode; dropHook, when not "", is
// the hook on which the packet must be dropped. The localnet guard drops a
// flow the node sends on the output hook ("filter OUTPUT"), where a UDP
// sender's send fails at once with EPERM, rather than silently after the
// loopback, on input (TestKernelLocalnetGuardHook shows the difference).
func iptablesSpec(rs *ruleset.Ruleset, p trace.Packet) (want trace.Outcome, dropHook string) {
	want = trace.Trace(rs, p, trace.IPTablesMode)
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	if want.Verdict == ruleset.VerdictDrop && want.Service == (servicemap.PortName{}) && p.FromNode &&
		loopback.Contains(p.Dst.Addr()) && !loopback.Contains(p.Src.Addr()) {
		dropHook = "filter OUTPUT"
	}
	return want, dropHook
}

// disagreement evaluates c's packets under text and describes the first
// whose outcome Agree finds different from the specification; "" when
// every packet agrees.
// seen counts, when not nil, the results of the packets that agree, and
// the forwarded ones that have a hairpin target, are masqueraded,
// short-circuited or pinned by affinity (see features).
func disagreement(c evalCase, text []byte, seen map[string]int) string {
	rules, err := iptrace.Parse(text)
	if err != nil {
		return fmt.Sprintf("the evaluator rejects the rules: %v", err)
	}
	for _, p := range c.packets {
		want, dropHook := iptablesSpec(c.rs, p)
		got, path, err := rules.Evaluate(p)
		if err == nil {
			err = iptrace.Agree(want, got)
		}
		if err == nil && dropHook != "" && (len(path) == 0 || path[len(path)-1].Hook != dropHook) {
			err = fmt.Errorf("not dropped on %s", dropHook)
		}
		if err != nil {
			return fmt.Sprintf("node %s, %v (to the node: %v): %v\nwant %+v\ngot  %+v\npath:\n%s", c.rs.Config().Node.Name, p, p.ToNode, err, want, got, path)
		}
		if seen != nil {
			seen[got.Verdict.String()]++
			for _, f := range features(p, got) {
				seen[f]++
			}
		}
	}
	return ""
}

// TestPropEvaluateRender: the rendered rules, with the Executor's jumps,
// send every packet where the tracer says; and the packets drawn reach
// every kind of result.
func TestPropEvaluateRender(t *testing.T) {
	seen := map[string]int{}
	rapid.Check(t, func(t *rapid.T) {
		c := genEvalCase.Draw(t, "case")
		text := withJumps(c.names, Render(c.names, c.rs))
		if d := disagreement(c, text, seen); d != "" {
			t.Fatalf("%s\nrules:\n%s", d, text)
		}
	})
	wantEveryResult(t, seen)
}

// features names what a forwarded Outcome of p shows beyond its result.
func features(p trace.Packet, o trace.Outcome) []string {
	var fs []string
	if slices.ContainsFunc(o.Targets, func(c ruleset.Choice) bool { return c.Endpoint.Addr() == p.Src.Addr() }) {
		fs = append(fs, "hairpin")
	}
	if o.Masquerade {
		fs = append(fs, "masquerade")
	}
	if o.ShortCircuit {
		fs = append(fs, "short-circuit")
	}
	if o.Affinity.Enabled() {
		fs = append(fs, "affinity")
	}
	return fs
}

// wantEveryResult fails t unless seen counts every Result and every
// feature.
func wantEveryResult(t *testing.T, seen map[string]int) {
	t.Helper()
	t.Logf("seen: %v", seen)
	for _, r := range []ruleset.Verdict{ruleset.VerdictNotServed, ruleset.VerdictReject, ruleset.VerdictDrop, ruleset.VerdictFirewall, ruleset.VerdictForward} {
		if seen[r.String()] == 0 {
			t.Errorf("no packet was %s: the generators miss a case", r)
		}
	}
	for _, f := range []string{"hairpin", "masquerade", "short-circuit", "affinity"} {
		if seen[f] == 0 {
			t.Errorf("no forwarded packet showed %s: the generators miss a case", f)
		}
	}
}
