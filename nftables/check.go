package nftables

import (
	"context"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/nftexec"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
	"github.com/svcproxy/svcproxy/ruleset"
)

// CheckState compares the table in the kernel with what the last Ruleset
// applied left there. First, cheaply: over netlink
// (ExecutorConfig.Netlink) that every fixed and base chain is there and
// holds rules, with one dump per chain that the kernel filters to that
// chain; without netlink, by name through nft's listing, that the fixed
// and base chains and the fixed sets and maps are there. Then, over
// netlink only, every object: every
// chain the Ruleset has, with its number of rules and their content (one
// dump per chain, compared with the same chain read right after the
// Executor wrote it), and every set and map, but the affinity sets that
// the packet path fills, with its number of elements and their content
// (one dump each, compared with a digest of the elements the Ruleset
// has). A rule or element replaced by another is found as one added or
// deleted. A chain the Executor could not read right after writing it is
// read by the first check that reads it, which cannot tell a change made
// in between. It returns what it found first, classified (the table,
// a chain, a set or a map missing; a chain's rules, among them the jumps
// between the table's chains; a set's or map's elements), or the zero
// Drift when nothing; a full sync, forced with RequestFullSync, repairs
// it.
//
// Before the first Sync, or after a failed one, there is nothing to compare
// and it returns the zero Drift.
func (e *Executor) CheckState(ctx context.Context) (svcproxy.Drift, error) {
	if !e.made() {
		return svcproxy.Drift{}, errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return svcproxy.Drift{}, nil
	}
	r, err := newRenderer(e.last.Config(), e.cfg.Options)
	if err != nil {
		return svcproxy.Drift{}, err
	}
	fixed := append(fixedChains[:len(fixedChains):len(fixedChains)], baseChainNames()...)
	var sets, maps []string
	for _, name := range r.fixedSetsAndMaps() {
		if fixedKind(name) == "set" {
			sets = append(sets, name)
		} else {
			maps = append(maps, name)
		}
	}
	if missing, err := e.t.CheckNames(ctx, fixed, sets, maps); missing.Found() || err != nil {
		return missing, err
	}
	if e.t.NL == nil {
		return svcproxy.Drift{}, nil
	}
	if e.expectedFor != e.last {
		want, err := expected(e.last, e.cfg.Options)
		if err != nil {
			return svcproxy.Drift{}, err
		}
		e.expected, e.expectedFor = want, e.last
	}
	return e.t.DeepCheck(e.expected)
}

// expected is what a full sync of rs into an empty table leaves there, as
// DeepCheck compares it: the number of rules of every chain, and the
// digest of the elements of every set and map but the affinity sets.
func expected(rs *ruleset.Ruleset, opts Options) (nftexec.Expected, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return nftexec.Expected{}, err
	}
	rec := newRecorder(r)
	none := func(string) bool { return false }
	r.fixed(rec, none, false)
	newFullState(r, rs, &Result{}, none, false).services(rec, rs.Services())
	want := nftexec.Expected{Rules: map[string]int{}, Elements: map[string]nftnl.Digest{}, Maps: map[string]bool{}}
	counted := map[string]bool{}
	for _, o := range rec.ops {
		switch o.kind {
		case kindChain:
			switch o.verb {
			case opAdd:
				want.Rules[o.chain.Name] += 0
			case opFlush:
				want.Rules[o.chain.Name] = 0
			case opDelete:
				delete(want.Rules, o.chain.Name)
			}
		case kindRule:
			want.Rules[o.chain.Name]++
		case kindSet, kindMap:
			s := o.set
			if s.Dynamic || s.Expiring || s.Timeout > 0 || s.Interval {
				continue
			}
			switch o.verb {
			case opAdd:
				counted[s.Name] = true
				if _, ok := want.Elements[s.Name]; !ok {
					want.Elements[s.Name] = nftnl.Digest{}
				}
				want.Maps[s.Name] = o.kind == kindMap
			case opFlush:
				want.Elements[s.Name] = nftnl.Digest{}
			case opDelete:
				counted[s.Name] = false
				delete(want.Elements, s.Name)
				delete(want.Maps, s.Name)
			}
		case kindSetElement, kindMapElement:
			if !counted[o.elem.Set] {
				continue
			}
			sign := 1
			if o.verb != opAdd {
				sign = -1
			}
			d := want.Elements[o.elem.Set]
			o.elem.AddDigest(&d, sign)
			want.Elements[o.elem.Set] = d
		}
	}
	want.Sort()
	return want, nil
}

// learnWritten has the table read the rules of the chains that ops,
// just applied, wrote, for the deep check to compare them with later
// (nftexec.Table.LearnRules), and forget the chains ops deleted.
func (e *Executor) learnWritten(ops []op) {
	if e.t.NL == nil {
		return
	}
	deleted := map[string]bool{}
	for _, o := range ops {
		if o.kind == kindChain || o.kind == kindRule {
			deleted[o.chain.Name] = o.kind == kindChain && o.verb == opDelete
		}
	}
	var learn, forget []string
	for name, del := range deleted {
		if del {
			forget = append(forget, name)
		} else {
			learn = append(learn, name)
		}
	}
	e.t.ForgetChains(forget)
	e.t.LearnRules(learn)
}

// baseChainNames are the names of the base chains.
func baseChainNames() []string {
	names := make([]string, len(baseChains))
	for i, b := range baseChains {
		names[i] = b.Name
	}
	return names
}
