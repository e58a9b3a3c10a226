package nfttrace

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/ruleset"
)

// Names of the flat layout (the nftables package's other layout) that the
// Outcome is read from.
const (
	setFlatFirewall            = "firewall"
	prefixShortCircuit         = "shortcircuit-"
	prefixNodePortShortCircuit = "nodeport-shortcircuit-"
	// A DNAT in these chains (an affinity map's, whose name tells no
	// group) short-circuits too.
	chainShortCircuit         = "shortcircuit"
	chainNodePortShortCircuit = "nodeport-shortcircuit"
)

// dnatMap translates b's destination to the address and port that e's data
// map gives for the key. A key the map does not hold ends the rule, as in
// the kernel. The element tells the Service port (its comment), the kind
// of frontend (see noteSetElement), its share (a numgen in the key), and a
// short-circuit (a map of the flat layout's short-circuit groups).
func (ev *evaluation) dnatMap(b *branch, e *expr, step *Step) (bool, *verdict, error) {
	key, ok := ev.key(b, e.sels)
	if !ok {
		return false, nil, nil
	}
	el := e.set.find(key)
	if el == nil {
		return false, nil, nil
	}
	dst, ok, err := ev.dnatTarget(b, e, el)
	if !ok || err != nil {
		return false, nil, err
	}
	step.Element = e.set.name + " " + el.text
	for _, s := range e.sels {
		if s.kind == selNumgen && b.fork != nil {
			step.Share = big.NewRat(1, int64(s.mod))
		}
	}
	ev.noteSetElement(b, e, el)
	chain := b.stack[len(b.stack)-1].c.name
	if strings.HasPrefix(e.set.name, prefixShortCircuit) || strings.HasPrefix(e.set.name, prefixNodePortShortCircuit) ||
		chain == chainShortCircuit || chain == chainNodePortShortCircuit {
		b.shortCircuit = true
	}
	return ev.dnatTo(b, dst)
}

// dnatTarget is where el, found in e's map, sends the packet: its address
// and port, or (a dnat to two maps) its address and the port that e's port
// map gives; false when the port map does not hold the packet's key.
func (ev *evaluation) dnatTarget(b *branch, e *expr, el *element) (netip.AddrPort, bool, error) {
	if e.portSet == nil {
		if len(el.data) != 2 {
			// The map was declared again with another type after el was added.
			return netip.AddrPort{}, false, fmt.Errorf("%s: element %q has no address and port", e.set.name, el.text)
		}
		return dnatTo(el), true, nil
	}
	key, ok := ev.key(b, e.portSels)
	if !ok {
		return netip.AddrPort{}, false, nil
	}
	port := e.portSet.find(key)
	if port == nil {
		return netip.AddrPort{}, false, nil
	}
	if len(el.data) != 1 || len(port.data) != 1 {
		return netip.AddrPort{}, false, fmt.Errorf("%s, %s: elements %q and %q are no address and port", e.set.name, e.portSet.name, el.text, port.text)
	}
	return netip.AddrPortFrom(el.data[0].addr, uint16(port.data[0].num)), true, nil
}

// noteSetElement takes what a frontend's element tells, el found in the
// named set or data map of e whose key holds a destination port and whose
// comment names a Service port: that port, if none is known yet; and the kind of
// frontend, if none is known and the packet is not translated yet: a node
// port for a key without an address, a load-balancer IP in the flat
// layout's firewall set, a cluster IP for an address in the set
// cluster-ips, else an external IP.
func (ev *evaluation) noteSetElement(b *branch, e *expr, el *element) {
	hasPort, hasAddr := false, false
	for _, s := range e.sels {
		hasPort = hasPort || s.kind == selDport
		hasAddr = hasAddr || s.kind == selDaddr
	}
	pn, named := serviceOfComment(el.comment, b.pkt.proto)
	if !hasPort || !named {
		return
	}
	if b.service.Name == "" {
		b.service = pn
	}
	if b.kind != 0 || b.pkt.dnatted {
		return
	}
	clusterIPs := ev.t.sets[setClusterIPs]
	switch {
	case !hasAddr:
		b.kind = ruleset.KindNodePort
	case e.set.name == setFlatFirewall:
		b.kind = ruleset.KindLoadBalancerIP
	case clusterIPs != nil && !clusterIPs.isMap && clusterIPs.find([]datum{{addr: b.pkt.daddr}}) != nil:
		b.kind = ruleset.KindClusterIP
	default:
		b.kind = ruleset.KindExternalIP
	}
}
