package nftables

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Options are the settings of a rendering that the Ruleset does not hold.
// The zero value renders kube-proxy's table.
type Options struct {
	// Table is the name of the table; "" means DefaultTable. A proxy that
	// runs beside kube-proxy picks another name.
	Table string
	// ServiceCIDRs are the Service IP ranges of the Ruleset's family, if
	// known. New connections to an address in them that no Service port
	// uses are dropped, as kube-proxy does with the cluster's ServiceCIDRs.
	// Empty: no such rule (ports of cluster IPs that no Service uses are
	// still rejected).
	ServiceCIDRs []netip.Prefix
}

// ErrFullSyncNeeded is returned by RenderChanges when it cannot compute the
// changes: there is no previous Ruleset, or the two Rulesets were built with
// different Configs. Render the whole table instead.
var ErrFullSyncNeeded = errors.New("nftables: a full sync is needed")

// Result reports what a rendered transaction does besides reaching the
// desired state.
type Result struct {
	// Stale are the chains that the transaction flushes because nothing
	// uses them any more. They must be deleted by a later transaction (pass
	// them to RenderChanges as deleteChains, a second or more later):
	// kernels before 6.2 release a chain only some time after the last map
	// element pointing at it is deleted, and report it busy until then.
	Stale []string
	// Deleted are the chains of RenderChanges' deleteChains that the
	// transaction deletes. The others are in use again, or were flushed
	// again by this transaction and are listed in Stale.
	Deleted []string
	// Warnings name the Service ports that are not (fully) rendered: a name
	// that is unsafe in a chain name, or a frontend (address, protocol and
	// port) that another Service port already uses. For RenderChanges they
	// cover only the changed Service ports.
	Warnings []svcproxy.Warning
}

// Family is the knftables family of an IP family: "ip" or "ip6".
func Family(f v1.IPFamily) knftables.Family {
	if f == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// Render adds to tx the operations that make the table hold exactly the
// rules of rs, whatever it held before: the table, its base chains (deleted
// and created again, so that a change of priority applies), its fixed
// chains, sets and maps (flushed and filled), and the chains and elements of
// every Service port. Affinity sets are added but not flushed, so that
// sessions stay with their endpoints across full syncs.
//
// existing names the objects the table holds now, by type ("chain", "set",
// "map"), as knftables.Interface.ListAll returns them; an empty map means a
// table that does not exist yet. Chains in it that rs does not use are
// flushed and reported in Result.Stale; sets and maps that rs does not use
// are deleted; chains that rs uses are flushed before they are written, new
// ones are only added. nil means unknown: every chain rs uses is flushed, and
// nothing else is.
//
// Every object names its family and table, so tx may come from an Interface
// with no default table, or from one whose default table is the one
// rendered.
//
// Render is pure: it only appends to tx.
func Render(tx *knftables.Transaction, rs *ruleset.Ruleset, opts Options, existing map[string][]string) (Result, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return Result{}, err
	}
	var res Result
	// Chains that exist are flushed; new ones are empty already, and a
	// flush per chain would double the size of a first sync.
	exists := map[string]bool{}
	for _, name := range existing["chain"] {
		exists[name] = true
	}
	mayExist := func(chain string) bool { return existing == nil || exists[chain] }
	r.fixed(tx, mayExist, false)
	st := newFullState(r, &res, mayExist)
	st.services(tx, rs.Services())

	if existing != nil {
		st.removeUnrendered(tx, existing)
	}
	return res, nil
}

// RenderNew renders rs into a table that does not exist yet, as several
// transactions made by newTx: the first creates the table and its fixed
// objects, each of the others adds the chains, rules and elements of at most
// chunk Service ports. The kernel and nft take more than linear time in the
// size of one transaction (10,000 Services × 10 endpoints: about 115 s in
// one, 34 s in chunks of 1,000 here), but between two transactions the table
// serves only the Service ports added so far: use it for a first sync only.
// chunk < 1 means one transaction for everything.
func RenderNew(newTx func() *knftables.Transaction, rs *ruleset.Ruleset, opts Options, chunk int) ([]*knftables.Transaction, Result, error) {
	return renderNew(newTx, rs, opts, chunk)
}

func renderNew[T txWriter](newTx func() T, rs *ruleset.Ruleset, opts Options, chunk int) ([]T, Result, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return nil, Result{}, err
	}
	var res Result
	tx := newTx()
	r.fixed(tx, func(string) bool { return false }, false)
	txs := []T{tx}
	st := newFullState(r, &res, func(string) bool { return false })
	all := rs.Services()
	if chunk < 1 {
		chunk = max(len(all), 1)
	}
	for start := 0; start < len(all); start += chunk {
		if start > 0 || len(all) > chunk {
			tx = newTx()
			txs = append(txs, tx)
		}
		st.services(tx, all[start:min(start+chunk, len(all))])
	}
	return txs, res, nil
}

// renderResync renders rs into a table that exists and serves, as
// several transactions made by newTx, each of which leaves every Service
// port either as the table had it or as rs has it, so that no traffic is
// lost between them: the first rewrites the table's fixed objects and
// keeps the elements of its maps and sets; each of the next ones rewrites
// the chains and elements of at most chunk Service ports (an element the
// table holds is deleted and added again in the same transaction); the
// last deletes the elements rs does not have, flushes the chains it does
// not use (Result.Stale) and deletes its sets and maps that rs does not
// use. existing lists the table's objects, as for Render; elements are
// those of its maps and sets (knftables' ListElements). An element it
// cannot read is an error: Render then does the same in one transaction.
func renderResync[T txWriter](newTx func() T, rs *ruleset.Ruleset, opts Options, existing map[string][]string, elements []*knftables.Element, chunk int) ([]T, Result, error) {
	r, err := newRenderer(rs.Config(), opts)
	if err != nil {
		return nil, Result{}, err
	}
	inTable := make(map[elemKey]bool, len(elements))
	for _, e := range elements {
		k, ok, err := r.parseElementKey(e)
		if err != nil {
			return nil, Result{}, err
		}
		if ok {
			inTable[k] = true
		}
	}
	exists := map[string]bool{}
	for _, name := range existing["chain"] {
		exists[name] = true
	}
	mayExist := func(chain string) bool { return exists[chain] }
	var res Result
	tx := newTx()
	r.fixed(tx, mayExist, true)
	txs := []T{tx}
	st := newFullState(r, &res, mayExist)
	st.inTable = inTable
	all := rs.Services()
	if chunk < 1 {
		chunk = max(len(all), 1)
	}
	for start := 0; start < len(all); start += chunk {
		tx = newTx()
		txs = append(txs, tx)
		st.services(tx, all[start:min(start+chunk, len(all))])
	}
	tx = newTx()
	txs = append(txs, tx)
	for _, k := range slices.SortedFunc(maps.Keys(inTable), elemKey.compare) {
		if _, rendered := st.claims[k]; !rendered {
			tx.Delete(r.elementKey(k))
		}
	}
	st.removeUnrendered(tx, existing)
	return txs, res, nil
}

// parseElementKey is the key of an element of one of the maps and sets
// that hold Service ports' elements, as knftables lists it; ok is false
// for the elements of other sets.
func (r *renderer) parseElementKey(e *knftables.Element) (k elemKey, ok bool, err error) {
	name := e.Set + e.Map
	c := slices.Index(containerNames[:], name)
	if c < 0 {
		return elemKey{}, false, nil
	}
	k.c = container(c)
	addr, proto, port, err := parseKeyFields(e.Key, r.cfg.Family == v1.IPv6Protocol)
	nodePort := k.c == cServiceNodePorts || k.c == cNoEndpointNodePorts
	if err != nil || (k.c == cClusterIPs) != (proto == "") || nodePort == addr.IsValid() {
		return elemKey{}, false, fmt.Errorf("nftables: element %q of %s: not one of ours", e.Key, name)
	}
	k.addr, k.port = addr, port
	if proto != "" {
		k.proto = v1.Protocol(strings.ToUpper(proto))
	}
	return k, true, nil
}

// compare orders element keys: by container, address, protocol, port.
func (k elemKey) compare(o elemKey) int {
	return cmp.Or(cmp.Compare(k.c, o.c), k.addr.Compare(o.addr), cmp.Compare(k.proto, o.proto), cmp.Compare(k.port, o.port))
}

// fullState is what the services of a full render share: who claimed each
// element, which objects were written.
type fullState struct {
	r        *renderer
	res      *Result
	flush    func(chain string) bool
	claims   map[elemKey]*ruleset.Service
	rendered map[string]bool
	// inTable are the elements the maps and sets hold already, when they
	// are not flushed (renderResync): each is replaced, by a delete and an
	// add, rather than added.
	inTable map[elemKey]bool
}

func newFullState(r *renderer, res *Result, flush func(string) bool) *fullState {
	return &fullState{r: r, res: res, flush: flush, claims: map[elemKey]*ruleset.Service{}, rendered: map[string]bool{}}
}

// removeUnrendered flushes the chains of existing (see Render) that st did
// not write, reporting them as stale, and deletes its sets and maps that st
// did not write.
func (st *fullState) removeUnrendered(tx txWriter, existing map[string][]string) {
	r := st.r
	rendered := st.rendered
	for _, name := range r.fixedSetsAndMaps() {
		rendered["set "+name] = true
		rendered["map "+name] = true
	}
	for _, name := range fixedChains {
		rendered["chain "+name] = true
	}
	for _, bc := range baseChains {
		rendered["chain "+bc.name] = true
	}
	for _, name := range sortedCopy(existing["chain"]) {
		if !rendered["chain "+name] {
			tx.Flush(r.chain(name))
			st.res.Stale = append(st.res.Stale, name)
		}
	}
	// Anonymous sets ("__set0") belong to rules, not to us.
	for _, name := range sortedCopy(existing["set"]) {
		if !rendered["set "+name] && !strings.HasPrefix(name, "__") {
			tx.Delete(&knftables.Set{Family: r.family, Table: r.table, Name: name})
		}
	}
	for _, name := range sortedCopy(existing["map"]) {
		if !rendered["map "+name] && !strings.HasPrefix(name, "__") {
			tx.Delete(&knftables.Map{Family: r.family, Table: r.table, Name: name})
		}
	}
}

// services writes the affinity sets, chains, rules and elements of svcs.
func (st *fullState) services(tx txWriter, svcs []*ruleset.Service) {
	r := st.r
	var elems []claimedElem
	for _, s := range svcs {
		if !safeName(s.Name) {
			st.res.Warnings = append(st.res.Warnings, unsafeWarning(s))
			continue
		}
		for _, set := range r.affinitySets(s) {
			tx.Add(r.set(set))
			st.rendered["set "+set.name] = true
		}
		chains := r.chains(s)
		for _, c := range chains {
			tx.Add(r.chain(c.name))
			if st.flush(c.name) {
				tx.Flush(r.chain(c.name))
			}
			st.rendered["chain "+c.name] = true
		}
		for _, c := range chains {
			r.writeRules(tx, c)
		}
		r.elements(s, func(k elemKey, v verdict) {
			if owner, dup := st.claims[k]; dup {
				if k.c != cClusterIPs && owner != s {
					st.res.Warnings = append(st.res.Warnings, conflictWarning(s, k, owner))
				}
				return
			}
			st.claims[k] = s
			elems = append(elems, claimedElem{k, claim{s, v}})
		})
	}
	for _, e := range elems {
		if st.inTable[e.key] {
			tx.Delete(r.elementKey(e.key))
		}
		tx.Add(r.element(e.key, e.claim))
	}
}

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

// owners finds, for each of keys, its first claimant in rs: the first
// Service port, in name order, that puts it in the table. Only the Service
// ports on the key's Frontend can (see frontend), so it looks at those
// alone: O(log n) time per key, not O(n).
func owners(r *renderer, rs *ruleset.Ruleset, keys []elemKey) map[elemKey]claim {
	claims := make(map[elemKey]claim, len(keys))
	for _, k := range keys {
		for _, name := range rs.ServicesAt(k.frontend()) {
			if !safeName(name) {
				continue
			}
			s, ok := rs.Service(name)
			if !ok {
				continue
			}
			if v, ok := r.verdictOf(s, k); ok {
				claims[k] = claim{s, v}
				break
			}
		}
	}
	return claims
}

// verdictOf returns the verdict of s's first element with key k, if s has
// one.
func (r *renderer) verdictOf(s *ruleset.Service, k elemKey) (verdict, bool) {
	var v verdict
	found := false
	r.elements(s, func(e elemKey, ev verdict) {
		if !found && e == k {
			v, found = ev, true
		}
	})
	return v, found
}

// renderer holds what every rendering of one Ruleset Config needs.
type renderer struct {
	cfg       ruleset.Config
	opts      Options
	family    knftables.Family
	table     string
	ipX       string // "ip" or "ip6"
	addrType  string // "ipv4_addr" or "ipv6_addr"
	mark      string
	fromPods  string // matches traffic from the cluster CIDRs, or ""
	notPods   string // matches traffic from outside them, or ""
	localhost string // the family's loopback network
}

func newRenderer(cfg ruleset.Config, opts Options) (*renderer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nftables: ruleset config: %w", err)
	}
	r := &renderer{cfg: cfg, opts: opts, family: Family(cfg.Family), table: opts.Table}
	if r.table == "" {
		r.table = DefaultTable
	}
	if !validTableName(r.table) {
		return nil, fmt.Errorf("nftables: invalid table name %q", r.table)
	}
	is6 := cfg.Family == v1.IPv6Protocol
	for _, p := range opts.ServiceCIDRs {
		if !p.IsValid() || p.Addr().Is6() != is6 || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return nil, fmt.Errorf("nftables: Service CIDR %v is not a valid %s prefix", p, cfg.Family)
		}
	}
	r.ipX, r.addrType, r.localhost = "ip", "ipv4_addr", "127.0.0.0/8"
	if is6 {
		r.ipX, r.addrType, r.localhost = "ip6", "ipv6_addr", "::1"
	}
	r.mark = fmt.Sprintf("%#08x", cfg.Mark())
	if len(cfg.ClusterCIDRs) > 0 {
		set := prefixSet(cfg.ClusterCIDRs)
		r.fromPods = r.ipX + " saddr " + set
		r.notPods = r.ipX + " saddr != " + set
	}
	return r, nil
}

// validTableName accepts the nft identifiers that need no quoting.
func validTableName(s string) bool {
	if s == "" || len(s) > knftables.NameLengthMax-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
		if i == 0 && !letter {
			return false
		}
		if !letter && (c < '0' || c > '9') && c != '-' && c != '.' && c != '/' {
			return false
		}
	}
	return true
}

// prefixSet is one prefix, or an anonymous set of them.
func prefixSet(ps []netip.Prefix) string {
	if len(ps) == 1 {
		return ps[0].Masked().String()
	}
	strs := make([]string, len(ps))
	for i, p := range ps {
		strs[i] = p.Masked().String()
	}
	return "{ " + strings.Join(strs, " , ") + " }"
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// The base chains, as kube-proxy hooks them: filtering before DNAT (on the
// Service addresses), a filter after DNAT on output, DNAT and SNAT.
type baseChain struct {
	name     string
	kind     knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

var baseChains = [...]baseChain{
	{chainFilterPrerouting, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{chainFilterInput, knftables.FilterType, knftables.InputHook, knftables.DNATPriority + "-10"},
	{chainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.DNATPriority + "-10"},
	{chainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{chainFilterOutputPost, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "+10"},
	{chainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{chainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{chainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// fixedChains are the regular chains every table has.
var fixedChains = []string{
	chainServices, chainServiceEPCheck, chainNodePortEPCheck, chainClusterIPsCheck,
	chainFirewallCheck, chainReject, chainMarkMasq, chainMasquerading,
}

// jumps are the rules of the base chains.
var jumps = []struct{ from, match, to string }{
	// reject only works in input, forward and output before kernel 5.9.
	{chainFilterInput, "ct state new", chainNodePortEPCheck},
	{chainFilterInput, "ct state new", chainServiceEPCheck},
	{chainFilterForward, "ct state new", chainServiceEPCheck},
	{chainFilterOutput, "ct state new", chainServiceEPCheck},
	{chainFilterPrerouting, "ct state new", chainFirewallCheck},
	{chainFilterOutput, "ct state new", chainFirewallCheck},
	{chainNATOutput, "", chainServices},
	{chainNATPrerouting, "", chainServices},
	{chainNATPostrouting, "", chainMasquerading},
	{chainFilterForward, "ct state new", chainClusterIPsCheck},
	{chainFilterOutputPost, "ct state new", chainClusterIPsCheck},
}

func (r *renderer) chain(name string) *knftables.Chain {
	return &knftables.Chain{Family: r.family, Table: r.table, Name: name}
}

func (r *renderer) rule(chain, rule string, comment string) *knftables.Rule {
	ru := &knftables.Rule{Family: r.family, Table: r.table, Chain: chain, Rule: rule}
	if comment != "" {
		ru.Comment = &comment
	}
	return ru
}

func (r *renderer) fixedSetsAndMaps() []string {
	names := []string{setClusterIPs, mapNoEndpointServices, mapNoEndpointNodePorts, mapFirewallIPs, mapServiceIPs, mapServiceNodePorts}
	if len(r.cfg.NodePortAddresses) > 0 {
		names = append(names, setNodePortIPs)
	}
	return names
}

// fixed adds the table and everything in it that does not depend on the
// Services. mayExist says which chains may already be in the table. The
// maps and the cluster-ips set are flushed, unless keepElements.
func (r *renderer) fixed(tx txWriter, mayExist func(chain string) bool, keepElements bool) {
	comment := defaultTableDescription
	if r.table != DefaultTable {
		comment = "Service proxy rules"
	}
	tx.Add(&knftables.Table{Family: r.family, Name: r.table, Comment: &comment})

	for _, bc := range baseChains {
		if mayExist(bc.name) {
			// Delete and create again, so that a changed hook or
			// priority applies: nft refuses to change them on an
			// existing chain.
			tx.Add(r.chain(bc.name))
			tx.Delete(r.chain(bc.name))
		}
		c := r.chain(bc.name)
		c.Type, c.Hook, c.Priority = ptr(bc.kind), ptr(bc.hook), ptr(bc.priority)
		tx.Add(c)
	}
	for _, name := range fixedChains {
		c := r.chain(name)
		if name == chainReject {
			c.Comment = ptr("helper for @no-endpoint-services / @no-endpoint-nodeports")
		}
		tx.Add(c)
		tx.Flush(r.chain(name))
	}

	addMap := func(name, typ, comment string) {
		tx.Add(&knftables.Map{Family: r.family, Table: r.table, Name: name, Type: typ, Comment: &comment})
		if !keepElements {
			tx.Flush(&knftables.Map{Family: r.family, Table: r.table, Name: name})
		}
	}
	addSet := func(name, comment string, flush bool) {
		tx.Add(&knftables.Set{Family: r.family, Table: r.table, Name: name, Type: r.addrType, Comment: &comment})
		if flush {
			tx.Flush(&knftables.Set{Family: r.family, Table: r.table, Name: name})
		}
	}
	addrProtoPort := r.addrType + " . inet_proto . inet_service : verdict"
	addSet(setClusterIPs, "Active ClusterIPs", !keepElements)
	nodePortIPs := len(r.cfg.NodePortAddresses) > 0
	if nodePortIPs {
		// Its elements come from the Config and are written below.
		addSet(setNodePortIPs, "IPs that accept NodePort traffic", true)
	}
	addMap(mapNoEndpointServices, addrProtoPort, "vmap to drop or reject packets to services with no endpoints")
	addMap(mapNoEndpointNodePorts, "inet_proto . inet_service : verdict", "vmap to drop or reject packets to service nodeports with no endpoints")
	addMap(mapFirewallIPs, addrProtoPort, "destinations that are subject to LoadBalancerSourceRanges")
	addMap(mapServiceIPs, addrProtoPort, "ClusterIP, ExternalIP and LoadBalancer IP traffic")
	addMap(mapServiceNodePorts, "inet_proto . inet_service : verdict", "NodePort traffic")

	for _, j := range jumps {
		rule := "jump " + j.to
		if j.match != "" {
			rule = j.match + " " + rule
		}
		tx.Add(r.rule(j.from, rule, ""))
	}

	tx.Add(r.rule(chainMarkMasq, "mark set mark or "+r.mark, ""))
	tx.Add(r.rule(chainMasquerading, "mark and "+r.mark+" == 0 return", ""))
	tx.Add(r.rule(chainMasquerading, "mark set mark xor "+r.mark, ""))
	tx.Add(r.rule(chainMasquerading, "masquerade fully-random", ""))

	tx.Add(r.rule(chainClusterIPsCheck, r.ipX+" daddr @"+setClusterIPs+" reject", "Reject traffic to invalid ports of ClusterIPs"))
	if len(r.opts.ServiceCIDRs) > 0 {
		strs := make([]string, len(r.opts.ServiceCIDRs))
		for i, p := range r.opts.ServiceCIDRs {
			strs[i] = p.Masked().String()
		}
		tx.Add(r.rule(chainClusterIPsCheck, r.ipX+" daddr { "+strings.Join(strs, " , ")+" } drop", "Drop traffic to unallocated ClusterIPs"))
	}

	tx.Add(r.rule(chainReject, "reject", ""))
	tx.Add(r.rule(chainServiceEPCheck, r.ipX+" daddr . meta l4proto . th dport vmap @"+mapNoEndpointServices, ""))
	tx.Add(r.rule(chainFirewallCheck, r.ipX+" daddr . meta l4proto . th dport vmap @"+mapFirewallIPs, ""))
	tx.Add(r.rule(chainServices, r.ipX+" daddr . meta l4proto . th dport vmap @"+mapServiceIPs, ""))

	// NodePorts: on the listed node addresses, or on every local address
	// except (unless asked) localhost.
	var nodeDest, nodeDestLocal string
	switch {
	case nodePortIPs:
		nodeDest = r.ipX + " daddr @" + setNodePortIPs + " "
		nodeDestLocal = nodeDest
	case r.localhostNodePorts():
		nodeDestLocal = "fib daddr type local "
	default:
		nodeDest = r.ipX + " daddr != " + r.localhost + " "
		nodeDestLocal = "fib daddr type local " + nodeDest
	}
	tx.Add(r.rule(chainNodePortEPCheck, nodeDest+"meta l4proto . th dport vmap @"+mapNoEndpointNodePorts, ""))
	tx.Add(r.rule(chainServices, nodeDestLocal+"meta l4proto . th dport vmap @"+mapServiceNodePorts, ""))

	for _, a := range r.cfg.NodePortAddresses {
		if a.IsLoopback() && !r.localhostNodePorts() {
			continue
		}
		tx.Add(&knftables.Element{Family: r.family, Table: r.table, Set: setNodePortIPs, Key: []string{a.String()}})
	}
}

// localhostNodePorts reports whether NodePorts are served on localhost:
// only for IPv4, when the Config asks for it.
func (r *renderer) localhostNodePorts() bool {
	return r.cfg.LocalhostNodePorts && r.cfg.Family == v1.IPv4Protocol
}

// chainDef is one per-service chain and its rules.
type chainDef struct {
	name  string
	rules []ruleDef
}

type ruleDef struct{ rule, comment string }

func (r *renderer) writeRules(tx txWriter, c chainDef) {
	for _, ru := range c.rules {
		tx.Add(r.rule(c.name, ru.rule, ru.comment))
	}
}

func chainsByName(cs []chainDef) map[string]chainDef {
	m := make(map[string]chainDef, len(cs))
	for _, c := range cs {
		m[c.name] = c
	}
	return m
}

// setDef is one affinity set.
type setDef struct {
	name    string
	timeout int32
}

func setsByName(ss []setDef) map[string]setDef {
	m := make(map[string]setDef, len(ss))
	for _, s := range ss {
		m[s.name] = s
	}
	return m
}

func (r *renderer) set(s setDef) *knftables.Set {
	return &knftables.Set{
		Family: r.family, Table: r.table, Name: s.name, Type: r.addrType,
		// "dynamic" too: some kernels add it to sets updated from the
		// packet path, and an add without it would then fail.
		Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
		Timeout: ptr(time.Duration(s.timeout) * time.Second),
	}
}

// affinitySets are the per-endpoint sets of a ClientIP-affinity Service
// port, which remember the clients each endpoint has served.
func (r *renderer) affinitySets(s *ruleset.Service) []setDef {
	if !s.Affinity.Enabled() {
		return nil
	}
	sets := make([]setDef, len(s.Endpoints))
	for i := range s.Endpoints {
		sets[i] = setDef{prefixAffinity + EndpointChainBase(s.Name, s.Endpoints[i].AddrPort()), s.Affinity.Seconds()}
	}
	return sets
}

// chains are the per-service and per-endpoint chains of s, with their
// rules, following kube-proxy.
func (r *renderer) chains(s *ruleset.Service) []chainDef {
	base := ServiceChainBase(s.Name)
	clusterChain := prefixService + base
	localChain := prefixLocal + base
	proto := strings.ToLower(string(s.Name.Protocol))
	// Policy, external and firewall chains, then one per endpoint.
	chains := make([]chainDef, 0, 4+len(s.Endpoints))

	// Masquerade traffic to the cluster IP that comes from outside the
	// pod network (or all of it), in whichever chain internal traffic
	// reaches; external traffic reaches the same chains, hence the match on
	// the cluster IP.
	var masq string
	switch {
	case r.cfg.MasqueradeAll:
		masq = fmt.Sprintf("%s daddr %s %s dport %d jump %s", r.ipX, s.ClusterIP, proto, s.Port, chainMarkMasq)
	case r.notPods != "":
		masq = fmt.Sprintf("%s daddr %s %s dport %d %s jump %s", r.ipX, s.ClusterIP, proto, s.Port, r.notPods, chainMarkMasq)
	}
	// The endpoints' chain-name bases, hashed once each.
	bases := make([]string, len(s.Endpoints))
	for i := range s.Endpoints {
		bases[i] = EndpointChainBase(s.Name, s.Endpoints[i].AddrPort())
	}
	if len(s.ClusterTargets) > 0 {
		chains = append(chains, r.policyChain(clusterChain, s, bases, s.ClusterTargets, masq, s.Internal == ruleset.RouteCluster))
	}
	if len(s.LocalTargets) > 0 {
		chains = append(chains, r.policyChain(localChain, s, bases, s.LocalTargets, masq, s.Internal == ruleset.RouteLocal))
	}

	if r.usesExternalChain(s) {
		c := chainDef{name: prefixExternal + base}
		hasCluster := len(s.ClusterTargets) > 0
		if !s.ExternalPolicyLocal {
			// Cluster policy: the endpoint may be on another node, so
			// masquerade.
			c.rules = append(c.rules, ruleDef{rule: "jump " + chainMarkMasq})
			if s.External == ruleset.RouteCluster && hasCluster {
				c.rules = append(c.rules, ruleDef{rule: "goto " + clusterChain})
			}
		} else {
			// Local policy keeps the client address, except for traffic
			// from pods and from the node itself, which is sent to the
			// cluster endpoints as if it had gone out to the load
			// balancer and come back.
			if hasCluster && len(s.ClusterTargets) > 0 {
				if r.fromPods != "" {
					c.rules = append(c.rules, ruleDef{r.fromPods + " goto " + clusterChain, "short-circuit pod traffic"})
				}
				c.rules = append(c.rules,
					ruleDef{"fib saddr type local jump " + chainMarkMasq, "masquerade local traffic"},
					ruleDef{"fib saddr type local goto " + clusterChain, "short-circuit local traffic"})
			}
			if s.External == ruleset.RouteLocal && len(s.LocalTargets) > 0 {
				c.rules = append(c.rules, ruleDef{rule: "goto " + localChain})
			}
		}
		chains = append(chains, c)
	}

	if s.UsesFirewall() {
		sources := make([]string, 0, len(s.LoadBalancerSourceRanges))
		for _, p := range s.LoadBalancerSourceRanges {
			sources = append(sources, p.String())
		}
		if s.FirewallAllowsNode {
			for _, ip := range s.LoadBalancerIPs {
				sources = append(sources, ip.String())
			}
		}
		chains = append(chains, chainDef{
			name:  prefixFirewall + base,
			rules: []ruleDef{{rule: r.ipX + " saddr != { " + strings.Join(sources, " , ") + " } drop"}},
		})
	}

	for i := range s.Endpoints {
		ep := s.Endpoints[i].AddrPort()
		epBase := bases[i]
		c := chainDef{name: prefixEndpoint + epBase, rules: make([]ruleDef, 0, 3)}
		// Hairpin: a pod that reaches itself through the Service.
		c.rules = append(c.rules, ruleDef{rule: r.ipX + " saddr " + ep.Addr().String() + " jump " + chainMarkMasq})
		if s.Affinity.Enabled() {
			c.rules = append(c.rules, ruleDef{rule: "update @" + prefixAffinity + epBase + " { " + r.ipX + " saddr }"})
		}
		c.rules = append(c.rules, ruleDef{rule: "meta l4proto " + proto + " dnat to " + ep.String()})
		chains = append(chains, c)
	}
	return chains
}

// policyChain spreads traffic over targets: clients with affinity go back
// to their endpoint, the others to one picked at random. bases are the
// EndpointChainBase of each of s.Endpoints.
func (r *renderer) policyChain(name string, s *ruleset.Service, bases []string, targets []ruleset.Target, masq string, internal bool) chainDef {
	c := chainDef{name: name}
	if internal && masq != "" {
		c.rules = append(c.rules, ruleDef{rule: masq})
	}
	epBases := make([]string, len(targets))
	epChains := make([]string, len(targets))
	for i, t := range targets {
		epBases[i] = endpointBase(s, bases, t.Endpoint)
		epChains[i] = prefixEndpoint + epBases[i]
	}
	if s.Affinity.Enabled() {
		for i := range targets {
			set := prefixAffinity + epBases[i]
			c.rules = append(c.rules, ruleDef{rule: r.ipX + " saddr @" + set + " goto " + epChains[i]})
		}
	}
	if len(targets) == 1 {
		// No choice to make: a plain goto spares the kernel an
		// anonymous verdict map.
		c.rules = append(c.rules, ruleDef{rule: "goto " + epChains[0]})
		return c
	}
	var b strings.Builder
	b.WriteString("numgen random mod ")
	b.WriteString(strconv.Itoa(len(targets)))
	b.WriteString(" vmap {")
	for i, ch := range epChains {
		if i > 0 {
			// The space before the comma keeps the chain name a word of
			// its own for knftables' Fake.
			b.WriteString(" ,")
		}
		b.WriteString(" ")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" : goto ")
		b.WriteString(ch)
	}
	b.WriteString(" }")
	c.rules = append(c.rules, ruleDef{rule: b.String()})
	return c
}

// endpointBase is the EndpointChainBase of ep, taken from bases (those of
// s.Endpoints, which hold every target's endpoint) when ep is there.
func endpointBase(s *ruleset.Service, bases []string, ep netip.AddrPort) string {
	i, found := slices.BinarySearchFunc(s.Endpoints, ep, func(e endpoints.Endpoint, t netip.AddrPort) int { return e.AddrPort().Compare(t) })
	if !found {
		return EndpointChainBase(s.Name, ep)
	}
	return bases[i]
}

// usesExternalChain: the external chain exists when the port is reachable
// from outside and has endpoints somewhere, even when its Local policy
// finds none on this node (the short-circuit rules still apply).
func (r *renderer) usesExternalChain(s *ruleset.Service) bool {
	return s.External != ruleset.RouteNone && s.External != ruleset.RouteReject
}

// Elements of the maps and sets.

type container uint8

const (
	cClusterIPs container = iota
	cServiceIPs
	cServiceNodePorts
	cNoEndpointServices
	cNoEndpointNodePorts
	cFirewallIPs
)

var containerNames = [...]string{
	cClusterIPs:          setClusterIPs,
	cServiceIPs:          mapServiceIPs,
	cServiceNodePorts:    mapServiceNodePorts,
	cNoEndpointServices:  mapNoEndpointServices,
	cNoEndpointNodePorts: mapNoEndpointNodePorts,
	cFirewallIPs:         mapFirewallIPs,
}

// elemKey is the key of one element in one map or set.
type elemKey struct {
	c     container
	addr  netip.Addr
	proto v1.Protocol
	port  uint16
}

// frontend is the Frontend of the Service ports that may put k in the
// table: elements yields cluster-ips keys for the cluster IP as a whole
// (no protocol nor port), node-port keys without an address, the others
// for an address, protocol and port of the Service port, all of them among
// the port's ruleset.Service.Frontends.
func (k elemKey) frontend() ruleset.Frontend {
	return ruleset.Frontend{Addr: k.addr, Protocol: k.proto, Port: k.port}
}

// verdict is the value of a map element, relative to its owner.
type verdict uint8

const (
	vNone verdict = iota // a set element
	vCluster
	vLocal
	vExternal
	vFirewall
	vReject
	vDrop
)

// claim is an element's value: which Service port owns it, and what it
// does.
type claim struct {
	owner *ruleset.Service
	v     verdict
}

// same reports whether two claims render identical elements: the same
// owner (by name: two Rulesets hold different copies) and verdict.
func (c claim) same(o claim) bool {
	return c.v == o.v && c.owner.Name == o.owner.Name
}

type claimedElem struct {
	key   elemKey
	claim claim
}

// elements calls yield with each element that s puts in the maps and sets,
// in a fixed order.
func (r *renderer) elements(s *ruleset.Service, yield func(elemKey, verdict)) {
	proto := s.Name.Protocol
	yield(elemKey{c: cClusterIPs, addr: s.ClusterIP}, vNone)
	internal := elemKey{addr: s.ClusterIP, proto: proto, port: s.Port}
	switch {
	case s.Internal == ruleset.RouteCluster && len(s.ClusterTargets) > 0:
		internal.c = cServiceIPs
		yield(internal, vCluster)
	case s.Internal == ruleset.RouteLocal && len(s.LocalTargets) > 0:
		internal.c = cServiceIPs
		yield(internal, vLocal)
	case s.Internal == ruleset.RouteReject:
		internal.c = cNoEndpointServices
		yield(internal, vReject)
	default:
		// RouteDrop, or (never from ruleset.Builder) a route without
		// targets: drop rather than point at a missing chain.
		internal.c = cNoEndpointServices
		yield(internal, vDrop)
	}
	if s.External == ruleset.RouteNone {
		return
	}
	ext := r.usesExternalChain(s)
	noEndpoints := vNone
	switch s.External {
	case ruleset.RouteReject:
		noEndpoints = vReject
	case ruleset.RouteDrop:
		noEndpoints = vDrop
	}
	frontend := func(ip netip.Addr, lb bool) {
		k := elemKey{addr: ip, proto: proto, port: s.Port}
		if ext {
			k.c = cServiceIPs
			yield(k, vExternal)
		}
		if lb && s.UsesFirewall() {
			k.c = cFirewallIPs
			yield(k, vFirewall)
		}
		if noEndpoints != vNone {
			k.c = cNoEndpointServices
			yield(k, noEndpoints)
		}
	}
	for _, ip := range s.ExternalIPs {
		frontend(ip, false)
	}
	for _, ip := range s.LoadBalancerIPs {
		frontend(ip, true)
	}
	if s.NodePort != 0 {
		k := elemKey{proto: proto, port: s.NodePort}
		if ext {
			k.c = cServiceNodePorts
			yield(k, vExternal)
		}
		if noEndpoints != vNone {
			k.c = cNoEndpointNodePorts
			yield(k, noEndpoints)
		}
	}
}

// element renders a claimed element for an add.
func (r *renderer) element(k elemKey, c claim) *knftables.Element {
	e := r.elementKey(k)
	base := ServiceChainBase(c.owner.Name)
	switch c.v {
	case vCluster:
		e.Value = []string{"goto " + prefixService + base}
	case vLocal:
		e.Value = []string{"goto " + prefixLocal + base}
	case vExternal:
		e.Value = []string{"goto " + prefixExternal + base}
	case vFirewall:
		e.Value = []string{"goto " + prefixFirewall + base}
	case vReject:
		e.Value = []string{"goto " + chainReject}
	case vDrop:
		e.Value = []string{"drop"}
	}
	if c.v == vReject || c.v == vDrop {
		// "namespace/name:port" may reach 143 bytes; nft refuses comments
		// over 128, and with them the whole transaction.
		name := c.owner.Name.String()
		e.Comment = ptr(name[:min(len(name), knftables.CommentLengthMax)])
	}
	return e
}

// elementKey renders an element with its key only, for a delete.
func (r *renderer) elementKey(k elemKey) *knftables.Element {
	e := &knftables.Element{Family: r.family, Table: r.table}
	name := containerNames[k.c]
	if k.c == cClusterIPs {
		e.Set = name
		e.Key = []string{k.addr.String()}
		return e
	}
	e.Map = name
	proto := strings.ToLower(string(k.proto))
	port := strconv.Itoa(int(k.port))
	if k.addr.IsValid() {
		e.Key = []string{k.addr.String(), proto, port}
	} else {
		e.Key = []string{proto, port}
	}
	return e
}

func unsafeWarning(s *ruleset.Service) svcproxy.Warning {
	return svcproxy.Warning{
		Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
		Reason: fmt.Sprintf("port %q/%s: name not usable in nftables chain names: not served", s.Name.Port, s.Name.Protocol),
	}
}

func conflictWarning(s *ruleset.Service, k elemKey, owner *ruleset.Service) svcproxy.Warning {
	var what string
	if k.addr.IsValid() {
		what = fmt.Sprintf("%s %s", netip.AddrPortFrom(k.addr, k.port), k.proto)
	} else {
		what = fmt.Sprintf("node port %d/%s", k.port, k.proto)
	}
	return svcproxy.Warning{
		Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
		Reason: fmt.Sprintf("port %q/%s: %s (%s) is already used by %s: not served there", s.Name.Port, s.Name.Protocol, what, containerNames[k.c], owner.Name),
	}
}

func ptr[T any](v T) *T { return &v }

// Script is the nft script that Render writes for rs into a table that does
// not exist yet: what a dry run prints. It needs no nft binary.
func Script(rs *ruleset.Ruleset, opts Options) (string, Result, error) {
	tx := knftables.NewFake("", "").NewTransaction()
	res, err := Render(tx, rs, opts, map[string][]string{})
	if err != nil {
		return "", Result{}, err
	}
	return tx.String(), res, nil
}
