package flat

import (
	"context"

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
// added or deleted. It returns what it found first, or "" when nothing; a
// full sync, forced with RequestFullSync, repairs it.
//
// Before the first Sync, or after a failed one, there is nothing to
// compare and it returns "".
func (e *Executor) CheckState(ctx context.Context) (string, error) {
	if !e.made() {
		return "", errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return "", nil
	}
	r := newFlatRenderer(e.last.Config(), e.cfg.Options)
	var chains []string
	for _, c := range append(r.flatBaseChains(), r.flatFixedChains()...) {
		chains = append(chains, c.Name)
	}
	var sets []string
	for _, s := range r.flatFixedSets() {
		sets = append(sets, s.Name)
	}
	if missing, err := e.t.CheckNames(ctx, chains, sets); missing != "" || err != nil {
		return missing, err
	}
	if e.t.NL == nil {
		return "", nil
	}
	if e.expectedFor != e.last {
		e.expected, e.expectedFor = expected(e.last, e.cfg.Options), e.last
	}
	slice := e.deepSlice
	e.deepSlice = (e.deepSlice + 1) % deepSlices
	return e.t.DeepCheck(e.expected, slice, deepSlices)
}

// deepSlices is the number of checks that read every chain once between
// them (nftexec.Table.DeepCheck). The flat layout has few chains: one
// check reads them all.
const deepSlices = 1

// expected is what the flat table of rs holds, as DeepCheck compares it:
// the number of rules of every chain, and the digest of the elements of
// every set and map but the dynamic and interval ones.
func expected(rs *ruleset.Ruleset, opts Options) nftexec.Expected {
	_, t, _ := flatTable(rs, opts)
	want := nftexec.Expected{Rules: map[string]int{}, Elements: map[string]nftnl.Digest{}}
	for _, c := range t.Chains {
		want.Rules[c.Name] = len(c.Rules)
	}
	for _, s := range t.Sets {
		if !s.Dynamic && !s.Expiring && s.Timeout == 0 && !s.Interval {
			want.Elements[s.Name] = nftnl.Digest{}
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
