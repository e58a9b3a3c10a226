package flat

import (
	"context"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/nftexec"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
	"github.com/svcproxy/svcproxy/ruleset"
)

// CheckState compares the table in the kernel with what the last Ruleset
// applied left there. First, cheaply: the base chains and the fixed
// regular chains, which always hold rules, and the fixed sets; over
// netlink (ExecutorConfig.Netlink) that every one of those chains is
// there and holds rules, with one dump per chain that the kernel filters
// to that chain; without netlink, by name through nft's listing, that the
// chains and sets are there. Then, over netlink only, every object: every
// chain (target groups included) with its number of rules and their
// content (one dump per chain, compared with the same chain read right
// after the Executor wrote it), and every set and map, but the affinity
// maps that the packet path fills and the interval sets, which the kernel
// may store as more elements, with its number of elements and their
// content (one dump each, compared with a digest of the elements the
// Ruleset has). A rule or element replaced by another is found as one
// added or deleted. It returns what it found first, classified (the
// table, a chain, a set or a map missing; a chain's rules, among them the
// jumps between the table's chains; a set's or map's elements), or the
// zero Drift when nothing; a full sync, forced with RequestFullSync,
// repairs it.
//
// Before the first Sync, or after a failed one, there is nothing to
// compare and it returns the zero Drift.
func (e *Executor) CheckState(ctx context.Context) (svcproxy.Drift, error) {
	if !e.made() {
		return svcproxy.Drift{}, errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return svcproxy.Drift{}, nil
	}
	r := newFlatRenderer(e.last.Config(), e.cfg.Options)
	var chains []string
	for _, c := range append(r.flatBaseChains(), r.flatFixedChains()...) {
		chains = append(chains, c.Name)
	}
	var sets, maps []string
	for _, s := range r.flatFixedSets() {
		if s.IsMap() {
			maps = append(maps, s.Name)
		} else {
			sets = append(sets, s.Name)
		}
	}
	if missing, err := e.t.CheckNames(ctx, chains, sets, maps); missing.Found() || err != nil {
		return missing, err
	}
	if e.t.NL == nil {
		return svcproxy.Drift{}, nil
	}
	if e.expectedFor != e.last {
		e.expected, e.expectedFor = expected(e.last, e.cfg.Options), e.last
	}
	return e.t.DeepCheck(e.expected)
}

// expected is what the flat table of rs holds, as DeepCheck compares it:
// the number of rules of every chain, and the digest of the elements of
// every set and map but the dynamic and interval ones.
func expected(rs *ruleset.Ruleset, opts Options) nftexec.Expected {
	_, t, _ := flatTable(rs, opts)
	want := nftexec.Expected{Rules: map[string]int{}, Elements: map[string]nftnl.Digest{}, Maps: map[string]bool{}}
	for _, c := range t.Chains {
		want.Rules[c.Name] = len(c.Rules)
	}
	for _, s := range t.Sets {
		if !s.Dynamic && !s.Expiring && s.Timeout == 0 && !s.Interval {
			want.Elements[s.Name] = nftnl.Digest{}
			want.Maps[s.Name] = s.IsMap()
		}
	}
	for i := range t.Elements {
		el := &t.Elements[i]
		if d, ok := want.Elements[el.Set]; ok {
			el.AddDigest(&d, 1)
			want.Elements[el.Set] = d
		}
	}
	want.Sort()
	return want
}
