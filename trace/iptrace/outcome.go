package iptrace

import (
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// Step is one rule that a packet matched, or the policy of a built-in chain
// it ran off.
type Step struct {
	// Hook is the table and built-in chain being walked: "nat PREROUTING",
	// "filter INPUT", …
	Hook  string
	Chain string
	// Rule is the rule's line as written, without counters ("-A CHAIN
	// …"; a rule that "-I" inserted is written as "-A CHAIN" and its
	// arguments, quoted as iptables-save quotes them), or ":CHAIN POLICY"
	// for a policy.
	Rule string
	// Line is the rule's line in the text given to Parse (0 for a policy).
	Line int
	// Share is the fraction of new flows that take this step.
	Share *big.Rat
}

// Path is the steps of a packet's walk, each once, in the order the
// branches of the walk first take them.
type Path []Step

// String writes one step a line: the hook, the share when it is not 1, and
// the rule.
func (p Path) String() string {
	var b strings.Builder
	for _, s := range p {
		b.WriteString(s.Hook)
		if s.Share.Cmp(big.NewRat(1, 1)) != 0 {
			b.WriteString(" (" + s.Share.FloatString(4) + ")")
		}
		b.WriteString(": " + s.Rule + "\n")
	}
	return b.String()
}

// pathOf merges the steps of the branches, adding up the shares of the
// branches that take each.
func pathOf(ends []branch) Path {
	var p Path
	index := map[string]int{}
	for _, b := range ends {
		for _, s := range b.f.steps {
			key := fmt.Sprintf("%s\x00%d\x00%s", s.Hook, s.Line, s.Rule)
			i, ok := index[key]
			if !ok {
				i = len(p)
				index[key] = i
				s.Share = new(big.Rat)
				p = append(p, s)
			}
			p[i].Share.Add(p[i].Share, b.f.share)
		}
	}
	return p
}

// outcome merges the branches' outcomes into one.
func (w *walker) outcome(ends []branch) (trace.Outcome, error) {
	var out trace.Outcome
	for i, b := range ends {
		o, err := w.branchOutcome(b)
		if err != nil {
			return trace.Outcome{}, err
		}
		if i == 0 {
			out = o
			continue
		}
		if o.Verdict != out.Verdict || o.Service != out.Service || o.Kind != out.Kind || o.ShortCircuit != out.ShortCircuit || o.Affinity != out.Affinity {
			return trace.Outcome{}, fmt.Errorf("the flow splits: %s by %v (%s) and %s by %v (%s)", out.Verdict, out.Service, out.Kind, o.Verdict, o.Service, o.Kind)
		}
		out.Masquerade = out.Masquerade && o.Masquerade
		out.Targets = addTarget(out.Targets, o.Targets...)
	}
	return out, nil
}

// addTarget adds choices to ts, adding up the shares of an endpoint reached
// twice in the same way.
func addTarget(ts []ruleset.Choice, choices ...ruleset.Choice) []ruleset.Choice {
	for _, c := range choices {
		i := slices.IndexFunc(ts, func(t ruleset.Choice) bool { return t.Endpoint == c.Endpoint && t.Masquerade == c.Masquerade })
		if i < 0 {
			ts = append(ts, c)
			continue
		}
		ts[i].Share = new(big.Rat).Add(ts[i].Share, c.Share)
	}
	return ts
}

// branchOutcome is the Outcome of one branch of the walk.
func (w *walker) branchOutcome(b branch) (trace.Outcome, error) {
	f := b.f
	var out trace.Outcome
	switch {
	case b.verdict == verdictReject:
		out.Verdict = ruleset.VerdictReject
	case b.verdict == verdictDrop && (f.fwRefused || b.by != nil && isFirewallChain(b.by.chain)):
		out.Verdict = ruleset.VerdictFirewall
	case b.verdict == verdictDrop:
		out.Verdict = ruleset.VerdictDrop
	case f.dnat:
		return w.forwarded(f)
	default:
		return trace.Outcome{}, nil
	}
	if b.by == nil {
		return out, nil
	}
	out.Service, out.Kind = b.by.portName(), b.by.kind()
	if f.entry != nil && f.entry.portName() == out.Service {
		out.Kind = f.entry.kind()
	}
	if out.Service.Name == "" {
		out.Kind = 0
	}
	return out, nil
}

// forwarded is the Outcome of a branch that a DNAT rule translated.
func (w *walker) forwarded(f *flow) (trace.Outcome, error) {
	out := trace.Outcome{Verdict: ruleset.VerdictForward, ShortCircuit: f.shortCircuit}
	if f.entry != nil {
		out.Service, out.Kind = f.entry.portName(), f.entry.kind()
	}
	if f.affinity > 0 {
		pol, err := affinity.ClientIP(f.affinity)
		if err != nil {
			return trace.Outcome{}, fmt.Errorf("affinity: %w", err)
		}
		out.Affinity = pol
	}
	out.Targets = []ruleset.Choice{{Target: ruleset.Target{Endpoint: f.dst}, Share: f.share, Masquerade: f.masquerade}}
	masq, err := w.masqueradesWithMark(f, f.entryMark)
	out.Masquerade = masq
	return out, err
}

// masqueradesWithMark reports whether nat POSTROUTING masquerades f when
// its mark is mark: with the mark f had when it entered the chain that
// translated it, whether the masquerade was decided before the choice of
// an endpoint (rather than for a hairpin flow by the endpoint's chain).
func (w *walker) masqueradesWithMark(f *flow, mark uint32) (bool, error) {
	g := f.clone()
	g.mark, g.masquerade, g.steps = mark, false, nil
	ends, err := w.hook("nat", "POSTROUTING", []branch{{f: g, verdict: verdictAccept}})
	if err != nil {
		return false, err
	}
	for _, b := range ends {
		if !b.f.masquerade {
			return false, nil
		}
	}
	return len(ends) > 0, nil
}

// shareTolerance is how far a Share may be from the specification's: the
// rules write probabilities as decimals (10 in iptables.Render, 11 in the
// kernel's read-back), so shares are within 1e-9 of 1/N, not equal to it.
var shareTolerance = big.NewRat(1, 1_000_000_000)

// Agree reports how got, an Outcome of Evaluate, differs from spec, the
// Outcome trace.Trace gives for the same packet; nil when they agree. It
// compares what the rules can tell:
//
//   - Result, Service, ShortCircuit, Masquerade and Affinity exactly.
//   - Kind exactly, except that a zero Kind in got (a reject or drop of an
//     address in filter KUBE-EXTERNAL-SERVICES, which does not say whether
//     the address is an external or a load-balancer IP) agrees with
//     KindExternalIP and KindLoadBalancerIP.
//   - Targets as a set of endpoints: each with its Masquerade exactly and
//     its Share within 1e-9. Target.Local (which node runs the endpoint)
//     is not in the rules and is not compared.
func Agree(spec, got trace.Outcome) error {
	switch {
	case spec.Verdict != got.Verdict:
		return fmt.Errorf("result %s, want %s", got.Verdict, spec.Verdict)
	case spec.Service != got.Service:
		return fmt.Errorf("Service port %v, want %v", got.Service, spec.Service)
	case spec.Kind != got.Kind && !(got.Kind == 0 && (spec.Kind == ruleset.KindExternalIP || spec.Kind == ruleset.KindLoadBalancerIP)):
		return fmt.Errorf("frontend kind %s, want %s", got.Kind, spec.Kind)
	case spec.Masquerade != got.Masquerade:
		return fmt.Errorf("masquerade %v, want %v", got.Masquerade, spec.Masquerade)
	case spec.ShortCircuit != got.ShortCircuit:
		return fmt.Errorf("short-circuit %v, want %v", got.ShortCircuit, spec.ShortCircuit)
	case spec.Affinity != got.Affinity:
		return fmt.Errorf("affinity %v, want %v", got.Affinity, spec.Affinity)
	}
	return agreeTargets(spec.Targets, got.Targets)
}

func agreeTargets(spec, got []ruleset.Choice) error {
	if len(spec) != len(got) {
		return fmt.Errorf("%d targets %s, want %d %s", len(got), targetsString(got), len(spec), targetsString(spec))
	}
	byEndpoint := func(a, b ruleset.Choice) int { return a.Endpoint.Compare(b.Endpoint) }
	spec, got = slices.SortedFunc(slices.Values(spec), byEndpoint), slices.SortedFunc(slices.Values(got), byEndpoint)
	for i := range spec {
		s, g := spec[i], got[i]
		diff := new(big.Rat).Sub(s.Share, g.Share)
		switch {
		case s.Endpoint != g.Endpoint:
			return fmt.Errorf("targets %s, want %s", targetsString(got), targetsString(spec))
		case s.Masquerade != g.Masquerade:
			return fmt.Errorf("target %v: masquerade %v, want %v", g.Endpoint, g.Masquerade, s.Masquerade)
		case diff.Abs(diff).Cmp(shareTolerance) > 0:
			return fmt.Errorf("target %v: share %s, want %s (within 1e-9)", g.Endpoint, g.Share.FloatString(12), s.Share.FloatString(12))
		}
	}
	return nil
}

func targetsString(cs []ruleset.Choice) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%v %s", c.Endpoint, c.Share.FloatString(4))
		if c.Masquerade {
			parts[i] += " masq"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
