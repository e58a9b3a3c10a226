package iptables

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// FallbackReason says why a Sync that was due to be partial was a full one.
type FallbackReason string

const (
	// FallbackNone: no fallback happened.
	FallbackNone FallbackReason = ""
	// FallbackStateMissing: the check before the partial sync did not
	// find a jump from a built-in chain or a fixed rule, so the tables
	// were flushed or changed behind the Executor's back (or the check
	// itself could not run).
	FallbackStateMissing FallbackReason = "state-missing"
	// FallbackPartialFailed: the partial restore failed, for one because
	// a chain it jumps to had been deleted; the full sync ran right after.
	FallbackPartialFailed FallbackReason = "partial-failed"
)

// stateCheck is the restore input that checks, with one `-C` line each,
// every jump from the built-in chains (a flush of a table removes them);
// what[i] is the drift of line i+1 failing (the zero Drift for the lines
// that check nothing).
type stateCheck struct {
	input []byte
	what  []svcproxy.Drift
}

// newStateCheck returns the check of what a full sync with names leaves in
// the kernel besides the chains a partial restore rewrites.
func newStateCheck(names Names) stateCheck {
	var c stateCheck
	for _, table := range []string{"filter", "nat"} {
		c.add("*"+table, svcproxy.Drift{})
		for _, j := range jumps {
			if j.table == table {
				c.add("-C "+j.from+" "+restoreArgs(j.spec(names)), svcproxy.Drift{Kind: svcproxy.DriftJump, What: "the jump from " + table + " " + j.from + " to " + j.to(names)})
			}
		}
		c.add("COMMIT", svcproxy.Drift{})
	}
	return c
}

// add appends one line to the check, with the drift of its failing (the
// zero Drift for none).
func (c *stateCheck) add(line string, what svcproxy.Drift) {
	c.input = append(c.input, line+"\n"...)
	c.what = append(c.what, what)
}

// restoreArgs joins args into one line of restore input, double-quoting
// those with a space (no argument here holds a quote).
func restoreArgs(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if strings.IndexByte(a, ' ') >= 0 {
			a = `"` + a + `"`
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

// failedLine matches iptables-restore's report of the line that failed.
var failedLine = regexp.MustCompile(`line ([0-9]+) failed`)

// missing explains the error of a check run: the drift of the line that
// failed, and false when err names no line of the check that checks
// something.
func (c stateCheck) missing(err error) (svcproxy.Drift, bool) {
	var ce *CommandError
	if errors.As(err, &ce) {
		if m := failedLine.FindStringSubmatch(ce.Stderr); m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= len(c.what) && c.what[n-1].Found() {
				return c.what[n-1], true
			}
		}
	}
	return svcproxy.Drift{}, false
}

// checkState runs the state check, one restore that changes nothing. It
// returns "" when everything it checks is in the kernel, and otherwise
// what was missing first (or why the check failed).
func (e *Executor) checkState(ctx context.Context) string {
	err := e.runner.Run(ctx, e.restoreCmd(e.check.input, nil))
	if err == nil {
		return ""
	}
	if d, ok := e.check.missing(err); ok {
		return "missing: " + d.What
	}
	return fmt.Sprintf("state check failed: %v", err)
}

// CheckState compares the kernel with what the last successful Sync left
// there. First, cheaply, with one restore of `-C` lines that changes
// nothing: every jump from the built-in chains, and every rule of the top-level chains that does not
// depend on the Services. Then, when that finds nothing, the deep check:
// both tables read with iptables-save (one dump each, streamed), and every
// chain of ours compared with what a full sync leaves: that it is there,
// its number of rules and their targets in order, that no other chain of
// ours is, and the jumps into them. The deep check spaces itself so that
// it takes at most 5 % of the time (a check whose CPU time, the tool's and
// this process's, was d waits 19·d before the next): at 10,000 Services ×
// 10 endpoints it costs about 5 s and runs every 2 to 4 minutes
// (BENCHMARKS.md), at a few hundred Services at every check.
//
// It returns what it found first, of kind svcproxy.DriftJump (a jump from
// a built-in chain missing), DriftRule (a fixed rule missing, or a chain
// of ours with other rules or targets) or DriftChain (a chain of ours
// missing, or one too many); the zero Drift when nothing differs, and
// before the first successful Sync, when there is nothing to compare; an
// error when the check could not run. A full sync (RequestFullSync)
// repairs what it finds.
func (e *Executor) CheckState(ctx context.Context) (svcproxy.Drift, error) {
	if !e.made() {
		return svcproxy.Drift{}, errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return svcproxy.Drift{}, nil
	}
	check := e.check.with(fixedRulesCheck(e.names, e.last.Config(), e.kernel))
	err := e.runner.Run(ctx, e.restoreCmd(check.input, nil))
	if err != nil {
		if d, ok := check.missing(err); ok {
			return d, nil
		}
		return svcproxy.Drift{}, fmt.Errorf("iptables: state check: %w", err)
	}
	d, err := e.deepCheck(ctx)
	if err != nil {
		return svcproxy.Drift{}, fmt.Errorf("iptables: state check: %w", err)
	}
	return d, nil
}

// fixedRulesCheck checks the rules a full sync with cfg for k writes
// whatever the Services: those RenderFor writes for a Ruleset without any.
func fixedRulesCheck(names Names, cfg ruleset.Config, k Kernel) stateCheck {
	var c stateCheck
	table := ""
	for _, line := range strings.Split(string(newRenderer(names, cfg).render(nil, renderOptions{kernel: k})), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			c.add(line, svcproxy.Drift{})
		case line == "COMMIT":
			c.add(line, svcproxy.Drift{})
		case strings.HasPrefix(line, "-A "):
			chain, _, _ := strings.Cut(line[3:], " ")
			c.add("-C"+line[2:], svcproxy.Drift{Kind: svcproxy.DriftRule, What: "a rule of " + table + " " + chain + " (the chain was flushed?)"})
		}
	}
	return c
}

// with returns the check of c followed by that of d.
func (c stateCheck) with(d stateCheck) stateCheck {
	return stateCheck{input: slices.Concat(c.input, d.input), what: slices.Concat(c.what, d.what)}
}
