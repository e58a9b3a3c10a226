package nftables

import (
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/names"
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
// Update's changes, and the owner of each element is the owner of its
// frontend (ruleset.Ruleset.Owner). For unrelated Rulesets, Diff
// compares every Service. One exception to the time: when an endpoint on
// this node starts or stops being a target of the changed ports, whether
// another port still needs its hairpin-connections element takes one pass
// over the new Ruleset.
//
// Chains that only the old state used are flushed and listed in
// Result.Stale. deleteChains are chains that earlier transactions flushed as
// stale (after at least a second, see Result.Stale); those that new does not
// use again are deleted.
//
// It returns svcproxy.ErrFullSyncNeeded when old is nil or was built with another
// Config. It is pure: it only appends to tx.
func RenderChanges(tx *knftables.Transaction, old, new *ruleset.Ruleset, opts Options, deleteChains []string) (Result, error) {
	return renderChanges(func(r *renderer) txWriter { return r.knftWriter(tx) }, old, new, opts, deleteChains)
}

// renderChanges is RenderChanges into the transaction that tx makes for
// the renderer.
func renderChanges(tx func(*renderer) txWriter, old, new *ruleset.Ruleset, opts Options, deleteChains []string) (Result, error) {
	_, res, err := renderChangesChunked(tx, old, new, opts, deleteChains, 0)
	return res, err
}

// renderChangesChunked writes what RenderChanges writes, in transactions
// made by newTx of at most chunk changed Service ports each (chunk < 1: one
// transaction), so that the kernel never has to commit one transaction of
// a change of thousands of ports. Each transaction leaves every Service
// port as old or as new has it: the changed ports that share a map or set
// element (a cluster IP, a frontend that two ports claim) go in the same
// transaction, which may then hold more than chunk ports. The stale chains
// of deleteChains are deleted by the last transaction. With one
// transaction, the operations are RenderChanges' own.
func renderChangesChunked[T txWriter](newTx func(*renderer) T, old, new *ruleset.Ruleset, opts Options, deleteChains []string, chunk int) ([]T, Result, error) {
	var res Result
	p, err := planChanges(old, new, opts, &res)
	if err != nil {
		return nil, Result{}, err
	}
	var txs []T
	for _, c := range p.chunks(chunk) {
		tx := newTx(p.r)
		txs = append(txs, tx)
		p.write(tx, c.changes, c.keys, &res)
	}
	p.deleteStaleChains(txs[len(txs)-1], deleteChains, &res)
	return txs, res, nil
}

// changeChunk is the part of a changePlan that one transaction writes.
type changeChunk struct {
	changes []portChange
	keys    []elemKey
}

// chunks splits p into chunks of at most size changed ports, keeping the
// ports that touch a common element together (a group larger than size is
// a chunk of its own); the hairpin set's elements, which any number of
// ports may share, do not join ports. Groups keep the name order of their first port,
// ports and keys their order in p. It returns one chunk, all of p, when
// size < 1 or p has no more than size ports.
func (p *changePlan) chunks(size int) []changeChunk {
	if size < 1 || len(p.changes) <= size {
		return []changeChunk{{changes: p.changes, keys: p.keys}}
	}
	groupOf, firstToucher := p.groups()
	// Members of each group, groups in the order of their first member.
	members := map[int][]int{}
	var groups []int
	for i := range p.changes {
		g := groupOf(i)
		if len(members[g]) == 0 {
			groups = append(groups, g)
		}
		members[g] = append(members[g], i)
	}
	chunkOfGroup := map[int]int{}
	var chunks []changeChunk
	for _, g := range groups {
		if n := len(chunks); n == 0 || len(chunks[n-1].changes)+len(members[g]) > size {
			chunks = append(chunks, changeChunk{})
		}
		last := len(chunks) - 1
		chunkOfGroup[g] = last
		for _, i := range members[g] {
			chunks[last].changes = append(chunks[last].changes, p.changes[i])
		}
	}
	for _, k := range p.keys {
		if k.in == inHairpin {
			// Shared by ports in any chunks: added by the first
			// transaction, deleted by the last, so that every port that
			// needs one has it in between.
			c := 0
			if _, had := p.oldClaims[k]; had {
				c = len(chunks) - 1
			}
			chunks[c].keys = append(chunks[c].keys, k)
			continue
		}
		c := chunkOfGroup[groupOf(firstToucher[k])]
		chunks[c].keys = append(chunks[c].keys, k)
	}
	return chunks
}

// groups joins the changed ports that touch a common element, directly or
// through others: groupOf gives the group of a port (by its index in
// p.changes), firstToucher the first port that touches each key.
func (p *changePlan) groups() (groupOf func(int) int, firstToucher map[elemKey]int) {
	parent := make([]int, len(p.changes))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	firstToucher = make(map[elemKey]int, len(p.keys))
	for i, c := range p.changes {
		for _, k := range c.keys {
			if k.in == inHairpin {
				continue // see chunks
			}
			first, ok := firstToucher[k]
			if !ok {
				firstToucher[k] = i
				continue
			}
			a, b := find(first), find(i)
			// The smaller index is the root: a group is named by its
			// first port.
			parent[max(a, b)] = min(a, b)
		}
	}
	return find, firstToucher
}

// portChange is how one changed Service port's objects differ.
type portChange struct {
	name servicemap.PortName
	// newService is the port in the new Ruleset; nil when it is not there
	// or not rendered (an unsafe name).
	newService           *ruleset.Service
	oldChains, newChains []chainDef
	oldSets, newSets     []*model.Set
	// recreated: an affinity set changes (its timeout), so it is deleted
	// and added again, and every chain that refers to it must be flushed
	// first and written again.
	recreated bool
	// keys are the elements that any port may have at the destinations of
	// the port's frontends in either Ruleset: those whose owner may change
	// with it.
	keys []elemKey
}

// changePlan is what RenderChanges works out before it writes anything:
// the changed Service ports, the map and set elements they touch, and who
// owns each of those before and after.
type changePlan struct {
	r       *renderer
	new     *ruleset.Ruleset
	changes []portChange
	// keys are the elements the changed ports have in either Ruleset, in
	// the order they were first met.
	keys []elemKey
	// oldClaims and newClaims are the owners of keys in each Ruleset (see
	// owners).
	oldClaims, newClaims map[elemKey]claim
}

// planChanges works out the changes from old to new. It returns
// svcproxy.ErrFullSyncNeeded when old is nil or was built with another Config, and
// adds to res the warnings of the changed ports whose names are unsafe.
func planChanges(old, new *ruleset.Ruleset, opts Options, res *Result) (*changePlan, error) {
	if old == nil {
		return nil, fmt.Errorf("%w: no previous ruleset", svcproxy.ErrFullSyncNeeded)
	}
	diff := ruleset.Diff(old, new)
	if diff.ConfigChanged {
		return nil, fmt.Errorf("%w: the ruleset config changed", svcproxy.ErrFullSyncNeeded)
	}
	r, err := newRenderer(new.Config(), opts)
	if err != nil {
		return nil, err
	}
	names := slices.Concat(diff.Added, diff.Changed, diff.Removed)
	slices.SortFunc(names, servicemap.PortName.Compare)

	p := &changePlan{r: r, new: new, changes: make([]portChange, 0, len(names))}
	touched := map[elemKey]bool{}
	for _, name := range names {
		c := p.portChange(old, name, res)
		for _, k := range c.keys {
			if !touched[k] {
				touched[k] = true
				p.keys = append(p.keys, k)
			}
		}
		p.changes = append(p.changes, c)
	}
	p.oldClaims = owners(r, old, p.keys)
	p.newClaims = owners(r, new, p.keys)
	p.claimHairpin(old, names)
	return p, nil
}

// claimHairpin claims the hairpin set's elements among p.keys in each
// Ruleset: an element is in a table when any Service port needs it
// (hairpinKeys). The changed ports are looked at in both Rulesets. The
// others, the same in both, matter only for an element that the changed
// ports need in one Ruleset and not in the other (an endpoint on this node
// that comes or goes): only then are they read, in one pass over the new
// Ruleset.
func (p *changePlan) claimHairpin(old *ruleset.Ruleset, changed []servicemap.PortName) {
	oldNeed, newNeed := map[elemKey]bool{}, map[elemKey]bool{}
	isChanged := make(map[servicemap.PortName]bool, len(changed))
	for _, name := range changed {
		isChanged[name] = true
		if !names.Safe(name) {
			continue
		}
		if s, ok := old.Service(name); ok {
			for _, k := range hairpinKeys(s) {
				oldNeed[k] = true
			}
		}
		if s, ok := p.new.Service(name); ok {
			for _, k := range hairpinKeys(s) {
				newNeed[k] = true
			}
		}
	}
	open := map[elemKey]bool{}
	for _, k := range p.keys {
		if k.in == inHairpin && oldNeed[k] != newNeed[k] {
			open[k] = true
		}
	}
	if len(open) > 0 {
		for _, s := range p.new.Services() {
			if isChanged[s.Name] || !names.Safe(s.Name) {
				continue
			}
			for _, k := range hairpinKeys(s) {
				if open[k] {
					oldNeed[k], newNeed[k] = true, true
				}
			}
		}
	}
	for _, k := range p.keys {
		if k.in != inHairpin {
			continue
		}
		if oldNeed[k] {
			p.oldClaims[k] = claim{verdict: verdictHairpin}
		}
		if newNeed[k] {
			p.newClaims[k] = claim{verdict: verdictHairpin}
		}
	}
}

// portChange works out the change of the port name.
func (p *changePlan) portChange(old *ruleset.Ruleset, name servicemap.PortName, res *Result) portChange {
	r := p.r
	c := portChange{name: name}
	seen := map[elemKey]bool{}
	touch := func(s *ruleset.Service) {
		for _, f := range s.Frontends() {
			for _, k := range destinationKeys(f) {
				if !seen[k] {
					seen[k] = true
					c.keys = append(c.keys, k)
				}
			}
		}
		for _, k := range hairpinKeys(s) {
			if !seen[k] {
				seen[k] = true
				c.keys = append(c.keys, k)
			}
		}
	}
	if s, ok := old.Service(name); ok && names.Safe(name) {
		c.oldChains = r.chains(s)
		c.oldSets = r.affinitySets(s)
		touch(s)
	}
	if s, ok := p.new.Service(name); ok {
		if !names.Safe(name) {
			res.Warnings = append(res.Warnings, names.UnsafeWarning(s))
		} else {
			c.newService = s
			c.newChains = r.chains(s)
			c.newSets = r.affinitySets(s)
			touch(s)
		}
	}
	oldSets := setsByName(c.oldSets)
	for _, set := range c.newSets {
		if o, ok := oldSets[set.Name]; ok && !sameSet(o, set) {
			c.recreated = true
		}
	}
	return c
}

// write adds the operations of changes, whose elements are keys, in an
// order the kernel accepts in one transaction: first what refers to
// objects that change goes (flushed chains, deleted elements), then the
// affinity sets that go away or change, then the new objects and the rules
// of new and changed chains, then the new and changed elements.
func (p *changePlan) write(tx txWriter, changes []portChange, keys []elemKey, res *Result) {
	for i := range changes {
		p.flushChangedChains(tx, &changes[i], res)
	}
	p.deleteChangedElements(tx, keys)
	for i := range changes {
		p.deleteChangedSets(tx, &changes[i])
	}
	for i := range changes {
		p.addNewObjects(tx, &changes[i], res)
	}
	p.addChangedElements(tx, keys)
}

// flushChangedChains flushes the chains of c whose rules change or that go
// away; those that go away are stale.
func (p *changePlan) flushChangedChains(tx txWriter, c *portChange, res *Result) {
	newChains := chainsByName(c.newChains)
	for i := range c.oldChains {
		oc := &c.oldChains[i]
		nc, kept := newChains[oc.decl.Name]
		if kept && !c.recreated && slices.EqualFunc(oc.rules, nc.rules, sameRule) {
			continue
		}
		tx.write(chainOp(opFlush, &oc.decl))
		if !kept {
			res.Stale = append(res.Stale, oc.decl.Name)
		}
	}
}

// deleteChangedElements deletes the elements of keys that go away or whose
// owner or verdict changes.
func (p *changePlan) deleteChangedElements(tx txWriter, keys []elemKey) {
	for _, k := range keys {
		o, hadOld := p.oldClaims[k]
		n, hasNew := p.newClaims[k]
		if hadOld && !(hasNew && o.same(n)) {
			p.r.deleteElement(tx, k)
		}
	}
}

// deleteChangedSets deletes the affinity sets of c that go away or change.
func (p *changePlan) deleteChangedSets(tx txWriter, c *portChange) {
	newSets := setsByName(c.newSets)
	for _, s := range c.oldSets {
		if n, ok := newSets[s.Name]; !ok || !sameSet(n, s) {
			tx.write(setOp(opDelete, s, false))
		}
	}
}

// addNewObjects adds the new and changed affinity sets and the new chains
// of c, writes the rules of its new and changed chains, and reports the
// elements it claims that another port owns.
func (p *changePlan) addNewObjects(tx txWriter, c *portChange, res *Result) {
	r := p.r
	oldSets := setsByName(c.oldSets)
	for _, s := range c.newSets {
		if o, ok := oldSets[s.Name]; !ok || !sameSet(o, s) {
			tx.write(setOp(opAdd, s, false))
		}
	}
	// A chain the old state did not use does not exist, or is a stale
	// one, flushed already.
	oldChains := chainsByName(c.oldChains)
	for i := range c.newChains {
		if _, ok := oldChains[c.newChains[i].decl.Name]; !ok {
			tx.write(chainOp(opAdd, &c.newChains[i].decl))
		}
	}
	for i := range c.newChains {
		nc := &c.newChains[i]
		oc, ok := oldChains[nc.decl.Name]
		if ok && !c.recreated && slices.EqualFunc(oc.rules, nc.rules, sameRule) {
			continue
		}
		r.writeRules(tx, nc)
	}
	if c.newService != nil {
		r.elements(c.newService, func(k elemKey, _ verdict, kind ruleset.FrontendKind) {
			if owns(p.new, c.newService, k, kind) {
				return
			}
			if w, ok := notOwnedWarning(p.new, c.newService, k, kind); ok && !slices.Contains(res.Warnings, w) {
				res.Warnings = append(res.Warnings, w) // one per destination, not per element
			}
		})
	}
}

// addChangedElements adds every element of keys that the new state has,
// also those that do not change: adding an element the table holds is no
// error, and one that something deleted behind the Executor's back comes
// back with the first change of its Service port.
func (p *changePlan) addChangedElements(tx txWriter, keys []elemKey) {
	for _, k := range keys {
		if n, hasNew := p.newClaims[k]; hasNew {
			p.r.addElement(tx, k, n)
		}
	}
}

// deleteStaleChains deletes the chains of deleteChains (flushed by earlier
// transactions) that the new Ruleset does not use and that res does not
// list as stale again.
func (p *changePlan) deleteStaleChains(tx txWriter, deleteChains []string, res *Result) {
	stale := map[string]bool{}
	for _, name := range res.Stale {
		stale[name] = true
	}
	for _, name := range deleteChains {
		if stale[name] || usedBy(p.r, p.new, name) {
			continue
		}
		tx.write(chainOp(opDelete, chainRef(name)))
		res.Deleted = append(res.Deleted, name)
	}
}

// usedBy reports whether a chain belongs to rs, by the ServicePort named in
// the chain.
func usedBy(r *renderer, rs *ruleset.Ruleset, chain string) bool {
	name, ok := serviceOfChain(chain)
	if !ok {
		return slices.Contains(fixedChains, chain) || slices.ContainsFunc(baseChains[:], func(b model.Chain) bool { return b.Name == chain })
	}
	s, ok := rs.Service(name)
	if !ok {
		return false
	}
	for _, c := range r.chains(s) {
		if c.decl.Name == chain {
			return true
		}
	}
	return false
}
