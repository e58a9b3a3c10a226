package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// step is one step of an evaluator's Path: where it is (hook and chain),
// which is what live and desired paths are compared by, and how the
// evaluator writes it.
type step struct {
	where, text string
}

// evaluator answers for one packet from one backend's rules.
type evaluator func(trace.Packet) (trace.Outcome, []step, error)

// runFunc runs a program and returns its standard output; an error when it
// cannot run or exits non-zero.
type runFunc func(ctx context.Context, name string, args ...string) (string, error)

// errAbsent is returned by a backend's live reader when the kernel holds
// none of the proxy's rules.
var errAbsent = errors.New("no rules of the proxy in the kernel")

// backend is one kernel backend, as the reference proxy of that name uses
// it: its default chain or table names.
type backend struct {
	name string
	// mode is kube-proxy's behaviour for this backend, for trace.Trace.
	mode trace.Options
	// desired evaluates the rules the proxy would install for rs.
	desired func(rs *ruleset.Ruleset) (evaluator, error)
	// live evaluates the rules the kernel holds for family, read with
	// run, and names the command that read them; errAbsent (wrapped) when
	// the proxy's rules are not there.
	live func(ctx context.Context, run runFunc, family v1.IPFamily) (evaluator, string, error)
	// agree reports how an evaluated outcome differs from the tracer's.
	agree func(spec, got trace.Outcome) error
}

// backends are the two backends, in the order they are explained.
var backends = []backend{
	{name: "iptables", mode: trace.IPTablesMode, desired: iptablesDesired, live: iptablesLive, agree: iptrace.Agree},
	{name: "nftables", mode: trace.NFTablesMode, desired: nftablesDesired, live: nftablesLive, agree: nftablesAgree},
}

// selectBackends returns the backends named by flag: "" for both.
func selectBackends(flag string) ([]backend, error) {
	if flag == "" {
		return backends, nil
	}
	for _, b := range backends {
		if b.name == flag {
			return []backend{b}, nil
		}
	}
	return nil, fmt.Errorf("unknown backend %q: want iptables or nftables", flag)
}

// iptablesDesired evaluates what the iptables Executor (with the default
// Names, as the reference proxy has them) would apply for rs on a kernel
// without any of its rules: the restore input of a full sync and the jumps
// it inserts into the built-in chains.
func iptablesDesired(rs *ruleset.Ruleset) (evaluator, error) {
	names := iptables.Names{}
	return iptablesEvaluator(append(iptables.Render(names, rs), iptables.RenderJumps(names)...))
}

func iptablesEvaluator(text []byte) (evaluator, error) {
	rules, err := iptrace.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("evaluating the iptables rules: %w", err)
	}
	return func(p trace.Packet) (trace.Outcome, []step, error) {
		o, path, err := rules.Evaluate(p)
		steps := make([]step, len(path))
		for i, s := range path {
			steps[i] = step{where: s.Hook + " " + s.Chain, text: strings.TrimSuffix(iptrace.Path{s}.String(), "\n")}
		}
		return o, steps, err
	}, nil
}

// nftablesDesired evaluates the transaction that renders rs into a new
// table of the default name, as the reference proxy's first sync applies it.
func nftablesDesired(rs *ruleset.Ruleset) (evaluator, error) {
	fake := knftables.NewFake(nftables.Family(rs.Config().Family), nftables.DefaultTable)
	tx := fake.NewTransaction()
	if _, err := nftables.Render(tx, rs, nftables.Options{}, nil); err != nil {
		return nil, fmt.Errorf("rendering the nftables table: %w", err)
	}
	return nftablesEvaluator(tx.String())
}

func nftablesEvaluator(text string) (evaluator, error) {
	table, err := nfttrace.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("evaluating the nftables table: %w", err)
	}
	return func(p trace.Packet) (trace.Outcome, []step, error) {
		o, path, err := table.Evaluate(p)
		steps := make([]step, len(path))
		for i, s := range path {
			steps[i] = step{where: s.Hook + " " + s.Chain, text: s.String()}
		}
		return o, steps, err
	}, nil
}

// nftablesAgree compares what the nftables rules can tell of spec and got.
func nftablesAgree(spec, got trace.Outcome) error {
	want, have := describeOutcome(nfttrace.Comparable(spec)), describeOutcome(nfttrace.Comparable(got))
	if slices.Equal(want, have) {
		return nil
	}
	return fmt.Errorf("the tracer says %s", strings.Join(want, "; "))
}
