package nftables

import (
	"context"
)

// CheckState compares the table in the kernel with what the last Ruleset
// applied left there, cheaply. Over netlink (ExecutorConfig.Netlink) it
// checks that every fixed and base chain is there and holds rules (a
// flushed one has none), with one dump per chain that the kernel filters to
// that chain. Without netlink it checks by name, through nft's listing,
// that the fixed and base chains and the fixed sets and maps are there. It
// returns
// what it found missing first, or "" when nothing is. It reads neither the
// rules of the Service ports' chains nor the elements of the maps, whose
// number grows with the table; a full sync, forced with RequestFullSync,
// rewrites those.
//
// Before the first Sync, or after a failed one, there is nothing to compare
// and it returns "".
func (e *Executor) CheckState(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return "", nil
	}
	r, err := newRenderer(e.last.Config(), e.cfg.Options)
	if err != nil {
		return "", err
	}
	fixed := append(fixedChains[:len(fixedChains):len(fixedChains)], baseChainNames()...)
	return e.t.CheckNames(ctx, fixed, r.fixedSetsAndMaps())
}

// baseChainNames are the names of the base chains.
func baseChainNames() []string {
	names := make([]string, len(baseChains))
	for i, b := range baseChains {
		names[i] = b.Name
	}
	return names
}
