package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// errDiffer is returned when the answers differ: a backend's desired rules
// from the tracer, or the live rules from the desired ones (or are absent).
// The differences are already printed.
var errDiffer = errors.New("the answers differ")

// explainer answers for one packet on one node.
type explainer struct {
	rs       *ruleset.Ruleset
	backends []backend
	// live, when set, reads the kernel's rules with run.
	live bool
	run  runFunc
}

// explain writes, for each backend, where p goes, what decides it, and
// whether the answers agree; errDiffer when some do not.
func (e explainer) explain(ctx context.Context, w io.Writer, p trace.Packet) error {
	fmt.Fprintf(w, "%s, on node %s\n", p, e.rs.Config().Node.Name)
	differ := false
	for _, b := range e.backends {
		fmt.Fprintln(w)
		var ok bool
		var err error
		if e.live {
			ok, err = e.explainLive(ctx, w, b, p)
		} else {
			ok, err = e.explainDesired(w, b, p)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		differ = differ || !ok
	}
	if differ {
		return errDiffer
	}
	return nil
}

// explainDesired writes where the desired rules of b send p and whether
// the tracer agrees.
func (e explainer) explainDesired(w io.Writer, b backend, p trace.Packet) (bool, error) {
	ev, err := b.desired(e.rs)
	if err != nil {
		return false, err
	}
	o, path, err := ev(p)
	if err != nil {
		return false, fmt.Errorf("evaluating the desired rules: %w", err)
	}
	fmt.Fprintf(w, "%s, desired rules:\n", b.name)
	printAnswer(w, o, path)
	if err := b.agree(trace.Trace(e.rs, p, b.mode), o); err != nil {
		fmt.Fprintf(w, "  DIFFERS from the tracer: %v\n", err)
		return false, nil
	}
	fmt.Fprintln(w, "  the tracer agrees")
	return true, nil
}

// explainLive writes where the kernel's rules of b send p and how that
// differs from the desired rules.
func (e explainer) explainLive(ctx context.Context, w io.Writer, b backend, p trace.Packet) (bool, error) {
	desired, err := b.desired(e.rs)
	if err != nil {
		return false, err
	}
	want, wantPath, err := desired(p)
	if err != nil {
		return false, fmt.Errorf("evaluating the desired rules: %w", err)
	}
	live, source, err := b.live(ctx, e.run, e.rs.Config().Family)
	if errors.Is(err, errAbsent) {
		fmt.Fprintf(w, "%s, live rules (%s):\n  ABSENT: %v\n", b.name, source, err)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("live rules (%s): %w", source, err)
	}
	got, gotPath, err := live(p)
	if err != nil {
		return false, fmt.Errorf("evaluating the live rules (%s): %w", source, err)
	}
	fmt.Fprintf(w, "%s, live rules (%s):\n", b.name, source)
	printAnswer(w, got, gotPath)
	if slices.Equal(describeOutcome(want), describeOutcome(got)) {
		fmt.Fprintln(w, "  live and desired rules agree")
		return true, nil
	}
	fmt.Fprintln(w, "  DIFFERS from the desired rules, which say:")
	for _, line := range describeOutcome(want) {
		fmt.Fprintln(w, "    "+line)
	}
	printFirstDifference(w, gotPath, wantPath)
	return false, nil
}

// printAnswer writes an outcome and the path that decides it.
func printAnswer(w io.Writer, o trace.Outcome, path []step) {
	for _, line := range describeOutcome(o) {
		fmt.Fprintln(w, "  "+line)
	}
	if len(path) == 0 {
		fmt.Fprintln(w, "  no rule matches it")
		return
	}
	fmt.Fprintln(w, "  decided by:")
	for _, s := range path {
		fmt.Fprintln(w, "    "+s.text)
	}
}

// printFirstDifference writes the first step, by hook and chain, in which
// the live path leaves the desired one.
func printFirstDifference(w io.Writer, live, desired []step) {
	for i := 0; i < max(len(live), len(desired)); i++ {
		if i < len(live) && i < len(desired) && live[i].where == desired[i].where {
			continue
		}
		fmt.Fprintln(w, "  first different step:")
		fmt.Fprintln(w, "    live:    "+stepText(live, i))
		fmt.Fprintln(w, "    desired: "+stepText(desired, i))
		return
	}
}

func stepText(path []step, i int) string {
	if i >= len(path) {
		return "(none: the path ends before)"
	}
	return path[i].text
}

// describeOutcome writes o for operators, one fact a line: the result and
// the Service port, then each target (by endpoint) with its share, then
// short-circuit and affinity.
func describeOutcome(o trace.Outcome) []string {
	head := o.Verdict.String()
	switch {
	case o.Service.Name != "" && o.Kind != 0:
		head += fmt.Sprintf(" through the %s of %s", o.Kind, o.Service)
	case o.Service.Name != "":
		head += " by " + o.Service.String()
	}
	lines := []string{head}
	targets := slices.Clone(o.Targets)
	slices.SortFunc(targets, func(a, b ruleset.Choice) int { return cmp.Compare(a.Endpoint.String(), b.Endpoint.String()) })
	for _, c := range targets {
		line := fmt.Sprintf("-> %v, share %s", c.Endpoint, share(c.Share))
		if c.Masquerade {
			line += ", masqueraded"
		}
		lines = append(lines, line)
	}
	if o.ShortCircuit {
		lines = append(lines, "short-circuited to every endpoint (externalTrafficPolicy Local; the packet comes from a pod or the node)")
	}
	if o.Affinity.Enabled() {
		lines = append(lines, fmt.Sprintf("ClientIP affinity: a client that used an endpoint in the last %d s gets it again", o.Affinity.Seconds()))
	}
	return lines
}

// share writes a fraction exactly when it is a simple one (1/2, 1/3), and
// else to four decimals (the iptables evaluator's shares are the products
// of decimal probabilities).
func share(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.Denom().Cmp(big.NewInt(1000)) <= 0 {
		return r.RatString()
	}
	return "~" + strings.TrimRight(r.FloatString(4), "0")
}
