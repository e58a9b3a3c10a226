package nfttrace

import (
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

// Limits of one evaluation: nft's own limit of nested jumps, and bounds on
// the rules evaluated and the random draws followed, over all draws.
const (
	maxDepth    = 16
	maxSteps    = 1 << 20
	maxBranches = 1 << 16
)

// stage is a netfilter hook on the packet's way.
type stage uint8

const (
	stageStart stage = iota
	stagePrerouting
	stageInput
	stageForward
	stageOutput
	stagePostrouting
	stageLoopPrerouting // a packet from the node to itself, back in over lo
	stageLoopInput
	stageDone
)

var stageHooks = [...]string{
	stagePrerouting: "prerouting", stageInput: "input", stageForward: "forward",
	stageOutput: "output", stagePostrouting: "postrouting",
	stageLoopPrerouting: "prerouting", stageLoopInput: "input",
}

// pktState is what the rules see of the packet, as they change it.
type pktState struct {
	saddr, daddr netip.Addr
	sport, dport uint16
	proto        uint64
	mark         uint64
	dnatted      bool
	// ctDNAT is what `ct status dnat` sees: whether conntrack holds a
	// destination NAT for the flow.
	ctDNAT bool
	// origDaddr and origDport are the destination before any NAT, as
	// `ct original` reads it.
	origDaddr netip.Addr
	origDport uint16
}

type frame struct {
	c    *chain
	next int
	mark uint64 // the packet's mark when the chain was entered
}

// ending is how a branch of the evaluation ended.
type ending uint8

const (
	endAccepted ending = iota + 1
	endDropped
	endFirewalled
	endRejected
)

// branch is the evaluation of the packet for one draw of the random
// numbers (numgen) it meets, with that draw's share of the flows.
type branch struct {
	pkt    pktState
	share  *big.Rat
	stage  stage
	chains []*chain // the base chains of the stage, in order
	ci     int      // the next of them to run
	stack  []frame
	path   Path
	// fork and forkVal: the rule whose numgen this branch has drawn
	// forkVal for.
	fork    *rule
	forkVal uint64
	end     ending
	// ruleMark is the mark the packet had when it entered the current
	// chain, with the mark statements of the current rule applied.
	ruleMark uint64

	// What the rules told about the packet on the way.
	service      servicemap.PortName
	kind         ruleset.FrontendKind
	shortCircuit bool
	affinity     int32 // seconds; 0: no affinity set updated
	dnatMark     uint64
	masquerade   bool
}

func (b *branch) clone() *branch {
	c := *b
	c.stack = slices.Clone(b.stack)
	c.path = slices.Clone(b.path)
	return &c
}

// evaluation is one Evaluate call.
type evaluation struct {
	t        *Table
	p        trace.Packet
	steps    int
	branches uint64
}

var protoNumbers = map[v1.Protocol]uint64{v1.ProtocolTCP: 6, v1.ProtocolUDP: 17, v1.ProtocolSCTP: 132}

// run evaluates every branch of b to its end.
func (ev *evaluation) run(b *branch) ([]*branch, error) {
	work := []*branch{b}
	var done []*branch
	for len(work) > 0 {
		b := work[len(work)-1]
		work = work[:len(work)-1]
		forks, err := ev.runBranch(b)
		if err != nil {
			return nil, err
		}
		if forks == nil {
			done = append(done, b)
			continue
		}
		for i := len(forks) - 1; i >= 0; i-- {
			work = append(work, forks[i])
		}
	}
	return done, nil
}

// runBranch runs b until it ends (nil) or forks on a numgen (the forks).
func (ev *evaluation) runBranch(b *branch) ([]*branch, error) {
	for b.end == 0 {
		if len(b.stack) == 0 {
			ev.nextBaseChain(b)
			continue
		}
		top := len(b.stack) - 1
		f := b.stack[top]
		if f.next >= len(f.c.rules) {
			ev.leave(b)
			continue
		}
		r := f.c.rules[f.next]
		if ev.steps++; ev.steps > maxSteps {
			return nil, fmt.Errorf("nfttrace: more than %d rules evaluated: a loop?", maxSteps)
		}
		// A rule with a numgen not drawn yet runs on a copy of b: if it
		// reaches the numgen, b forks, each fork running the rule again
		// with its draw; if a match fails before, b takes the copy's state.
		cur := b
		if r.numgen != nil && b.fork != r {
			cur = b.clone()
		}
		cur.stack[top].next++
		v, matched, draw, err := ev.evalRule(cur, r)
		if err != nil {
			return nil, fmt.Errorf("nfttrace: chain %s, line %d: %w", f.c.name, r.line, err)
		}
		if draw {
			if ev.branches += r.numgen.mod; ev.branches > maxBranches {
				return nil, fmt.Errorf("nfttrace: chain %s, line %d: more than %d random draws to follow", f.c.name, r.line, maxBranches)
			}
			return ev.forkOn(b, r), nil
		}
		if cur != b {
			*b = *cur
		}
		b.fork = nil
		if !matched {
			continue
		}
		if err := ev.apply(b, v); err != nil {
			return nil, fmt.Errorf("nfttrace: chain %s, line %d: %w", f.c.name, r.line, err)
		}
	}
	return nil, nil
}

// forkOn splits b into one branch per value of r's numgen.
func (ev *evaluation) forkOn(b *branch, r *rule) []*branch {
	n := r.numgen.mod
	forks := make([]*branch, n)
	for v := range n {
		c := b.clone()
		c.fork, c.forkVal = r, v+r.numgen.off
		c.share = new(big.Rat).Mul(b.share, big.NewRat(1, int64(n)))
		forks[v] = c
	}
	return forks
}

// nextBaseChain starts the next base chain of the stage, or the next
// stage.
func (ev *evaluation) nextBaseChain(b *branch) {
	if b.ci < len(b.chains) {
		c := b.chains[b.ci]
		b.ci++
		b.stack = append(b.stack, frame{c: c, mark: b.pkt.mark})
		return
	}
	b.stage = ev.nextStage(b)
	if b.stage == stageDone {
		b.end = endAccepted
		return
	}
	b.chains, b.ci = ev.t.baseChains(stageHooks[b.stage], b.stage != stageLoopPrerouting), 0
}

// nextStage is the hook the packet reaches after b's: arriving, prerouting,
// then input (to the node) or forward and postrouting; from the node,
// output and postrouting, then (to the node itself) prerouting (where the
// NAT of the flow is already chosen) and input.
func (ev *evaluation) nextStage(b *branch) stage {
	local := !b.pkt.dnatted && (ev.p.ToNode || b.pkt.daddr.IsLoopback())
	switch b.stage {
	case stageStart:
		if ev.p.FromNode {
			return stageOutput
		}
		return stagePrerouting
	case stagePrerouting:
		if local {
			return stageInput
		}
		return stageForward
	case stageForward, stageOutput:
		return stagePostrouting
	case stagePostrouting:
		if ev.p.FromNode && local {
			return stageLoopPrerouting
		}
	case stageLoopPrerouting:
		return stageLoopInput
	}
	return stageDone
}

// baseChains are the base chains of hook in the order they run (see
// hookChains); withNAT false leaves out the nat chains.
func (t *Table) baseChains(hook string, withNAT bool) []*chain {
	cs := t.hooks[hook]
	if withNAT {
		return cs
	}
	return slices.DeleteFunc(slices.Clone(cs), func(c *chain) bool { return c.base.typ == "nat" })
}

// hookChains orders the base chains of each hook: by priority, then in the
// order they were added.
func (t *Table) hookChains() map[string][]*chain {
	hooks := map[string][]*chain{}
	for _, name := range t.order {
		if c := t.chains[name]; c != nil && c.base != nil {
			hooks[c.base.hook] = append(hooks[c.base.hook], c)
		}
	}
	for _, cs := range hooks {
		slices.SortStableFunc(cs, func(a, b *chain) int { return a.base.priority - b.base.priority })
	}
	return hooks
}

// apply carries out a verdict of the rule just evaluated.
func (ev *evaluation) apply(b *branch, v verdict) error {
	switch v.kind {
	case verdictNone:
	case verdictAccept:
		b.stack = b.stack[:0]
	case verdictDrop:
		b.end = endDropped
		if b.inFirewall() {
			b.end = endFirewalled
		}
	case verdictReject:
		b.end = endRejected
	case verdictReturn:
		ev.leave(b)
	case verdictJump, verdictGoto:
		if v.kind == verdictGoto {
			b.stack = b.stack[:len(b.stack)-1]
		}
		if len(b.stack) >= maxDepth {
			return fmt.Errorf("%s: more than %d nested jumps", v, maxDepth)
		}
		c := ev.t.chains[v.chain]
		b.stack = append(b.stack, frame{c: c, mark: b.pkt.mark})
		b.noteChain(c.name)
	}
	return nil
}

// leave returns from the innermost chain; leaving a base chain applies its
// policy.
func (ev *evaluation) leave(b *branch) {
	b.stack = b.stack[:len(b.stack)-1]
	if base := b.chains[b.ci-1]; len(b.stack) == 0 && base.base.policy == verdictDrop {
		b.path = append(b.path, Step{Hook: stageHooks[b.stage], Chain: base.name, Rule: "policy drop"})
		b.end = endDropped
	}
}

// inFirewall reports whether the chain that drops is a firewall chain:
// kube-proxy's firewall-check or a Service's firewall-… chain.
func (b *branch) inFirewall() bool {
	for _, f := range b.stack {
		if f.c.name == "firewall-check" || strings.HasPrefix(f.c.name, prefixFirewall) {
			return true
		}
	}
	return false
}

// noteChain takes the Service port out of a per-service chain's name, if
// none is known yet.
func (b *branch) noteChain(name string) {
	if b.service.Name != "" {
		return
	}
	if pn, ok := serviceOfChain(name); ok {
		b.service = pn
	}
}
