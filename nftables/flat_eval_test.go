package nftables_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/trace"
)

// flatEval runs a first packet through a typed flat-layout table as the
// kernel would, hook by hook, for the statements that layout uses: the
// executable reading of the rendered table that the property test
// compares with trace.Trace.
type flatEval struct {
	t      *model.Table
	chains map[string]*model.Chain
	elems  map[string][]model.Element
}

func newFlatEval(t *model.Table) *flatEval {
	ev := &flatEval{t: t, chains: map[string]*model.Chain{}, elems: map[string][]model.Element{}}
	for _, c := range t.Chains {
		ev.chains[c.Name] = c
	}
	for _, e := range t.Elements {
		ev.elems[e.Set] = append(ev.elems[e.Set], e)
	}
	return ev
}

// evalPacket is the state of the packet the rules see.
type evalPacket struct {
	proto            uint8
	src, dst         netip.Addr
	dport            uint16
	fromNode, toNode bool
	mark             uint32
	dnat             bool
}

func (p *evalPacket) field(f model.Field) model.Datum {
	switch f {
	case model.IPDaddr, model.IP6Daddr:
		return model.Addr(p.dst)
	case model.IPSaddr, model.IP6Saddr:
		return model.Addr(p.src)
	case model.THDport:
		return model.Port(p.dport)
	case model.L4Proto:
		return model.Proto(p.proto)
	}
	panic(fmt.Sprintf("field %v not evaluated", f))
}

// key evaluates the fields of a key; numgen (which must come last) is
// index.
func (p *evalPacket) key(es []model.Expr, index uint32) []model.Datum {
	out := make([]model.Datum, len(es))
	for i, e := range es {
		switch e := e.(type) {
		case model.Field:
			out[i] = p.field(e)
		case model.Numgen:
			out[i] = model.Int(index)
		default:
			panic(fmt.Sprintf("expression %T not evaluated", e))
		}
	}
	return out
}

// lookup finds the element of set whose key key falls in.
func (ev *flatEval) lookup(set string, key []model.Datum) (model.Element, bool) {
	for _, e := range ev.elems[set] {
		if len(e.Key) != len(key) {
			panic(fmt.Sprintf("set %s: key %v for elements %v", set, key, e.Key))
		}
		match := true
		for i := range key {
			match = match && e.Key[i].Matches(key[i])
		}
		if match {
			return e, true
		}
	}
	return model.Element{}, false
}

// outcome is what a chain decided: a verdict ("drop", "reject", "dnat",
// "masquerade"; "" to go on) and the DNAT targets.
type outcome struct {
	verdict string
	targets []netip.AddrPort
}

// run evaluates a chain: its rules in order, jumps into other chains.
func (ev *flatEval) run(chain string, p *evalPacket) outcome {
	c, ok := ev.chains[chain]
	if !ok {
		panic("no chain " + chain)
	}
rules:
	for _, r := range c.Rules {
		for _, s := range r.Stmts {
			out, next := ev.stmt(s, p)
			switch {
			case next:
				continue rules
			case out.verdict == "return":
				return outcome{}
			case out.verdict != "":
				return out
			}
		}
	}
	return outcome{}
}

// stmt evaluates one statement: next reports that the rule ends here
// (a match failed), out a verdict.
func (ev *flatEval) stmt(s model.Stmt, p *evalPacket) (out outcome, next bool) {
	switch s := s.(type) {
	case model.InSet:
		_, found := ev.lookup(s.Set, p.key(s.Key, 0))
		return outcome{}, found == s.Neg
	case model.Equal:
		return outcome{}, s.Value.Matches(p.field(s.Field)) == s.Neg
	case model.FibLocal:
		if s.Saddr {
			return outcome{}, !p.fromNode
		}
		return outcome{}, !(p.toNode || p.dst.IsLoopback())
	case model.CtNew:
		return outcome{}, false
	case model.CtDNAT:
		return outcome{}, !p.dnat
	case model.MarkClear:
		return outcome{}, p.mark&s.Bits != 0
	case model.MarkOr:
		p.mark |= s.Bits
	case model.MarkXor:
		p.mark ^= s.Bits
	case model.DNATMap:
		return ev.dnat(s, p)
	case model.Masquerade:
		return outcome{verdict: "masquerade"}, false
	case model.Verdict:
		if s.Kind == "jump" {
			return ev.run(s.Chain, p), false
		}
		return outcome{verdict: s.Kind}, false
	default:
		panic(fmt.Sprintf("statement %T not evaluated", s))
	}
	return outcome{}, false
}

// dnat collects the targets of every value numgen may take.
func (ev *flatEval) dnat(s model.DNATMap, p *evalPacket) (outcome, bool) {
	mod := s.Key[len(s.Key)-1].(model.Numgen).Mod
	var targets []netip.AddrPort
	for i := range mod {
		e, ok := ev.lookup(s.Map, p.key(s.Key, i))
		if !ok {
			return outcome{}, true
		}
		ap, ok := model.AddrPort(e.Value)
		if !ok {
			panic(fmt.Sprintf("map %s: value %v", s.Map, e.Value))
		}
		targets = append(targets, ap)
	}
	return outcome{verdict: "dnat", targets: targets}, false
}

// flatResult is the evaluated fate of a packet: trace's Result, and for a
// forwarded packet its targets with whether each is masqueraded.
type flatResult struct {
	Result  trace.Result
	Targets []flatTarget
}

type flatTarget struct {
	Endpoint   netip.AddrPort
	Masquerade bool
}

// packet runs p through the hooks a new flow crosses: the firewall before
// DNAT, DNAT, the filter checks of a packet not translated, and
// postrouting for each target.
func (ev *flatEval) packet(p trace.Packet) flatResult {
	proto := map[v1.Protocol]uint8{v1.ProtocolTCP: 6, v1.ProtocolUDP: 17, v1.ProtocolSCTP: 132}[p.Protocol]
	pk := evalPacket{proto: proto, src: p.Src.Addr(), dst: p.Dst.Addr(), dport: p.Dst.Port(), fromNode: p.FromNode, toNode: p.ToNode}
	pre, nat := "filter-prerouting-pre", "nat-prerouting"
	if p.FromNode {
		pre, nat = "filter-output-pre", "nat-output"
	}
	if ev.run(pre, &pk).verdict == "drop" {
		return flatResult{Result: trace.Firewalled}
	}
	out := ev.run(nat, &pk)
	if out.verdict != "dnat" {
		return flatResult{Result: ev.filter(pk)}
	}
	res := flatResult{Result: trace.Forwarded}
	for _, tgt := range out.targets {
		post := pk
		post.dst, post.dport, post.dnat = tgt.Addr(), tgt.Port(), true
		res.Targets = append(res.Targets, flatTarget{Endpoint: tgt, Masquerade: ev.run("nat-postrouting", &post).verdict == "masquerade"})
	}
	return res
}

// filter is the fate of a packet that no rule translated, in the filter
// hooks it crosses: output (from the node), input (to the node), forward.
func (ev *flatEval) filter(pk evalPacket) trace.Result {
	var hooks []string
	switch {
	case pk.fromNode:
		hooks = append(hooks, "filter-output")
		if pk.toNode || pk.dst.IsLoopback() {
			hooks = append(hooks, "filter-input")
		}
	case pk.toNode:
		hooks = []string{"filter-input"}
	default:
		hooks = []string{"filter-forward"}
	}
	for _, h := range hooks {
		switch ev.run(h, &pk).verdict {
		case "reject":
			return trace.Rejected
		case "drop":
			return trace.Dropped
		}
	}
	return trace.NotService
}
