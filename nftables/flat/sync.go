package flat

import (
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/names"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// State is what the flat layout's incremental render knows about the
// table it writes: the endpoint counts in use per target group and
// protocol, the hairpin keys and the affinity classes (group,
// protocol, timeout), each with the number of Service ports (or frontends)
// that use it.
// Render, Script and FirstSync make it; RenderChanges
// updates it in place, so after a transaction that failed the caller
// renders the whole table again.
type State struct {
	r       *flatRenderer
	counts  map[groupN]int
	hairpin hairpinCounts
	// affinity counts the Service port frontends of each affinity class.
	affinity map[affinityClass]int
}

// Render writes the whole flat-layout table of rs into tx as knftables
// operations (for knftables, its Fake and --dry-run): the table and its
// chains and sets (added, then flushed), and every element. Into a table
// that held another Ruleset it leaves the sets of endpoint counts no longer
// in use, empty; Script replaces the table whole. It is pure. With a nil
// tx it writes nothing, and returns no State.
func Render(tx *knftables.Transaction, rs *ruleset.Ruleset, opts Options) (*State, Result) {
	if tx == nil {
		return nil, Result{}
	}
	st, t, res := flatTableIn(rs, opts, parallel.Ranges(rs.Len(), flatRangeMin), false)
	for _, o := range t.Objects() {
		tx.Add(o)
		switch o.(type) {
		case *knftables.Chain, *knftables.Set, *knftables.Map:
			tx.Flush(o)
		}
	}
	return st, res
}

// flatTable is the whole flat-layout table of rs, and its state, with the
// elements of its Service ports in blocks (portBlocks). It renders ranges
// of rs's Service ports on up to GOMAXPROCS goroutines (parallel.Run) and
// joins them in order: the table is the same for every split.
func flatTable(rs *ruleset.Ruleset, opts Options) (*State, *model.Table, Result) {
	return flatTableIn(rs, opts, parallel.Ranges(rs.Len(), flatRangeMin), true)
}

// flatTableIn is flatTable with rs's Service ports split into ranges (as
// parallel.Ranges splits them), their elements in blocks set by set when
// inBlocks, else one by one, port by port: the same script
// (model.Table.Script) either way.
func flatTableIn(rs *ruleset.Ruleset, opts Options, ranges [][2]int, inBlocks bool) (*State, *model.Table, Result) {
	st := &State{r: newFlatRenderer(rs.Config(), opts), counts: map[groupN]int{}, affinity: map[affinityClass]int{}}
	svcs := rs.Services()
	owners := wholeTableOwnership(rs)
	parts := make([]flatRange, len(ranges))
	// A range's blocks are few, in an array of their own: every window is
	// empty, and joinElements copies them after the configuration's. One
	// by one, one array has room for the configuration's elements, a
	// window of flatElementsPerPort per port for each range, and the
	// hairpin block; a range that outgrows its window moves to an array of
	// its own.
	all := st.r.flatConfigElements()
	windows := make([]int, len(ranges)+1)
	for i := range windows {
		windows[i] = len(all)
	}
	if !inBlocks {
		all = append(make([]model.Element, 0, len(all)+flatElementsPerPort*len(svcs)+1), all...)
		for i, r := range ranges {
			windows[i+1] = windows[i] + flatElementsPerPort*(r[1]-r[0])
		}
	}
	parallel.Run(ranges, func(i, lo, hi int) {
		parts[i] = st.renderRange(owners, svcs[lo:hi], all[windows[i]:windows[i]:windows[i+1]], inBlocks)
	})
	var res Result
	elements := joinElements(all, parts, windows)
	var hairpin useKeys
	for i := range parts {
		p := &parts[i]
		res.Warnings = append(res.Warnings, p.warnings...)
		st.addCounts(p.counts)
		hairpin = hairpin.merge(p.hairpin)
	}
	st.hairpin = countSorted(hairpin)
	t := st.table()
	t.Elements = elements
	if n := st.hairpin.inUse(); n > 0 {
		t.Elements = append(t.Elements, model.Element{Set: flatSetHairpin, Rows: n, Source: &hairpinRows{st.hairpin}})
	}
	return st, t, res
}

// joinElements returns the configuration's elements (all) followed by
// each part's, in order, with room for one more. Part i rendered into its
// window of all's array, [windows[i], windows[i+1]), or, having outgrown
// it, into an array of its own. When none outgrew its window, the parts
// move down in place, each to just after the ones before: a part moves
// towards the start of the array and ends within its own window, so none
// overwrites a part not yet moved (append copies as memmove does).
func joinElements(all []model.Element, parts []flatRange, windows []int) []model.Element {
	n, inPlace := len(all), true
	for i := range parts {
		n += len(parts[i].elements)
		inPlace = inPlace && len(parts[i].elements) <= windows[i+1]-windows[i]
	}
	out := all
	if !inPlace || n > cap(all) {
		out = make([]model.Element, 0, n+1)
		out = append(out, all...)
	}
	for i := range parts {
		out = append(out, parts[i].elements...)
	}
	return out
}

// flatRangeMin is the fewest Service ports that flatTable renders on a
// goroutine of their own.
const flatRangeMin = 1024

// flatElementsPerPort is the room for elements that flatTable makes per
// Service port: the cluster-ips set's, and a set's element and a block of
// targets for the cluster IP, and one more. A range whose ports need more
// than its window's room moves to an array of its own (joinElements).
const flatElementsPerPort = 4

// flatRange is what one range of a Ruleset's Service ports puts in a whole
// table: elements, warnings, the uses of groups and affinity classes, and
// its hairpin keys, sorted (a use each).
type flatRange struct {
	elements []model.Element
	warnings []svcproxy.Warning
	counts   *State
	hairpin  useKeys
}

// renderRange renders svcs, a range of the Service ports of a whole table
// whose ownership is o, appending their elements to elements; or, when
// inBlocks, returning them in blocks set by set (portBlocks). It writes
// nothing that another range reads: its renderer is a copy of st's with
// its own cache of set names.
func (st *State) renderRange(o ownership, svcs []*ruleset.Service, elements []model.Element, inBlocks bool) flatRange {
	r := *st.r
	r.setNames = map[groupN]groupSetNames{}
	out := flatRange{counts: &State{counts: map[groupN]int{}, affinity: map[affinityClass]int{}}}
	acc := flatPort{elements: elements, arenaChunk: 1 << 14, hairpinKeys: &out.hairpin}
	if inBlocks { // the port's keys are copied before its next
		acc.arenaChunk = 1 << 8
	}
	targets := 0
	for _, s := range svcs {
		targets += len(s.ClusterTargets) + len(s.LocalTargets)
	}
	if r.family == model.IPv4 {
		out.hairpin.v4 = make([]uint64, 0, targets)
	} else {
		out.hairpin.v6 = make([]v6Key, 0, targets)
	}
	var fs []ruleset.Frontend
	comments := portComments(svcs)
	var blocks *portBlocks
	if inBlocks {
		blocks = newPortBlocks(&r, svcs, comments)
	}
	for i, s := range svcs {
		comment := comments.at(i)
		if comment == "" {
			out.warnings = append(out.warnings, names.UnsafeWarning(s))
			continue
		}
		acc.groups, acc.affinity = acc.groups[:0], acc.affinity[:0]
		if blocks != nil { // the port's elements and keys are blocks' now
			acc.elements, acc.arena = acc.elements[:0], acc.arena[:0]
		}
		fs = s.AppendFrontends(fs[:0])
		out.warnings = append(out.warnings, r.portInto(&acc, o, s, fs, comment)...)
		out.counts.countClasses(acc, 1)
		if blocks != nil {
			blocks.add(i, acc.elements)
		}
	}
	out.elements = acc.elements
	if blocks != nil {
		out.elements = blocks.elements()
	}
	out.hairpin.sort()
	return out
}

// addCounts adds the uses of groups and affinity classes that part counted.
func (st *State) addCounts(part *State) {
	for k, n := range part.counts {
		st.counts[k] += n
	}
	for c, n := range part.affinity {
		st.affinity[c] += n
	}
}

// table is the table with the sets and chains of the counts in use, and
// no elements.
func (st *State) table() *model.Table {
	r := st.r
	t := &model.Table{Family: r.family, Name: r.table, Comment: "Service proxy rules (flat layout)", Sets: r.flatFixedSets()}
	for _, k := range sortedGroups(st.counts) {
		t.Sets = append(t.Sets, r.groupSets(k)...)
	}
	t.Chains = append(r.flatBaseChains(), r.flatFixedChains()...)
	for g := range numGroups {
		t.Chains = append(t.Chains, st.groupChain(g))
	}
	st.addAffinity(t)
	return t
}

// count adds (sign 1) or removes (sign −1) a port's uses of groups and
// hairpin keys.
func (st *State) count(p flatPort, sign int) {
	st.countClasses(p, sign)
	for _, k := range p.hairpin {
		st.hairpin.add(k, int32(sign))
	}
}

// countClasses adds (sign 1) or removes (sign −1) a port's uses of groups
// and affinity classes.
func (st *State) countClasses(p flatPort, sign int) {
	for _, k := range p.groups {
		if st.counts[k] += sign; st.counts[k] == 0 {
			delete(st.counts, k)
		}
	}
	for _, c := range p.affinity {
		if st.affinity[c] += sign; st.affinity[c] == 0 {
			delete(st.affinity, c)
		}
	}
}

// uses are the current use counts of the groups and hairpin keys that
// ports use.
func (st *State) uses(ports []flatPort) (map[groupN]int, map[hairpinKey]int32) {
	groups, hairpin := map[groupN]int{}, map[hairpinKey]int32{}
	for _, p := range ports {
		for _, k := range p.groups {
			groups[k] = st.counts[k]
		}
		for _, k := range p.hairpin {
			hairpin[k] = st.hairpin.get(k)
		}
	}
	return groups, hairpin
}

// hairpinRows make the rows of the hairpin set's block from the keys that
// countSorted counted: row i is the element of the i'th key. Later changes
// to the counts leave the arrays that the rows are made from as they are
// (sortedCounts.merge makes new ones).
type hairpinRows struct{ c hairpinCounts }

func (*hairpinRows) Widths() (key, value int) { return 4, 0 }

func (h *hairpinRows) AppendRow(dst []model.Datum, i int) []model.Datum {
	return appendHairpin(dst, h.c.at(i))
}

// appendHairpin appends the key of k's element in the hairpin set: its
// address as source and destination, its protocol and port.
func appendHairpin(dst []model.Datum, k hairpinKey) []model.Datum {
	return model.AppendAddrProtoPort(append(dst, model.Addr(k.addr)), k.addr, k.proto, k.port)
}

// Changes is what RenderChanges wrote: the Result, and the element
// changes that Netlink can send instead of the transaction when
// ElementsOnly.
type Changes struct {
	Result
	// ElementsOnly reports that the change adds and deletes elements only:
	// no endpoint count of a protocol appeared in or left a target group.
	ElementsOnly bool
	table        *model.Table
	add, del     []model.Element
}

// RenderChanges writes into tx what turns the table of old (as st
// knows it) into that of new, and updates st. Unchanged Service ports are
// not read beyond those that share a frontend with a changed one; rules
// change only when an endpoint count of a protocol appears in or leaves a
// target group.
// It returns svcproxy.ErrFullSyncNeeded when the Configs differ or st is nil.
func RenderChanges(tx *knftables.Transaction, st *State, old, new *ruleset.Ruleset) (Changes, error) {
	if tx == nil {
		return Changes{}, errors.New("nftables/flat: nil Transaction")
	}
	ch := ruleset.Diff(old, new)
	if st == nil || st.r == nil || old == nil || ch.ConfigChanged {
		return Changes{}, svcproxy.ErrFullSyncNeeded
	}
	var out Changes
	var olds, news []flatPort
	for _, name := range affectedPorts(old, new, ch) {
		if s, ok := old.Service(name); ok {
			p, _ := st.r.port(old, s)
			olds, out.del = append(olds, p), append(out.del, model.Expand(p.elements)...)
		}
		if s, ok := new.Service(name); ok {
			p, warns := st.r.port(new, s)
			out.Warnings = append(out.Warnings, warns...)
			news, out.add = append(news, p), append(out.add, model.Expand(p.elements)...)
		}
	}
	groupsBefore, hairpinBefore := st.uses(slices.Concat(olds, news))
	affinityBefore := st.affinityKeys()
	for _, p := range olds {
		st.count(p, -1)
	}
	for _, p := range news {
		st.count(p, 1)
	}
	var oldGroups, newGroups []groupN
	for k, before := range groupsBefore {
		switch after := st.counts[k]; {
		case before > 0 && after == 0:
			oldGroups = append(oldGroups, k)
		case before == 0 && after > 0:
			newGroups = append(newGroups, k)
		}
	}
	var hairpin []hairpinKey
	for k, before := range hairpinBefore {
		if (before == 0) != (st.hairpin.get(k) == 0) {
			hairpin = append(hairpin, k)
		}
	}
	sortGroups(oldGroups)
	sortGroups(newGroups)
	out.del, out.add = elementDiff(out.del, out.add)
	out.table = st.table()
	st.hairpinChanges(&out, hairpin)
	affinity := affinityChanged(affinityBefore, st.affinity)
	out.ElementsOnly = len(oldGroups)+len(newGroups) == 0 && !affinity
	if affinity {
		st.addAffinityObjects(tx, out.table)
	}
	st.write(tx, &out, oldGroups, newGroups)
	if affinity {
		st.rewriteAffinity(tx, out.table, affinityBefore)
	}
	return out, nil
}

// affectedPorts are the changed Service ports and those that share a
// frontend with one of them, in old or in new, sorted.
func affectedPorts(old, new *ruleset.Ruleset, ch ruleset.Changes) []servicemap.PortName {
	seen := map[servicemap.PortName]bool{}
	for _, name := range slices.Concat(ch.Added, ch.Changed, ch.Removed) {
		seen[name] = true
		for _, rs := range []*ruleset.Ruleset{old, new} {
			s, ok := rs.Service(name)
			if !ok {
				continue
			}
			for _, f := range s.Frontends() {
				for _, other := range slices.Concat(old.ServicesAt(f), new.ServicesAt(f)) {
					seen[other] = true
				}
			}
		}
	}
	names := make([]servicemap.PortName, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.SortFunc(names, servicemap.PortName.Compare)
	return names
}

// elementDiff drops from del the elements that are added unchanged, and
// keeps every element of add: adding an element the table holds is no
// error, and one that something deleted behind the Executor's back comes
// back with the first change of its Service port.
func elementDiff(del, add []model.Element) (d, a []model.Element) {
	key := func(e model.Element) string { return fmt.Sprint(e.Set, e.Key, e.Value, e.Comment) }
	inAdd := make(map[string]bool, len(add))
	for _, e := range add {
		inAdd[key(e)] = true
	}
	for _, e := range del {
		if !inAdd[key(e)] {
			d = append(d, e)
		}
	}
	return d, add
}

// hairpinChanges adds the hairpin elements whose use began or ended.
func (st *State) hairpinChanges(out *Changes, keys []hairpinKey) {
	slices.SortFunc(keys, compareHairpin)
	for _, k := range slices.Compact(keys) {
		e := model.Element{Set: flatSetHairpin, Key: appendHairpin(make([]model.Datum, 0, 4), k)}
		if st.hairpin.get(k) > 0 {
			out.add = append(out.add, e)
		} else {
			out.del = append(out.del, e)
		}
	}
}

// write puts the changes into tx: sets of counts that appear, element
// deletions and additions, the chains of groups whose counts changed
// (flushed and rewritten), then the sets of counts that left.
func (st *State) write(tx *knftables.Transaction, out *Changes, oldGroups, newGroups []groupN) {
	t := out.table
	for _, k := range newGroups {
		if st.counts[k] > 0 {
			for _, s := range st.r.groupSets(k) {
				tx.Add(t.SetObject(s))
			}
		}
	}
	for _, e := range out.del {
		tx.Delete(t.ElementObject(e))
	}
	for _, e := range out.add {
		tx.Add(t.ElementObject(e))
	}
	changed := map[flatGroup]bool{}
	for _, k := range slices.Concat(oldGroups, newGroups) {
		changed[k.group] = true
	}
	for g := range numGroups {
		if changed[g] {
			c := st.groupChain(g)
			tx.Flush(t.ChainObject(c))
			for _, o := range t.RuleObjects(c) {
				tx.Add(o)
			}
		}
	}
	for _, k := range slices.Concat(oldGroups, newGroups) {
		if st.counts[k] == 0 {
			for _, s := range st.r.groupSets(k) {
				tx.Delete(t.SetObject(s))
			}
		}
	}
}

// Script is the whole flat-layout table of rs as one `nft -f` script
// that replaces the table in one transaction, with each set's elements in
// one statement (see Render for the same table as knftables
// operations), and the state RenderChanges continues from.
func Script(rs *ruleset.Ruleset, opts Options) (*State, string, Result) {
	st, t, res := flatTable(rs, opts)
	return st, t.Script(), res
}

// Load is a whole flat-layout table to load into a table that does not
// exist yet: Definitions with nft (the table, its sets, chains and rules,
// and the few configuration elements of one-field interval sets), then
// every other element over netlink (Netlink.Load), in one transaction
// when the socket's send buffer could be raised (model.Dial), else in as
// few as it takes. Until the last, the table serves only the Service ports
// whose elements are in.
type Load struct {
	Definitions string
	table       *model.Table
	resync      bool
}

// FirstSync renders rs as a Load, with the state RenderChanges
// continues from.
func FirstSync(rs *ruleset.Ruleset, opts Options) (*State, Load, Result) {
	st, t, res := flatTable(rs, opts)
	return st, Load{Definitions: st.configTable(t).Definitions(), table: t}, res
}

// Resync renders rs as a Load for a table that the flat layout
// already holds, with the state RenderChanges continues from: its
// Definitions (one nft transaction) add the sets and chains that are
// missing, rewrite every chain's rules and the configuration's interval
// sets, and leave the other sets' elements in place; Netlink.Load then
// flushes those sets and adds their elements in one transaction (when the
// socket's send buffer could be raised), so that a Service port whose
// elements do not change is served throughout. The sets of endpoint counts
// that rs no longer uses stay, unreferenced, with their elements, until
// they are deleted or the table is next replaced (Script, or
// FirstSync into no table); the Executor deletes them in the
// definitions' transaction (it lists the table first).
func Resync(rs *ruleset.Ruleset, opts Options) (*State, Load, Result) {
	st, t, res := flatTable(rs, opts)
	return st, Load{Definitions: st.configTable(t).Redefinitions(), table: t, resync: true}, res
}

// configTable is t, the whole flat-layout table that st was rendered
// with, with only the configuration's elements, which flatTable puts
// first. Those hold every element of a one-field interval set
// (service-cidrs, cluster-cidrs): the elements that nft writes. So the
// Definitions, Redefinitions and NftElements of the configTable are t's,
// without a look at every Service port's elements.
func (st *State) configTable(t *model.Table) *model.Table {
	c := *t
	c.Elements = t.Elements[:len(st.r.flatConfigElements())]
	return &c
}
