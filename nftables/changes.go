package nftables

import (
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// RenderChanges adds to tx the operations that turn the table that holds old
// (as Render or RenderChanges left it) into one that holds new, touching
// only the Service ports that differ: their map and set elements, their
// chains whose rules differ, their affinity sets. The number of operations
// depends on the changed Service ports alone, not on how many others the
// table holds. So does the time it takes (times log n, for lookups) when new
// was made from old by ruleset.Builder.Update: ruleset.Diff then follows the
// Update's changes, and the owner of each element comes from the Rulesets'
// Frontend index (ruleset.Ruleset.ServicesAt). For unrelated Rulesets, Diff
// compares every Service.
//
// Chains that only the old state used are flushed and listed in
// Result.Stale. deleteChains are chains that earlier transactions flushed as
// stale (after at least a second, see Result.Stale); those that new does not
// use again are deleted.
//
// It returns ErrFullSyncNeeded when old is nil or was built with another
// Config. It is pure: it only appends to tx.
func RenderChanges(tx *knftables.Transaction, old, new *ruleset.Ruleset, opts Options, deleteChains []string) (Result, error) {
	return renderChanges(tx, old, new, opts, deleteChains)
}

func renderChanges(tx txWriter, old, new *ruleset.Ruleset, opts Options, deleteChains []string) (Result, error) {
	if old == nil {
		return Result{}, fmt.Errorf("%w: no previous ruleset", ErrFullSyncNeeded)
	}
	diff := ruleset.Diff(old, new)
	if diff.ConfigChanged {
		return Result{}, fmt.Errorf("%w: the ruleset config changed", ErrFullSyncNeeded)
	}
	r, err := newRenderer(new.Config(), opts)
	if err != nil {
		return Result{}, err
	}
	var res Result

	names := slices.Concat(diff.Added, diff.Changed, diff.Removed)
	slices.SortFunc(names, servicemap.PortName.Compare)

	type change struct {
		after                *ruleset.Service
		oldChains, newChains []chainDef
		oldSets, newSets     []setDef
		// recreated: an affinity set changes (its timeout), so it is
		// deleted and added again, and every chain that refers to it
		// must be flushed first and written again.
		recreated bool
	}
	changes := make([]change, 0, len(names))
	touched := map[elemKey]bool{}
	var order []elemKey
	touch := func(k elemKey, _ verdict) {
		if !touched[k] {
			touched[k] = true
			order = append(order, k)
		}
	}
	for _, name := range names {
		var c change
		if s, ok := old.Service(name); ok && safeName(name) {
			c.oldChains = r.chains(s)
			c.oldSets = r.affinitySets(s)
			r.elements(s, touch)
		}
		if s, ok := new.Service(name); ok {
			if !safeName(name) {
				res.Warnings = append(res.Warnings, unsafeWarning(s))
			} else {
				c.after = s
				c.newChains = r.chains(s)
				c.newSets = r.affinitySets(s)
				r.elements(s, touch)
			}
		}
		oldSets := setsByName(c.oldSets)
		for _, set := range c.newSets {
			if o, ok := oldSets[set.name]; ok && o != set {
				c.recreated = true
			}
		}
		changes = append(changes, c)
	}

	// Who owns each touched element before and after: the first Service
	// port, in name order, that claims it.
	oldClaims := owners(r, old, order)
	newClaims := owners(r, new, order)

	// Phase 1: remove what refers to objects that change: flush the chains
	// whose rules change (or that go away), delete the elements that change
	// or go away.
	for i := range changes {
		c := &changes[i]
		newChains := chainsByName(c.newChains)
		for _, oc := range c.oldChains {
			nc, kept := newChains[oc.name]
			if kept && !c.recreated && slices.Equal(oc.rules, nc.rules) {
				continue
			}
			tx.Flush(r.chain(oc.name))
			if !kept {
				res.Stale = append(res.Stale, oc.name)
			}
		}
	}
	for _, k := range order {
		o, hadOld := oldClaims[k]
		n, hasNew := newClaims[k]
		if hadOld && !(hasNew && o.same(n)) {
			tx.Delete(r.elementKey(k))
		}
	}

	// Phase 2: affinity sets that go away or change.
	for i := range changes {
		c := &changes[i]
		newSets := setsByName(c.newSets)
		for _, s := range c.oldSets {
			if n, ok := newSets[s.name]; !ok || n != s {
				tx.Delete(&knftables.Set{Family: r.family, Table: r.table, Name: s.name})
			}
		}
	}

	// Phase 3: new objects, then the rules of new and changed chains.
	for i := range changes {
		c := &changes[i]
		oldSets := setsByName(c.oldSets)
		for _, s := range c.newSets {
			if o, ok := oldSets[s.name]; !ok || o != s {
				tx.Add(r.set(s))
			}
		}
		// A chain the old state did not use does not exist, or is a
		// stale one, flushed already.
		oldChains := chainsByName(c.oldChains)
		for _, nc := range c.newChains {
			if _, ok := oldChains[nc.name]; !ok {
				tx.Add(r.chain(nc.name))
			}
		}
		for _, nc := range c.newChains {
			oc, ok := oldChains[nc.name]
			if ok && !c.recreated && slices.Equal(oc.rules, nc.rules) {
				continue
			}
			r.writeRules(tx, nc)
		}
		if c.after != nil {
			r.elements(c.after, func(k elemKey, _ verdict) {
				if owner := newClaims[k].owner; k.c != cClusterIPs && owner != nil && owner != c.after {
					res.Warnings = append(res.Warnings, conflictWarning(c.after, k, owner))
				}
			})
		}
	}

	// Phase 4: elements that are new or changed.
	for _, k := range order {
		o, hadOld := oldClaims[k]
		n, hasNew := newClaims[k]
		if hasNew && !(hadOld && o.same(n)) {
			tx.Add(r.element(k, n))
		}
	}

	// Phase 5: chains flushed by earlier transactions and not used again.
	stale := map[string]bool{}
	for _, name := range res.Stale {
		stale[name] = true
	}
	for _, name := range deleteChains {
		if stale[name] || usedBy(r, new, name) {
			continue
		}
		tx.Delete(r.chain(name))
		res.Deleted = append(res.Deleted, name)
	}
	return res, nil
}

// usedBy reports whether a chain belongs to rs, by the ServicePort named in
// the chain.
func usedBy(r *renderer, rs *ruleset.Ruleset, chain string) bool {
	name, ok := serviceOfChain(chain)
	if !ok {
		return slices.Contains(fixedChains, chain) || slices.ContainsFunc(baseChains[:], func(b baseChain) bool { return b.name == chain })
	}
	s, ok := rs.Service(name)
	if !ok {
		return false
	}
	for _, c := range r.chains(s) {
		if c.name == chain {
			return true
		}
	}
	return false
}
