package nftables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"sigs.k8s.io/knftables"
)

// CheckState compares the table in the kernel with what the last Ruleset
// applied left there, cheaply. In the flat layout (Options.Layout) the
// chains and sets are the flat table's fixed ones. Over netlink (ExecutorConfig.Netlink) it
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
	if !e.made() {
		return "", errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		return "", nil
	}
	if e.cfg.Options.Layout == LayoutFlat {
		return e.checkFlat(ctx)
	}
	r, err := newRenderer(e.last.Config(), e.cfg.Options)
	if err != nil {
		return "", err
	}
	fixed := append(fixedChains[:len(fixedChains):len(fixedChains)], baseChainNames()...)
	return e.checkNames(ctx, fixed, r.fixedSetsAndMaps())
}

// checkNames is CheckState once the names are known: the chains, which
// must hold rules, and the sets or maps that must be there.
func (e *Executor) checkNames(ctx context.Context, chains, sets []string) (string, error) {
	if e.nl != nil {
		family := newEncoder(Family(e.cfg.Family)).family
		for _, c := range chains {
			n, err := e.nl.RuleCount(family, e.table, c)
			switch {
			case errors.Is(err, syscall.ENOENT):
				return "chain " + c + " (or table " + e.table + ")", nil
			case err != nil:
				return "", fmt.Errorf("nftables: checking the table: %w", err)
			case n == 0:
				return "the rules of chain " + c, nil
			}
		}
		return "", nil
	}
	names, err := e.listAll(ctx)
	switch {
	case knftables.IsNotFound(err), err == nil && len(names["chain"]) == 0:
		return "table " + e.table, nil
	case err != nil:
		return "", fmt.Errorf("nftables: checking the table: %w", err)
	}
	for _, kind := range []string{"chain", "set", "map"} {
		slices.Sort(names[kind])
	}
	has := func(kind, name string) bool { _, ok := slices.BinarySearch(names[kind], name); return ok }
	for _, c := range chains {
		if !has("chain", c) {
			return "chain " + c, nil
		}
	}
	for _, name := range sets {
		if !has("set", name) && !has("map", name) {
			return "set or map " + name, nil
		}
	}
	return "", nil
}

// baseChainNames are the names of the base chains.
func baseChainNames() []string {
	names := make([]string, len(baseChains))
	for i, b := range baseChains {
		names[i] = b.Name
	}
	return names
}
