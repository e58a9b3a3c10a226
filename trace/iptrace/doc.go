// Package iptrace evaluates iptables rules given as text, and says where the
// first packet of a new flow goes, in the terms of package trace: not a
// Service, rejected, dropped, dropped by a load-balancer source-range
// firewall, or forwarded to targets with each one's share, whether it is
// masqueraded and whether ClientIP affinity applies.
//
// It judges a rule set on its own: it reads iptables-save output (what the
// kernel holds) or iptables-restore input (what iptables.Render writes) and
// knows nothing of the Ruleset the rules came from, nor of the package that
// wrote them. Agree compares its Outcome with trace.Trace's, field by field
// as far as the rules can tell them.
//
// # What is modelled
//
// The filter and nat tables, walked along the netfilter hooks in order (see
// Rules.Evaluate): jumps, gotos, RETURN, built-in chain policies, and these
// matches and targets, in our rendered form and in the kernel's canonical
// form:
//
//   - -p tcp|udp|sctp, [!] -s and [!] -d with an address or a prefix,
//     -m tcp|udp|sctp [!] --dport|--sport with one port.
//   - -m comment --comment: only read, for the Service port's name
//     (kube-proxy's "namespace/name:port" first in the comment) and the
//     kind of frontend (" cluster IP", " external IP", " loadbalancer IP").
//   - -m addrtype [!] --dst-type LOCAL: true for an untranslated
//     destination when trace.Packet.ToNode is set or it is a loopback
//     address; a translated (DNAT) destination is an endpoint, taken to be
//     elsewhere. [!] --src-type LOCAL: trace.Packet.FromNode.
//   - -m statistic --mode random --probability P: the flow splits into
//     both ways, with exact rational shares of the decimal written.
//   - -m recent --rcheck --seconds N: no earlier flow of the client is
//     known, so it never matches; reaching it means that ClientIP affinity
//     with timeout N applies. -m recent --set always matches.
//   - -m conntrack [!] --ctstate: a new flow is NEW, and DNAT once a DNAT
//     rule translated it; never ESTABLISHED, RELATED, INVALID, UNTRACKED or
//     SNAT.
//   - -m nfacct --nfacct-name N (kube-proxy counts the INVALID packets it
//     drops with it): it only counts, and always matches.
//   - -m mark [!] --mark V[/M], and -j MARK --set-xmark, --set-mark,
//     --or-mark, --xor-mark and --and-mark.
//   - -j ACCEPT, DROP, REJECT [--reject-with T], RETURN, DNAT
//     --to-destination ADDR:PORT, MASQUERADE [--random-fully|--random].
//
// A rule with anything else (another match or target, an interface, a port
// range) is an error naming its line: it is never ignored.
//
// Results: REJECT is ruleset.VerdictReject; DROP (or a DROP policy) is
// ruleset.VerdictFirewall when the flow ran through a load-balancer firewall chain
// (PREFIX-FW-HASH) without taking any of its jumps, or the DROP is in such a
// chain, and ruleset.VerdictDrop otherwise; a flow accepted after a DNAT is
// ruleset.VerdictForward to the DNAT's destination, masqueraded when a MASQUERADE
// rule took it in nat POSTROUTING; anything else accepted is
// ruleset.VerdictNotServed.
//
// # What the rules cannot tell
//
// The Outcome holds what the rules say. Target.Local (which node runs an
// endpoint) is never set, and the targets are in rule order. Outcome.Masquerade is whether nat POSTROUTING would masquerade the
// flow with the mark it had when it entered the chain that translated it
// (so that a hairpin flow, marked in the endpoint's own chain, is not
// counted). Outcome.ShortCircuit is read from kube-proxy's comments ("pod
// traffic for …", "route LOCAL traffic for …"). A reject or drop of an
// address in filter KUBE-EXTERNAL-SERVICES, for a Service port that nat
// does not mention, has a zero Kind: the rule does not say whether the
// address is an external or a load-balancer IP. For a rejected or dropped
// flow the Service port is the one the deciding rule names, if any. Agree
// treats these fields accordingly.
//
// # What is not modelled
//
// Conntrack (replies, established flows, the DNAT and SNAT of existing
// connections), the affinity state left by earlier flows, the raw, mangle
// and security tables, rules of other programs that use other matches,
// routing (beyond "the node's own address or elsewhere"), rp_filter,
// route_localnet and martian filtering, the nat INPUT hook, and the
// endpoints' own nodes: an endpoint that is an address of this node is
// still taken to be elsewhere.
//
// The package is pure: no I/O, no clock, no randomness, no logging.
package iptrace
