package ruleset

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/svcproxy/svcproxy/internal/parallel"
)

// SharedDestinations returns the destinations (Frontends without their
// kind) at which r has frontends of more than one Service port, or of one
// port through two kinds (an address that is both an external and a
// load-balancer IP), sorted. Every other frontend of a Service port is its
// own: Owns is true for it, and ServicesAt names only its port; a renderer
// of a whole table asks Owns and ServicesAt about the shared ones only. It
// takes O(n log n) time for n frontends, and does not build the index that
// ServicesAt and Owns use. For many Services it hashes and sorts the
// frontends in up to GOMAXPROCS goroutines; the result is the same for
// every number.
func (r *Ruleset) SharedDestinations() []Frontend {
	svcs := r.Services()
	return sharedDestinations(svcs, destRanges(svcs), layoutFor(len(svcs)))
}

// keyLayout is how sharedDestinations packs a frontend of a Service into
// one integer, its key: the top hashBits bits of its destination's hash
// (destHash), then the Service's index in the low svcBits bits. Keys sort
// without pointers or a compare function, and the frontends at one
// destination have keys of one hash part.
type keyLayout struct {
	hashBits, svcBits uint
}

// layoutFor is the layout of the keys of n Services: every bit that the
// Services' indexes leave is the hash's.
func layoutFor(n int) keyLayout {
	svcBits := uint(bits.Len(uint(n)))
	return keyLayout{hashBits: 64 - svcBits, svcBits: svcBits}
}

// hashPart returns the top hashBits bits of destination d's hash.
func (l keyLayout) hashPart(d Frontend) uint64 {
	if l.hashBits == 0 {
		return 0
	}
	return destHash(d) >> (64 - l.hashBits)
}

// sharedDestinations is SharedDestinations of svcs, sorted by name, whose
// keys are made and sorted in ranges (contiguous, in order, covering
// svcs), one goroutine each, in layout l. The keys tell which frontends
// may share a destination: those whose hash part some other frontend's key
// has too. Only those are compared as Frontends, so a collision of hashes
// costs time, never a wrong result.
func sharedDestinations(svcs []*Service, ranges [][2]int, l keyLayout) []Frontend {
	runs := make([][]uint64, len(ranges))
	parallel.Run(ranges, func(i, lo, hi int) {
		runs[i] = sortedKeys(svcs, lo, hi, l)
	})
	hashes, candidates := collisions(runs, l)
	if len(hashes) == 0 {
		return nil
	}
	return sharedAmong(svcs, candidates, hashes, l)
}

// sortedKeys returns the keys of the frontends of svcs[lo:hi]
// (appendFrontends: a frontend a port has twice is there twice), sorted.
func sortedKeys(svcs []*Service, lo, hi int, l keyLayout) []uint64 {
	keys := make([]uint64, 0, 3*(hi-lo))
	var buf []Frontend
	for i := lo; i < hi; i++ {
		buf = svcs[i].appendFrontends(buf[:0])
		for _, f := range buf {
			keys = append(keys, l.hashPart(f.destination())<<l.svcBits|uint64(i))
		}
	}
	return sortByTopBits(keys)
}

// minBucketSort is the fewest keys that sortByTopBits puts into buckets;
// fewer are sorted by comparison.
const minBucketSort = 256

// sortByTopBits returns keys sorted, in keys or in a new slice. It is
// fastest for keys whose top bits are spread evenly, as hashes are: it
// puts them into about as many buckets as there are keys by their top
// bits (a counting sort) and sorts each bucket, of about one key, by
// comparison. Keys whose top bits are equal land in one bucket and cost as
// a comparison sort does.
func sortByTopBits(keys []uint64) []uint64 {
	if len(keys) < minBucketSort {
		slices.Sort(keys)
		return keys
	}
	shift := 64 - bits.Len(uint(len(keys)))
	// starts[b] is where bucket b begins in sorted, and after the scatter
	// below, where it ends.
	starts := make([]int32, 1<<(64-shift)+1)
	for _, k := range keys {
		starts[k>>shift+1]++
	}
	for b := 1; b < len(starts); b++ {
		starts[b] += starts[b-1]
	}
	sorted := make([]uint64, len(keys))
	for _, k := range keys {
		b := k >> shift
		sorted[starts[b]] = k
		starts[b]++
	}
	lo := int32(0)
	for _, hi := range starts[:len(starts)-1] {
		if hi-lo > 1 {
			slices.Sort(sorted[lo:hi])
		}
		lo = hi
	}
	return sorted
}

// collisions walks the sorted runs of keys merged and returns the hash
// parts that more than one key has, sorted, and the indexes of the
// Services of those keys, sorted, each once.
func collisions(runs [][]uint64, l keyLayout) (hashes []uint64, svcs []int) {
	svcMask := uint64(1)<<l.svcBits - 1
	var prev uint64
	started, colliding := false, false
	eachKey(runs, func(k uint64) {
		switch {
		case !started || k>>l.svcBits != prev>>l.svcBits:
			started, colliding = true, false
		case !colliding:
			colliding = true
			hashes = append(hashes, prev>>l.svcBits)
			svcs = append(svcs, int(prev&svcMask))
			fallthrough
		default:
			svcs = append(svcs, int(k&svcMask))
		}
		prev = k
	})
	slices.Sort(svcs)
	return hashes, slices.Compact(svcs)
}

// eachKey calls yield with the keys of the sorted runs in sorted order.
func eachKey(runs [][]uint64, yield func(uint64)) {
	heads := make([]int, len(runs))
	for {
		best := -1
		for r, run := range runs {
			if heads[r] < len(run) && (best < 0 || run[heads[r]] < runs[best][heads[best]]) {
				best = r
			}
		}
		if best < 0 {
			return
		}
		yield(runs[best][heads[best]])
		heads[best]++
	}
}

// placedFrontend is a frontend of the Service of index svc, with its
// destination.
type placedFrontend struct {
	dest Frontend
	svc  int
	kind FrontendKind
}

// sharedAmong returns the shared destinations of svcs, sorted, given the
// hash parts (sorted) that more than one frontend's key has, and the
// indexes of the Services with those frontends: it collects their
// frontends whose hash part is one of hashes (every frontend at every
// destination that may be shared), sorts them by destination and keeps
// the destinations with frontends of two Services or two kinds.
func sharedAmong(svcs []*Service, candidates []int, hashes []uint64, l keyLayout) []Frontend {
	var placed []placedFrontend
	var buf []Frontend
	for _, i := range candidates {
		buf = svcs[i].appendFrontends(buf[:0])
		for _, f := range buf {
			d := f.destination()
			if _, ok := slices.BinarySearch(hashes, l.hashPart(d)); ok {
				placed = append(placed, placedFrontend{d, i, f.Kind})
			}
		}
	}
	slices.SortFunc(placed, func(a, b placedFrontend) int { return a.dest.Compare(b.dest) })
	var shared []Frontend
	for start := 0; start < len(placed); {
		first := placed[start]
		end, one := start+1, true
		for ; end < len(placed) && placed[end].dest == first.dest; end++ {
			one = one && placed[end].svc == first.svc && placed[end].kind == first.kind
		}
		if !one {
			shared = append(shared, first.dest)
		}
		start = end
	}
	return shared
}

// destHash returns a hash of destination d (a Frontend without its kind):
// equal destinations have equal hashes, in every process (no seed).
func destHash(d Frontend) uint64 {
	k, ok := frontendKeyOf(d)
	if !ok {
		a := d.Addr.As16()
		k = frontendKey{
			hi:   binary.BigEndian.Uint64(a[:8]) ^ stringHash(d.Addr.Zone()),
			lo:   binary.BigEndian.Uint64(a[8:]),
			rest: stringHash(string(d.Protocol)) ^ uint64(d.Port),
		}
	}
	return mix(mix(k.hi^mix(k.rest)) ^ k.lo)
}

// mix is a bijection of 64-bit words that spreads each bit of its input
// over all bits of its output (MurmurHash3's finalizer).
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// stringHash is the 64-bit FNV-1a hash of s.
func stringHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
