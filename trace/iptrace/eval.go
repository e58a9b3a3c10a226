package iptrace

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
)

// Limits that keep a malformed rule set from running away: how deep jumps
// nest, and how many rules one Evaluate may look at.
const (
	maxDepth = 64
	maxRules = 1 << 20
)

// flow is one branch of a packet's walk through the rules: the packet as
// the rules have changed it, and what the rules told about it.
type flow struct {
	proto            string
	src, dst         netip.AddrPort
	fromNode, toNode bool
	mark             uint32
	dnat             bool // a DNAT rule translated it (conntrack state DNAT)
	masquerade       bool // a MASQUERADE rule took it
	share            *big.Rat

	// entry is the first rule naming a Service port that matched in nat;
	// entryMark the mark when the chain holding the DNAT rule was entered.
	entry        *rule
	entryMark    uint32
	affinity     int32 // --seconds of the recent --rcheck rules reached
	shortCircuit bool
	fwRefused    bool // it ran through a firewall chain without taking a jump
	hook         string
	steps        []Step
}

// dstLocal answers `--dst-type LOCAL`: an untranslated destination is the
// node's when Packet.ToNode says so or it is a loopback address; a
// translated one is an endpoint, taken to be elsewhere.
func (f *flow) dstLocal() bool { return !f.dnat && (f.toNode || f.dst.Addr().IsLoopback()) }

func (f *flow) clone() *flow {
	g := *f
	g.share = new(big.Rat).Set(f.share)
	g.steps = slices.Clip(f.steps)
	return &g
}

// verdict is how a walk through a chain ended.
type verdict uint8

const (
	verdictReturn verdict = iota // off the end of a user chain, or RETURN
	verdictAccept
	verdictDrop
	verdictReject
)

// branch is one way a walk ended.
type branch struct {
	f       *flow
	verdict verdict
	by      *rule // the rule that dropped or rejected, nil for a policy
}

// walker walks the rules for one Evaluate.
type walker struct {
	rules  *Rules
	budget int
}

// Evaluate follows the first packet of a new flow p through the netfilter
// hooks and returns its Outcome, with the Path of rules that decided it.
// The hooks are nat PREROUTING for an arriving packet or nat OUTPUT for one
// the node sends (Packet.FromNode); then filter INPUT when the destination
// is the node's (untranslated, and Packet.ToNode or a loopback address) or
// filter FORWARD otherwise; a packet the node sends goes through filter
// OUTPUT and nat POSTROUTING, and then filter INPUT when it is for the node
// itself; a forwarded one through nat POSTROUTING.
//
// Random statistic matches split the flow: each target's Share is the exact
// product of the probabilities written in the rules (the decimals as
// rationals), so it is within 1e-9 of kube-proxy's 1/N, not equal to it.
// Evaluate returns an error when the rules loop, nest deeper than 64 jumps,
// or split one flow between different results (forwarded and dropped, or
// two Service ports), which an Outcome cannot say.
func (r *Rules) Evaluate(p trace.Packet) (trace.Outcome, Path, error) {
	if r == nil || r.tables == nil {
		return trace.Outcome{}, nil, errors.New("iptrace: no rules: Parse makes them")
	}
	w := &walker{rules: r, budget: maxRules}
	f := &flow{
		proto:    strings.ToLower(string(p.Protocol)),
		src:      p.Src,
		dst:      p.Dst,
		fromNode: p.FromNode,
		toNode:   p.ToNode,
		share:    big.NewRat(1, 1),
	}
	ends, err := w.hooks(f)
	if err != nil {
		return trace.Outcome{}, nil, fmt.Errorf("%v: %w", p, err)
	}
	out, err := w.outcome(ends)
	if err != nil {
		return trace.Outcome{}, nil, fmt.Errorf("%v: %w", p, err)
	}
	return out, pathOf(ends), nil
}

// hooks runs f through the hooks in order and returns how each branch
// ended.
func (w *walker) hooks(f *flow) ([]branch, error) {
	first := "PREROUTING"
	if f.fromNode {
		first = "OUTPUT"
	}
	ends, err := w.hook("nat", first, []branch{{f: f, verdict: verdictAccept}})
	if err != nil {
		return nil, err
	}
	var out []branch
	for _, b := range ends {
		rest, err := w.afterNAT(b)
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
	}
	return out, nil
}

// afterNAT runs a branch that nat PREROUTING or OUTPUT let through the
// filter hooks and nat POSTROUTING.
func (w *walker) afterNAT(b branch) ([]branch, error) {
	in := []branch{b}
	local := b.f.dstLocal()
	var steps [][2]string
	switch {
	case b.f.fromNode && local:
		steps = [][2]string{{"filter", "OUTPUT"}, {"nat", "POSTROUTING"}, {"filter", "INPUT"}}
	case b.f.fromNode:
		steps = [][2]string{{"filter", "OUTPUT"}, {"nat", "POSTROUTING"}}
	case local:
		steps = [][2]string{{"filter", "INPUT"}}
	default:
		steps = [][2]string{{"filter", "FORWARD"}, {"nat", "POSTROUTING"}}
	}
	for _, s := range steps {
		var err error
		if in, err = w.hook(s[0], s[1], in); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// hook runs the accepted branches of in through one built-in chain; the
// others are kept as they ended.
func (w *walker) hook(table, name string, in []branch) ([]branch, error) {
	t := w.rules.tables[table]
	c := t.chains[name]
	var out []branch
	for _, b := range in {
		if b.verdict != verdictAccept {
			out = append(out, b)
			continue
		}
		b.f.hook = table + " " + name
		ends, err := w.chain(t, c, 0, b.f, b.f.mark, false, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, ends...)
	}
	return out, nil
}

// chain walks c from rule start and returns how each branch ended:
// entryMark is the mark when c was entered and jumped whether a jump out of
// c was taken so far.
func (w *walker) chain(t *table, c *chain, start int, f *flow, entryMark uint32, jumped bool, depth int) ([]branch, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("chain %s: jumps nest deeper than %d", c.name, maxDepth)
	}
	for i := start; i < len(c.rules); i++ {
		if w.budget--; w.budget < 0 {
			return nil, errors.New("the rules loop or are too many to follow")
		}
		r := c.rules[i]
		if !r.matches(f) {
			continue
		}
		if r.prob != nil && r.prob.Cmp(big.NewRat(1, 1)) < 0 {
			return w.split(t, c, i, f, entryMark, jumped, depth)
		}
		ends, done, err := w.apply(t, c, i, f, entryMark, depth)
		if err != nil || done {
			return ends, err
		}
		if r.target.kind == targetJump {
			return w.afterJump(t, c, i, ends, entryMark, depth)
		}
	}
	return w.endOfChain(t, c, f, jumped), nil
}

// split walks both ways of a random statistic match of rule i of c: taken
// with its probability, and not.
func (w *walker) split(t *table, c *chain, i int, f *flow, entryMark uint32, jumped bool, depth int) ([]branch, error) {
	p := c.rules[i].prob
	notTaken := f.clone()
	notTaken.share.Mul(notTaken.share, new(big.Rat).Sub(big.NewRat(1, 1), p))
	f.share.Mul(f.share, p)
	var ends []branch
	if f.share.Sign() > 0 {
		taken, done, err := w.apply(t, c, i, f, entryMark, depth)
		if err != nil {
			return nil, err
		}
		if !done && c.rules[i].target.kind == targetJump {
			taken, err = w.afterJump(t, c, i, taken, entryMark, depth)
		} else if !done {
			taken, err = w.chain(t, c, i+1, f, entryMark, jumped, depth)
		}
		if err != nil {
			return nil, err
		}
		ends = taken
	}
	if notTaken.share.Sign() > 0 {
		rest, err := w.chain(t, c, i+1, notTaken, entryMark, jumped, depth)
		if err != nil {
			return nil, err
		}
		ends = append(ends, rest...)
	}
	return ends, nil
}

// afterJump goes on in c after rule i for the branches that returned from
// the chain it jumped to.
func (w *walker) afterJump(t *table, c *chain, i int, sub []branch, entryMark uint32, depth int) ([]branch, error) {
	var ends []branch
	for _, b := range sub {
		if b.verdict != verdictReturn {
			ends = append(ends, b)
			continue
		}
		rest, err := w.chain(t, c, i+1, b.f, entryMark, true, depth)
		if err != nil {
			return nil, err
		}
		ends = append(ends, rest...)
	}
	return ends, nil
}

// endOfChain is the end of a walk that ran off c: the policy of a built-in
// chain, a return from a user chain. Running off a firewall chain without
// taking one of its jumps refuses the flow.
func (w *walker) endOfChain(t *table, c *chain, f *flow, jumped bool) []branch {
	if !c.builtin {
		if isFirewallChain(c.name) && !jumped {
			f.fwRefused = true
		}
		return []branch{{f: f, verdict: verdictReturn}}
	}
	f.steps = append(f.steps, Step{Hook: f.hook, Chain: c.name, Rule: ":" + c.name + " " + c.policy})
	if c.policy == "DROP" {
		return []branch{{f: f, verdict: verdictDrop}}
	}
	return []branch{{f: f, verdict: verdictAccept}}
}

// apply applies the target of rule i of c, which matched f. done reports
// that the walk of c ends with ends; otherwise, for a jump, ends are how
// the jumped-to chain ended, and for other targets the walk goes on.
func (w *walker) apply(t *table, c *chain, i int, f *flow, entryMark uint32, depth int) (ends []branch, done bool, err error) {
	r := c.rules[i]
	f.steps = append(f.steps, Step{Hook: f.hook, Chain: c.name, Rule: r.text, Line: r.line})
	f.note(r, t.name)
	switch r.target.kind {
	case targetNone:
		return nil, false, nil
	case targetMark:
		f.mark = f.mark&^r.target.markMask ^ r.target.markValue
		return nil, false, nil
	case targetJump, targetGoto:
		sub, err := w.chain(t, t.chains[r.target.chain], 0, f, f.mark, false, depth+1)
		return sub, r.target.kind == targetGoto, err
	case targetReturn:
		if c.builtin {
			return w.endOfChain(t, c, f, true), true, nil
		}
		return []branch{{f: f, verdict: verdictReturn}}, true, nil
	case targetAccept:
		return []branch{{f: f, verdict: verdictAccept}}, true, nil
	case targetDrop:
		return []branch{{f: f, verdict: verdictDrop, by: r}}, true, nil
	case targetReject:
		return []branch{{f: f, verdict: verdictReject, by: r}}, true, nil
	case targetDNAT:
		if r.target.to.Addr().Is4() != f.dst.Addr().Is4() {
			return nil, true, fmt.Errorf("line %d: DNAT to %v, another family than the packet's", r.line, r.target.to)
		}
		f.dst, f.dnat, f.entryMark = r.target.to, true, entryMark
		return []branch{{f: f, verdict: verdictAccept}}, true, nil
	case targetMasquerade:
		f.masquerade = true
		return []branch{{f: f, verdict: verdictAccept}}, true, nil
	}
	return nil, true, fmt.Errorf("line %d: unknown target", r.line)
}

// matches reports whether every match of r holds for f (the statistic
// match aside). A recent --rcheck match never holds: no earlier flow of
// the client is known. Reaching it records that affinity applies.
func (r *rule) matches(f *flow) bool {
	if r.proto != "" && r.proto != f.proto {
		return false
	}
	for _, c := range r.conds {
		if c.match(f) == c.neg {
			return false
		}
	}
	if r.rcheck > 0 {
		f.affinity = r.rcheck
		return false
	}
	return true
}

// note records what a matched rule tells about the flow: the Service port
// it entered in nat, and a short-circuit.
func (f *flow) note(r *rule, table string) {
	if table == "nat" && f.entry == nil && r.portName() != (servicemap.PortName{}) {
		f.entry = r
	}
	if r.target.kind == targetJump && (strings.HasPrefix(r.comment, "pod traffic for ") || strings.HasPrefix(r.comment, "route LOCAL traffic for ")) {
		f.shortCircuit = true
	}
}

// isFirewallChain reports whether name is a load-balancer source-range
// firewall chain: PREFIX-FW-HASH.
func isFirewallChain(name string) bool { return strings.Contains(name, "-FW-") }

// portName is the Service port that r's comment names, kube-proxy's
// "namespace/name:port" (or "namespace/name") first in it, with r's
// protocol; zero when the comment names none or r matches no protocol.
func (r *rule) portName() servicemap.PortName {
	first, _, _ := strings.Cut(r.comment, " ")
	ns, rest, ok := strings.Cut(first, "/")
	if !ok || ns == "" || rest == "" || r.proto == "" || strings.Contains(rest, "/") {
		return servicemap.PortName{}
	}
	name, port, _ := strings.Cut(rest, ":")
	return servicemap.PortName{Namespace: ns, Name: name, Port: port, Protocol: v1.Protocol(strings.ToUpper(r.proto))}
}

// kind is the kind of frontend that r, a rule naming a Service port, is
// for: told by kube-proxy's comments ("… cluster IP", "… external IP", "…
// loadbalancer IP", "… traffic not accepted by …"), by a node-port rule
// (a destination port with no destination address, in nat PREFIX-NODEPORTS
// or with --dst-type LOCAL), or by filter PREFIX-SERVICES holding only
// cluster-IP rules. Zero when the rule does not say: a reject or drop in
// filter PREFIX-EXTERNAL-SERVICES of an address that is an external IP or a
// load-balancer IP.
func (r *rule) kind() ruleset.FrontendKind {
	switch {
	case strings.HasSuffix(r.comment, " cluster IP"):
		return ruleset.KindClusterIP
	case strings.HasSuffix(r.comment, " external IP"):
		return ruleset.KindExternalIP
	case strings.HasSuffix(r.comment, " loadbalancer IP"), strings.Contains(r.comment, " traffic not accepted by "):
		return ruleset.KindLoadBalancerIP
	case strings.HasSuffix(r.chain, "-NODEPORTS") || slices.ContainsFunc(r.conds, func(c cond) bool { return c.what == "--dst-type" }):
		return ruleset.KindNodePort
	case strings.HasSuffix(r.chain, "-EXTERNAL-SERVICES"):
		return 0
	case strings.HasSuffix(r.chain, "-SERVICES"):
		return ruleset.KindClusterIP
	}
	return 0
}
