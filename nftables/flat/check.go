package flat

import "context"

// CheckState compares the table in the kernel with what the last Ruleset
// applied left there, cheaply: the base chains and the fixed regular
// chains, which always hold rules, and the fixed sets. Over netlink
// (ExecutorConfig.Netlink) it checks that every one of those chains is
// there and holds rules (a flushed one has none), with one dump per chain
// that the kernel filters to that chain. Without netlink it checks by
// name, through nft's listing, that the chains and sets are there. It
// returns what it found missing first, or "" when nothing is. It reads
// neither the elements of the sets and maps, whose number grows with the
// table, nor the rules of the target groups; a full sync, forced with
// RequestFullSync, rewrites those.
//
// Before the first Sync, or after a failed one, there is nothing to
// compare and it returns "".
func (e *Executor) CheckState(ctx context.Context) (string, error) {
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
	return e.t.CheckNames(ctx, chains, sets)
}
