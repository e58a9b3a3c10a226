package nfttrace

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// evalRule evaluates r for b: its matches in order, its statements as they
// come. It returns the verdict, and whether every match matched (a verdict
// map without the key does not); draw reports that it stopped at the
// rule's numgen, which b has not drawn yet.
func (ev *evaluation) evalRule(b *branch, r *rule) (v verdict, matched, draw bool, err error) {
	step := Step{Hook: stageHooks[b.stage], Chain: b.stack[len(b.stack)-1].c.name, Rule: r.text, Line: r.line}
	if r.comment != "" {
		step.Rule += fmt.Sprintf(" comment %q", r.comment)
	}
	v = r.verdict
	b.ruleMark = b.stack[len(b.stack)-1].mark
	for i := range r.exprs {
		e := &r.exprs[i]
		if b.fork != r && e.drawsNumgen() {
			return verdict{}, false, true, nil
		}
		matched, taken, err := ev.evalExpr(b, e, &step)
		if err != nil {
			return verdict{}, false, false, err
		}
		if !matched {
			return verdict{}, false, false, nil
		}
		if taken != nil {
			v = *taken
			break
		}
	}
	b.path = append(b.path, step)
	if strings.HasPrefix(r.comment, "short-circuit") && (v.kind == verdictGoto || v.kind == verdictJump) {
		b.shortCircuit = true
	}
	return v, true, false, nil
}

// drawsNumgen reports whether e reads a numgen.
func (e *expr) drawsNumgen() bool {
	for _, s := range e.sels {
		if s.kind == selNumgen {
			return true
		}
	}
	return false
}

// evalExpr evaluates one expression: whether it matched, and the verdict
// it takes (a verdict map's, or accept for dnat and masquerade).
func (ev *evaluation) evalExpr(b *branch, e *expr, step *Step) (bool, *verdict, error) {
	switch e.kind {
	case exprMatch:
		key, ok := ev.key(b, e.sels)
		if !ok {
			return false, nil, nil
		}
		el := e.set.find(key)
		if el != nil && e.set.name != "" {
			step.Element = e.set.name + " " + el.text
			if !e.neg {
				ev.noteSetElement(b, e, el)
			}
		}
		return (el != nil) != e.neg, nil, nil
	case exprVmap:
		return ev.vmap(b, e, step)
	case exprFib:
		local := ev.p.FromNode
		if !e.saddr {
			local = !b.pkt.dnatted && ev.p.ToNode || b.pkt.daddr.IsLoopback()
		}
		return local != e.neg, nil, nil
	case exprCtNew:
		return e.isNew != e.neg, nil, nil
	case exprCtDNAT:
		return b.pkt.ctDNAT != e.neg, nil, nil
	case exprMarkSet:
		b.pkt.mark = markOp(e.markOp, b.pkt.mark, e.markVal)
		b.ruleMark = markOp(e.markOp, b.ruleMark, e.markVal)
	case exprUpdate:
		if timeout := cmp.Or(e.timeout, e.set.timeout); timeout > 0 {
			b.affinity = int32(timeout.Seconds())
		}
	case exprDnat:
		return ev.dnatTo(b, e.dnat)
	case exprDnatMap:
		return ev.dnatMap(b, e, step)
	case exprMasq:
		if b.chains[b.ci-1].base.typ != "nat" || b.stage != stagePostrouting {
			return false, nil, fmt.Errorf("masquerade outside a nat chain of the postrouting hook")
		}
		b.masquerade = true
		return true, &verdict{kind: verdictAccept}, nil
	}
	return true, nil, nil
}

// dnatTo translates b's destination to dst (port 0: keep the port) and
// accepts.
func (ev *evaluation) dnatTo(b *branch, dst netip.AddrPort) (bool, *verdict, error) {
	if b.chains[b.ci-1].base.typ != "nat" || (b.stage != stagePrerouting && b.stage != stageOutput) {
		return false, nil, fmt.Errorf("dnat outside a nat chain of the prerouting or output hook")
	}
	b.pkt.daddr, b.pkt.dnatted, b.pkt.ctDNAT = dst.Addr(), true, true
	if dst.Port() != 0 {
		b.pkt.dport = dst.Port()
	}
	b.dnatMark = b.ruleMark
	return true, &verdict{kind: verdictAccept}, nil
}

func markOp(op string, mark, val uint64) uint64 {
	switch op {
	case "or":
		return (mark | val) & 0xffffffff
	case "xor":
		return (mark ^ val) & 0xffffffff
	case "and":
		return mark & val
	}
	return val
}

// vmap looks the key up in a verdict map; the element found gives the
// verdict and tells the Service port (its comment) and the kind of
// frontend (the map).
func (ev *evaluation) vmap(b *branch, e *expr, step *Step) (bool, *verdict, error) {
	key, ok := ev.key(b, e.sels)
	if !ok {
		return false, nil, nil
	}
	el := e.set.find(key)
	if el == nil {
		return false, nil, nil
	}
	if e.set.name == "" {
		step.Element = el.text
		if b.fork != nil && e.sels[0].kind == selNumgen {
			step.Share = big.NewRat(1, int64(e.sels[0].mod))
		}
	} else {
		step.Element = e.set.name + " " + el.text
		ev.noteFrontend(b, e, el)
	}
	if el.comment != "" && b.service.Name == "" {
		if pn, ok := serviceOfComment(el.comment, b.pkt.proto); ok {
			b.service = pn
		}
	}
	v := el.value
	return true, &v, nil
}

// noteFrontend sets the kind of frontend from the first named verdict map
// the packet is found in, el its element: by protocol and port alone, a
// node port; by address, a load-balancer IP when the map is firewall-ips, a
// cluster IP when the element sends it to a service- or local- chain (the
// Internal route) or, for an element of another verdict, when the address
// is in the set cluster-ips; else an external IP.
func (ev *evaluation) noteFrontend(b *branch, e *expr, el *element) {
	if b.kind != 0 || b.pkt.dnatted {
		return
	}
	internal := strings.HasPrefix(el.value.chain, "service-") || strings.HasPrefix(el.value.chain, "local-")
	clusterIPs := ev.t.sets[setClusterIPs]
	switch {
	case e.sels[0].kind != selDaddr:
		b.kind = ruleset.KindNodePort
	case e.set.name == mapFirewallIPs:
		b.kind = ruleset.KindLoadBalancerIP
	case internal:
		b.kind = ruleset.KindClusterIP
	case strings.HasPrefix(el.value.chain, "external-"):
		b.kind = ruleset.KindExternalIP
	case clusterIPs != nil && clusterIPs.find([]datum{{addr: b.pkt.daddr}}) != nil:
		b.kind = ruleset.KindClusterIP
	default:
		b.kind = ruleset.KindExternalIP
	}
}

// key reads the selectors' values from the packet; ok is false when the
// packet has no such value (a TCP port of a UDP packet).
func (ev *evaluation) key(b *branch, sels []selector) ([]datum, bool) {
	key := make([]datum, len(sels))
	for i, s := range sels {
		switch s.kind {
		case selSaddr:
			key[i] = datum{addr: b.pkt.saddr}
		case selDaddr:
			key[i] = datum{addr: b.pkt.daddr}
		case selL4proto:
			key[i] = datum{num: b.pkt.proto}
		case selDport, selSport:
			if s.proto != 0 && s.proto != b.pkt.proto {
				return nil, false
			}
			key[i] = datum{num: uint64(b.pkt.dport)}
			if s.kind == selSport {
				key[i] = datum{num: uint64(b.pkt.sport)}
			}
		case selMark:
			key[i] = datum{num: b.pkt.mark}
			if s.mask != 0 {
				key[i] = datum{num: b.pkt.mark & s.mask}
			}
		case selNumgen:
			key[i] = datum{num: b.forkVal}
		case selOrigDaddr:
			key[i] = datum{addr: b.pkt.origDaddr}
		case selOrigDport:
			key[i] = datum{num: uint64(b.pkt.origDport)}
		case selJHash:
			inner, ok := ev.key(b, s.inner)
			if !ok {
				return nil, false
			}
			key[i] = datum{num: jhashValue(s, inner)}
		}
	}
	return key, true
}

// kube-proxy's names that the Outcome is read from.
const (
	setClusterIPs  = "cluster-ips"
	mapFirewallIPs = "firewall-ips"
	prefixFirewall = "firewall-"
)

// serviceOfChain reads the Service port out of the name of a per-service
// or per-endpoint chain, "PREFIX-HASH-namespace/name/protocol/port[__…]"
// (PREFIX service, local, external, firewall or endpoint; HASH eight
// characters).
func serviceOfChain(name string) (servicemap.PortName, bool) {
	var rest string
	found := false
	for _, p := range []string{"service-", "local-", "external-", prefixFirewall, "endpoint-"} {
		if r, ok := strings.CutPrefix(name, p); ok {
			rest, found = r, true
			break
		}
	}
	if !found || strings.HasSuffix(name, "...") || len(rest) < 9 || rest[8] != '-' {
		return servicemap.PortName{}, false
	}
	rest, _, _ = strings.Cut(rest[9:], "__")
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return servicemap.PortName{}, false
	}
	proto, ok := map[string]v1.Protocol{"tcp": v1.ProtocolTCP, "udp": v1.ProtocolUDP, "sctp": v1.ProtocolSCTP}[parts[2]]
	if !ok || parts[0] == "" || parts[1] == "" {
		return servicemap.PortName{}, false
	}
	return servicemap.PortName{Namespace: parts[0], Name: parts[1], Port: parts[3], Protocol: proto}, true
}

// serviceOfComment reads the Service port out of an element's comment,
// "namespace/name[:port[/PROTOCOL]]", with the packet's protocol when the
// comment names none.
func serviceOfComment(comment string, proto uint64) (servicemap.PortName, bool) {
	ns, rest, ok := strings.Cut(comment, "/")
	if !ok || ns == "" || rest == "" {
		return servicemap.PortName{}, false
	}
	name, port, _ := strings.Cut(rest, ":")
	if port, named, ok := strings.Cut(port, "/"); ok {
		p := v1.Protocol(named)
		if _, known := protoNumbers[p]; !known || name == "" || strings.Contains(name, "/") {
			return servicemap.PortName{}, false
		}
		return servicemap.PortName{Namespace: ns, Name: name, Port: port, Protocol: p}, true
	}
	for p, n := range protoNumbers {
		if n == proto {
			return servicemap.PortName{Namespace: ns, Name: name, Port: port, Protocol: p}, true
		}
	}
	return servicemap.PortName{}, false
}

// packetState is the packet as the first rule sees it.
func packetState(src, dst netip.AddrPort, proto uint64) pktState {
	daddr := dst.Addr().WithZone("")
	return pktState{saddr: src.Addr().WithZone(""), daddr: daddr, sport: src.Port(), dport: dst.Port(), proto: proto, origDaddr: daddr, origDport: dst.Port()}
}
