package nfttrace

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// Step is one rule that matched on the packet's way, or a base chain's
// policy that decided.
type Step struct {
	// Hook is the netfilter hook: prerouting, input, forward, output or
	// postrouting.
	Hook  string
	Chain string
	// Rule is the rule as written (with its comment), or "policy drop".
	Rule string
	// Line is the rule's line in the text Parse read; 0 for a policy.
	Line int
	// Element is the element of a named set or map ("service-ips
	// 198.19.0.10 . tcp . 80 : goto service-…") or of an anonymous verdict
	// map that the packet was found in, if any.
	Element string
	// Share is, for an element of a numgen verdict map, the share of new
	// flows that take it; nil otherwise.
	Share *big.Rat
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", s.Hook, s.Chain, s.Rule)
	if s.Element != "" {
		fmt.Fprintf(&b, " [%s]", s.Element)
	}
	if s.Share != nil {
		fmt.Fprintf(&b, " (share %s)", s.Share.RatString())
	}
	return b.String()
}

// Path is what decided where a packet goes: the rules that matched, in the
// order they were evaluated. Where a numgen spreads flows, the steps of
// each draw follow the step that draws it, and the steps before it are
// listed once.
type Path []Step

func (p Path) String() string {
	lines := make([]string, len(p))
	for i, s := range p {
		lines[i] = s.String()
	}
	return strings.Join(lines, "\n")
}

// Evaluate follows the first packet of a new flow through the table and
// returns where it goes, as trace.Trace says it, with the Path that decided
// it. The Outcome holds what the rules tell:
//
//   - Verdict: rejected (a reject), dropped (a drop, or a base chain's drop
//     policy), dropped by the source-range firewall (a drop in
//     firewall-check or in a firewall-… chain), forwarded (DNAT), else not
//     a Service.
//   - Service: from the name of the first per-service or per-endpoint chain
//     the packet enters (kube-proxy's "service-HASH-ns/name/proto/port"),
//     else from the comment of the verdict-map element that decided
//     ("ns/name:port"), else from the comment of the first element of a
//     named set or data map keyed by destination port that the packet is
//     found in ("ns/name:port/PROTOCOL", the flat layout's frontend
//     elements); zero when none names it (a name truncated to fit nft's
//     limits).
//   - Kind: from the first named verdict map the packet is found in: a
//     node port for a map keyed by protocol and port; for a map keyed by
//     address, a load-balancer IP in firewall-ips, a cluster IP for an
//     element that goes to a service- or local- chain, an external IP for
//     one that goes to an external- chain, and for a drop or reject
//     element, a cluster IP when the address is in the set cluster-ips
//     (else an external IP). Else, before DNAT, from the first element
//     that names a Service port (above) of a set or data map: a node port
//     for a key without an address, a load-balancer IP in the flat
//     layout's set firewall, a cluster IP for an address in the set
//     cluster-ips, else an external IP. See Comparable for what the rules
//     cannot tell.
//   - Targets: the DNAT destinations with their exact shares (numgen
//     draws), and for each whether postrouting masquerades it. Their Local
//     is not known from the rules and is left false.
//   - Masquerade: whether postrouting would masquerade each flow with the
//     mark it had when it entered the chain that DNATs it, changed by the
//     DNAT rule's own mark statements (so not counting the hairpin mark
//     that an earlier rule of that chain sets), with `ct status dnat` not
//     holding (so not counting the flat layout's hairpin rule).
//   - ShortCircuit: whether a rule whose comment starts with
//     "short-circuit" sent the packet on (kube-proxy's comments), or a DNAT
//     through a map of the flat layout's short-circuit groups
//     (shortcircuit-N-… and nodeport-shortcircuit-N-…) translated it.
//   - Affinity: the timeout of the set the packet's source is added to.
//
// A packet of the other IP family than the table's is not seen by it: not
// a Service, an empty Path. Evaluate fails on a packet of a protocol other
// than TCP, UDP and SCTP, on rules that loop, on a DNAT or masquerade
// outside a nat chain of its hook, and when draws of numgen lead to
// different kinds of outcome (which trace.Outcome cannot say).
func (t *Table) Evaluate(p trace.Packet) (trace.Outcome, Path, error) {
	proto, ok := protoNumbers[p.Protocol]
	if !ok {
		return trace.Outcome{}, nil, fmt.Errorf("nfttrace: protocol %q", p.Protocol)
	}
	if !p.Src.Addr().IsValid() || !p.Dst.Addr().IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() || p.Dst.Addr().Is4() != (t.family == "ip") {
		return trace.Outcome{}, nil, nil
	}
	ev := &evaluation{t: t, p: p}
	ends, err := ev.run(&branch{pkt: packetState(p.Src, p.Dst, proto), share: big.NewRat(1, 1)})
	if err != nil {
		return trace.Outcome{}, nil, err
	}
	path := mergePaths(ends)
	out, err := ev.outcome(ends)
	if err != nil {
		return trace.Outcome{}, path, fmt.Errorf("nfttrace: %v: %w", p, err)
	}
	return out, path, nil
}

// mergePaths lists the steps common to consecutive branches once.
func mergePaths(ends []*branch) Path {
	var path Path
	var prev Path
	for _, b := range ends {
		i := 0
		for i < len(prev) && i < len(b.path) && samePathStep(prev[i], b.path[i]) {
			i++
		}
		path = append(path, b.path[i:]...)
		prev = b.path
	}
	return path
}

func samePathStep(a, b Step) bool {
	return a.Hook == b.Hook && a.Chain == b.Chain && a.Line == b.Line && a.Rule == b.Rule && a.Element == b.Element
}

// outcome sums up the branches.
func (ev *evaluation) outcome(ends []*branch) (trace.Outcome, error) {
	first := ends[0]
	for _, b := range ends[1:] {
		if b.end != first.end || b.pkt.dnatted != first.pkt.dnatted {
			return trace.Outcome{}, fmt.Errorf("random draws end differently (%v and %v)", describe(first), describe(b))
		}
	}
	out := trace.Outcome{Service: first.service, Kind: first.kind}
	switch first.end {
	case endRejected:
		out.Verdict = ruleset.VerdictReject
	case endDropped:
		out.Verdict = ruleset.VerdictDrop
	case endFirewalled:
		out.Verdict = ruleset.VerdictFirewall
	case endAccepted:
		if !first.pkt.dnatted {
			return trace.Outcome{}, nil
		}
		return ev.forwarded(out, ends)
	}
	return out, nil
}

func describe(b *branch) string {
	switch b.end {
	case endRejected:
		return "rejected"
	case endDropped:
		return "dropped"
	case endFirewalled:
		return "firewalled"
	}
	if b.pkt.dnatted {
		return "forwarded to " + netip.AddrPortFrom(b.pkt.daddr, b.pkt.dport).String()
	}
	return "accepted"
}

// forwarded fills the targets of a forwarded packet from its branches.
func (ev *evaluation) forwarded(out trace.Outcome, ends []*branch) (trace.Outcome, error) {
	out.Verdict = ruleset.VerdictForward
	out.Masquerade = true
	for _, b := range ends {
		target := netip.AddrPortFrom(b.pkt.daddr, b.pkt.dport)
		i := slices.IndexFunc(out.Targets, func(c ruleset.Choice) bool { return c.Endpoint == target })
		if i < 0 {
			out.Targets = append(out.Targets, ruleset.Choice{Target: ruleset.Target{Endpoint: target}, Share: new(big.Rat), Masquerade: b.masquerade})
			i = len(out.Targets) - 1
		}
		c := &out.Targets[i]
		if c.Masquerade != b.masquerade {
			return trace.Outcome{}, fmt.Errorf("flows to %v are masqueraded in some draws only", target)
		}
		c.Share.Add(c.Share, b.share)
		masq, err := ev.masqueradedWith(b, b.dnatMark)
		if err != nil {
			return trace.Outcome{}, err
		}
		out.Masquerade = out.Masquerade && masq
		out.ShortCircuit = out.ShortCircuit || b.shortCircuit
		if b.affinity != ends[0].affinity {
			return trace.Outcome{}, fmt.Errorf("affinity differs between draws")
		}
	}
	if ends[0].affinity > 0 {
		pol, err := affinity.ClientIP(ends[0].affinity)
		if err != nil {
			return trace.Outcome{}, err
		}
		out.Affinity = pol
	}
	return out, nil
}

// masqueradedWith reports whether postrouting masquerades b's packet when it
// carries mark, with `ct status dnat` not holding: a rule that masquerades
// a DNATed flow for its addresses alone (the flat layout's hairpin check)
// is the target's business, not the Decision's.
func (ev *evaluation) masqueradedWith(b *branch, mark uint64) (bool, error) {
	pkt := b.pkt
	pkt.mark, pkt.ctDNAT = mark, false
	ends, err := ev.run(&branch{pkt: pkt, share: big.NewRat(1, 1), stage: stagePostrouting, chains: ev.t.baseChains("postrouting", true)})
	if err != nil {
		return false, err
	}
	for _, e := range ends {
		if !e.masquerade {
			return false, nil
		}
	}
	return true, nil
}

// Comparable is o without what the rules cannot tell, so that an
// evaluator's Outcome and trace.Trace's compare equal when the rules do
// what the Ruleset says:
//
//   - Kind: a load-balancer IP is reported as an external IP (both
//     layouts put both in the same maps and sets; only firewall-ips, or
//     the flat layout's firewall, for a port with source ranges, tells
//     them apart).
//   - Targets: sorted by endpoint, with only Endpoint, Share and
//     Masquerade (a target's Local is the Ruleset's bookkeeping, not in
//     the rules).
func Comparable(o trace.Outcome) trace.Outcome {
	if o.Kind == ruleset.KindLoadBalancerIP {
		o.Kind = ruleset.KindExternalIP
	}
	if o.Targets != nil {
		ts := make([]ruleset.Choice, len(o.Targets))
		for i, c := range o.Targets {
			ts[i] = ruleset.Choice{Target: ruleset.Target{Endpoint: c.Endpoint}, Share: c.Share, Masquerade: c.Masquerade}
		}
		slices.SortFunc(ts, func(a, b ruleset.Choice) int { return a.Endpoint.Compare(b.Endpoint) })
		o.Targets = ts
	}
	return o
}
