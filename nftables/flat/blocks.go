package flat

import (
	"slices"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// portBlocks holds what the Service ports of one range of a whole flat
// table put in the table, set by set: the elements that all sets but the
// interval sets hold one per frontend (a frontend's key, or a block of its
// targets) as blocks of rows (portRows) made from a few bytes per
// frontend, the others as elements. A range's ports render into a
// flatPort that is emptied for each; add takes its elements in. Per set,
// the elements keep their ports' order, and the sets the order in which
// they first appear: the table's script is the same as from the elements
// one by one.
type portBlocks struct {
	svcs     []*ruleset.Service
	comments portCommentList
	// interval are the interval sets, whose elements stay elements.
	interval map[string]bool
	sets     []*portSet
	bySet    map[string]*portSet
	// previous are the sets of the elements of the port added last, in
	// order: a port's k-th element is most often in the same set as the
	// previous port's, found without hashing its name.
	previous []*portSet
	// keys hold the entries' keys, in chunks of keyChunk data that are
	// never moved, addressed by keyRef; lastKey is the key of the port
	// being added that was last stored, at lastRef (a frontend's key is
	// that of two entries: its set's and its targets').
	keys    [][]model.Datum
	lastKey []model.Datum
	lastRef uint32
	// data holds the keys of the elements that stay elements.
	data []model.Datum
}

// keyChunk is the number of data in a chunk of portBlocks.keys. A keyRef
// is a chunk's index times keyChunk plus a key's offset in it.
const keyChunk = 1 << 12

// portSet is one set's part of a range: its elements, the last of which,
// while rows is set, are rows' (not yet in elements).
type portSet struct {
	set      string
	interval bool
	elements []model.Element
	rows     *portRows
}

// portRows makes the rows of a block of a set's elements of several ports:
// each entry is one element, a key, or a block of targets (a frontend's
// key and its targets under indices 0…N−1, as targetRows makes them); the
// block's rows are the entries' in order, each entry's targets in order.
// Each row has its port's comment.
type portRows struct {
	b *portBlocks
	// width is the number of data of an entry's key.
	width int
	// targets is N for entries that are blocks of N targets, 0 for keys.
	targets int
	entries []portEntry
	// maxComment is the length of the longest comment of an entry's port.
	maxComment int
}

// portEntry is an entry of a portRows: its key (a keyRef in b.keys) and
// its port, by index in b.svcs, with portLocal set for an entry of the
// port's LocalTargets.
type portEntry struct{ key, port uint32 }

// portLocal marks, in portEntry.port, an entry of the LocalTargets.
const portLocal = 1 << 31

// newPortBlocks holds the elements of svcs, whose comments are comments,
// for the flat layout's table as r renders it.
func newPortBlocks(r *flatRenderer, svcs []*ruleset.Service, comments portCommentList) *portBlocks {
	b := &portBlocks{svcs: svcs, comments: comments, interval: map[string]bool{}, bySet: map[string]*portSet{}}
	for _, s := range r.flatFixedSets() {
		b.interval[s.Name] = s.Interval
	}
	return b
}

// add takes in the elements es of port i (an index in b.svcs), which
// refer to data that the caller reuses.
func (b *portBlocks) add(i int, es []model.Element) {
	s := b.svcs[i]
	b.lastKey = nil
	for k := range es {
		e := &es[k]
		ps := b.set(k, e.Set)
		if local, ok := b.entry(i, s, ps, e); ok {
			if r := ps.rows; r == nil || r.width != len(e.Key) || r.targets != e.Rows {
				ps.end()
				ps.rows = &portRows{b: b, width: len(e.Key), targets: e.Rows}
			}
			port := uint32(i)
			if local {
				port |= portLocal
			}
			ps.rows.add(portEntry{b.storeKey(e.Key), port}, len(e.Comment))
			continue
		}
		ps.end()
		kept := *e
		start := len(b.data)
		b.data = append(append(b.data, e.Key...), e.Value...)
		kept.Key = b.data[start : start+len(e.Key) : start+len(e.Key)]
		if e.Value != nil {
			kept.Value = b.data[start+len(e.Key) : len(b.data) : len(b.data)]
		}
		ps.elements = append(ps.elements, kept)
	}
}

// set is the portSet of set, the k-th element's of the port being added.
func (b *portBlocks) set(k int, set string) *portSet {
	if k < len(b.previous) && b.previous[k].set == set {
		return b.previous[k]
	}
	ps := b.bySet[set]
	if ps == nil {
		ps = &portSet{set: set, interval: b.interval[set]}
		b.bySet[set] = ps
		b.sets = append(b.sets, ps)
	}
	if k < len(b.previous) {
		b.previous[k] = ps
	} else {
		b.previous = append(b.previous, ps)
	}
	return ps
}

// entry reports whether e, an element of port i, s, in ps, can be an
// entry of a portRows, and whether it is a block of s's LocalTargets: a
// key, or a block of the port's targets, with the port's comment, in a
// set that is not an interval set.
func (b *portBlocks) entry(i int, s *ruleset.Service, ps *portSet, e *model.Element) (local, ok bool) {
	if e.Value != nil || e.Verdict != nil || ps.interval || e.Comment != b.comments.at(i) {
		return false, false
	}
	switch {
	case e.Rows == 0:
		return false, e.Source == nil
	case e.Source == (*targetRows)(&s.ClusterTargets):
		return false, true
	case e.Source == (*targetRows)(&s.LocalTargets):
		return true, true
	}
	return false, false
}

// storeKey stores key in b.keys, once for the port being added, and
// returns its keyRef.
func (b *portBlocks) storeKey(key []model.Datum) uint32 {
	if len(key) > 0 && len(key) == len(b.lastKey) && &key[0] == &b.lastKey[0] {
		return b.lastRef
	}
	n := len(b.keys)
	if n == 0 || cap(b.keys[n-1])-len(b.keys[n-1]) < len(key) {
		b.keys = append(b.keys, make([]model.Datum, 0, max(keyChunk, len(key))))
		n++
	}
	chunk := &b.keys[n-1]
	b.lastKey, b.lastRef = key, uint32((n-1)*keyChunk+len(*chunk))
	*chunk = append(*chunk, key...)
	return b.lastRef
}

// key is the key of width data at ref.
func (b *portBlocks) key(ref uint32, width int) []model.Datum {
	off := ref % keyChunk
	return b.keys[ref/keyChunk][off : off+uint32(width)]
}

// end closes the set's block of rows, if it has one, as an element.
func (ps *portSet) end() {
	if r := ps.rows; r != nil {
		ps.elements = append(ps.elements, model.Element{Set: ps.set, Rows: len(r.entries) * max(r.targets, 1), Source: r})
		ps.rows = nil
	}
}

// elements are the range's elements, set by set.
func (b *portBlocks) elements() []model.Element {
	n := 0
	for _, ps := range b.sets {
		ps.end()
		n += len(ps.elements)
	}
	out := make([]model.Element, 0, n)
	for _, ps := range b.sets {
		out = append(out, ps.elements...)
	}
	return out
}

func (r *portRows) add(e portEntry, commentLen int) {
	if len(r.entries) == cap(r.entries) { // double: the entries of a whole set are many
		r.entries = slices.Grow(r.entries, max(len(r.entries), 16))
	}
	r.entries = append(r.entries, e)
	r.maxComment = max(r.maxComment, commentLen)
}

func (r *portRows) Widths() (key, value int) {
	if r.targets == 0 {
		return r.width, 0
	}
	return r.width + 1, 2
}

func (r *portRows) AppendRow(dst []model.Datum, i int) []model.Datum {
	if r.targets == 0 {
		return append(dst, r.b.key(r.entries[i].key, r.width)...)
	}
	e := r.entries[i/r.targets]
	dst = append(dst, r.b.key(e.key, r.width)...)
	return (*targetRows)(r.targetsOf(e)).AppendRow(dst, i%r.targets)
}

// targetsOf is the list of targets of entry e.
func (r *portRows) targetsOf(e portEntry) *[]ruleset.Target {
	s := r.b.svcs[e.port&^portLocal]
	if e.port&portLocal != 0 {
		return &s.LocalTargets
	}
	return &s.ClusterTargets
}

func (r *portRows) RowComment(i int) string {
	return r.b.comments.at(int(r.entries[i/max(r.targets, 1)].port &^ portLocal))
}

func (r *portRows) MaxCommentLen() int { return r.maxComment }
