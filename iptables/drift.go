package iptables

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// deepCheckShare bounds the time the deep check takes: after a check that
// took d, the next waits at least d/deepCheckShare - d, so that it never
// takes more than this share of the time (5 %), whatever the size of the
// tables.
const deepCheckShare = 0.05

// chainDigest is what the deep check compares of one chain of ours: its
// number of rules and a hash of their targets (-j or -g) in order. It
// reads every rule without depending on how iptables-save prints matches
// and numbers, which differs from the restore input.
type chainDigest struct {
	rules   int
	targets uint64
}

// tablesDigest is the digest of the filter and nat tables as far as they
// are ours: each chain of ours by "table chain", and the jumps from the
// built-in chains to ours, "table from to".
type tablesDigest struct {
	chains map[string]chainDigest
	jumps  map[string]bool
}

// digester builds a tablesDigest from iptables-save or iptables-restore
// text, written to it in pieces of any size.
type digester struct {
	names   Names
	table   string
	partial []byte
	d       tablesDigest
	// hashes are the running hashes of each chain's targets.
	hashes map[string]*fnvState
}

type fnvState struct{ h uint64 }

func (s *fnvState) add(target string) {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(s.h >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(target))
	s.h = h.Sum64()
}

func newDigester(names Names) *digester {
	return &digester{names: names, d: tablesDigest{chains: map[string]chainDigest{}, jumps: map[string]bool{}}, hashes: map[string]*fnvState{}}
}

func (g *digester) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			g.partial = append(g.partial, p...)
			break
		}
		if len(g.partial) > 0 {
			g.line(string(append(g.partial, p[:i]...)))
			g.partial = g.partial[:0]
		} else {
			g.line(string(p[:i]))
		}
		p = p[i+1:]
	}
	return n, nil
}

// digest returns what was written, once all of it was.
func (g *digester) digest() tablesDigest {
	if len(g.partial) > 0 {
		g.line(string(g.partial))
		g.partial = nil
	}
	for key, s := range g.hashes {
		c := g.d.chains[key]
		c.targets = s.h
		g.d.chains[key] = c
	}
	return g.d
}

// builtin are the built-in chains that jump to ours.
var builtin = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

func (g *digester) line(s string) {
	switch {
	case strings.HasPrefix(s, "*"):
		g.table = s[1:]
	case strings.HasPrefix(s, ":"):
		chain, _, _ := strings.Cut(s[1:], " ")
		if g.names.Owns(chain) {
			key := g.table + " " + chain
			if _, ok := g.d.chains[key]; !ok {
				g.d.chains[key] = chainDigest{}
			}
		}
	case strings.HasPrefix(s, "-A "):
		chain, rule, _ := strings.Cut(s[3:], " ")
		target := ruleTarget(rule)
		if g.names.Owns(chain) {
			key := g.table + " " + chain
			c := g.d.chains[key]
			c.rules++
			g.d.chains[key] = c
			st := g.hashes[key]
			if st == nil {
				st = &fnvState{}
				g.hashes[key] = st
			}
			st.add(target)
		} else if slices.Contains(builtin, chain) && g.names.Owns(target) {
			g.d.jumps[g.table+" "+chain+" "+target] = true
		}
	}
}

// ruleTarget is the target of a rule (the word after -j or -g), "" when
// it has none.
func ruleTarget(rule string) string {
	i := strings.Index(rule, "-j ")
	if j := strings.Index(rule, "-g "); i < 0 || j >= 0 && j < i {
		i = j
	}
	if i < 0 || i > 0 && rule[i-1] != ' ' {
		return ""
	}
	target, _, _ := strings.Cut(rule[i+3:], " ")
	return target
}

// expectedDigest is the digest of the tables a full sync of rs leaves:
// what Render writes, the Canary chains, and the jumps from the built-in
// chains.
func expectedDigest(names Names, rs *ruleset.Ruleset, k Kernel) tablesDigest {
	g := newDigester(names)
	g.Write(renderFull(names, rs, renderOptions{canary: true, kernel: k}))
	d := g.digest()
	for _, j := range jumps {
		d.jumps[j.table+" "+j.from+" "+j.to(names)] = true
	}
	return d
}

// compare says the first difference between the kernel's digest and the
// expected one, in name order, the zero Drift when there is none.
func (want tablesDigest) compare(got tablesDigest) svcproxy.Drift {
	for _, key := range slicesSorted(want.chains) {
		w := want.chains[key]
		g, ok := got.chains[key]
		switch {
		case !ok:
			return svcproxy.Drift{Kind: svcproxy.DriftChain, What: "chain " + key + " is missing"}
		case g.rules != w.rules:
			return svcproxy.Drift{Kind: svcproxy.DriftRule, What: fmt.Sprintf("chain %s has %d rules, want %d", key, g.rules, w.rules)}
		case g.targets != w.targets:
			return svcproxy.Drift{Kind: svcproxy.DriftRule, What: "chain " + key + " jumps elsewhere than it should"}
		}
	}
	for _, key := range slicesSorted(got.chains) {
		if _, ok := want.chains[key]; !ok {
			return svcproxy.Drift{Kind: svcproxy.DriftChain, What: "chain " + key + " should not be there"}
		}
	}
	for _, key := range slicesSorted(want.jumps) {
		if !got.jumps[key] {
			from, to, _ := strings.Cut(key[strings.IndexByte(key, ' ')+1:], " ")
			return svcproxy.Drift{Kind: svcproxy.DriftJump, What: "the jump from " + key[:strings.IndexByte(key, ' ')] + " " + from + " to " + to + " is missing"}
		}
	}
	return svcproxy.Drift{}
}

func slicesSorted[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// deepCheck reads the tables with one iptables-save (iptables-nft reads
// every table whatever -t says, so one run costs what one of -t nat
// costs) and compares every chain of ours in filter and nat and every
// jump into them with what a full sync of e.last leaves, when its cost
// allows (deepCheckShare). It returns the first difference, the zero
// Drift when there is none or the check is not due.
func (e *Executor) deepCheck(ctx context.Context) (svcproxy.Drift, error) {
	if time.Now().Before(e.deepDue) {
		return svcproxy.Drift{}, nil
	}
	// The cost is CPU time where it can be told: the tool's, and this
	// process's rendering and parsing (timed while it runs, which on a
	// loaded machine counts some waiting too).
	var cost time.Duration
	start := time.Now()
	if e.want == nil || e.wantFor != e.last {
		d := expectedDigest(e.names, e.last, e.kernel)
		e.want, e.wantFor = &d, e.last
	}
	cost += time.Since(start)
	g := &timedWriter{w: newDigester(e.names)}
	var toolCPU time.Duration
	saveStart := time.Now()
	if err := e.runner.Run(ctx, Command{Name: e.saveTool, Stdout: g, CPU: &toolCPU}); err != nil {
		return svcproxy.Drift{}, fmt.Errorf("reading the tables: %w", err)
	}
	if toolCPU == 0 {
		toolCPU = time.Since(saveStart) - g.busy // a Runner that cannot tell
	}
	parse := time.Now()
	missing := e.want.compare(g.w.(*digester).digest())
	cost += toolCPU + g.busy + time.Since(parse)
	e.lastDeepCost = cost
	e.deepDue = time.Now().Add(time.Duration(float64(cost)/deepCheckShare) - cost)
	return missing, nil
}

// timedWriter is a Writer that counts the time spent in its Writes.
type timedWriter struct {
	w    io.Writer
	busy time.Duration
}

func (t *timedWriter) Write(p []byte) (int, error) {
	start := time.Now()
	n, err := t.w.Write(p)
	t.busy += time.Since(start)
	return n, err
}
