package servicemap

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/internal/parallel"
	"github.com/svcproxy/svcproxy/internal/sorted"
)

// sortRangeMin is the fewest Services whose keys serviceOrder sorts on a
// goroutine of their own.
const sortRangeMin = 2048

// orderLayout is how serviceOrder packs the place of a Service into one
// integer, its order key: from the most significant bit down, the rank of
// its namespace among the distinct namespaces (rankBits), the first bytes
// of its name after the beginning that all names share (nameBits), and its
// index (idxBits). Order keys sort without a compare function. They order
// Services as their namespaces and names do, but for names whose first
// bytes agree in one namespace: those tie but for the index.
type orderLayout struct {
	rankBits, nameBits, idxBits uint
	// common is the length of the beginning that all names share.
	common int
}

// key returns the order key of the Service of index i, whose namespace
// has rank and whose name is name.
func (l orderLayout) key(rank int, name string, i int) uint64 {
	var b [8]byte
	copy(b[:], name[l.common:])
	var namePart uint64
	if l.nameBits > 0 {
		namePart = binary.BigEndian.Uint64(b[:]) >> (64 - l.nameBits)
	}
	return uint64(rank)<<(l.nameBits+l.idxBits) | namePart<<l.idxBits | uint64(i)
}

// index returns the index in an order key.
func (l orderLayout) index(k uint64) int { return int(k & (1<<l.idxBits - 1)) }

// serviceOrder returns the indexes of keys sorted by namespace, then name,
// as order keys (orderLayout.index reads them). The keys are split into
// ranges, one per goroutine (up to GOMAXPROCS): each range numbers its
// namespaces and finds the beginning its names share; then, once the
// namespaces are ranked, each makes and sorts its order keys; the ranges'
// keys are merged, and the runs of names that tie in their keys sorted by
// name.
func serviceOrder(keys []types.NamespacedName) ([]uint64, orderLayout) {
	return serviceOrderIn(keys, parallel.Ranges(len(keys), sortRangeMin))
}

// serviceOrderIn is serviceOrder with keys split into ranges (contiguous,
// in order, covering keys).
func serviceOrderIn(keys []types.NamespacedName, ranges [][2]int) ([]uint64, orderLayout) {
	parts := make([]rangeNamespaces, len(ranges))
	ids := make([]int32, len(keys))
	parallel.Run(ranges, func(r, lo, hi int) {
		parts[r] = numberNamespaces(keys, lo, hi, ids)
	})
	distinct := rankNamespaces(parts)
	l := orderLayout{
		rankBits: uint(bits.Len(uint(max(distinct-1, 0)))),
		idxBits:  uint(bits.Len(uint(len(keys)))),
		common:   commonLength(parts),
	}
	l.nameBits = 64 - l.rankBits - l.idxBits
	order := make([]uint64, len(keys))
	parallel.Run(ranges, func(r, lo, hi int) {
		for i := lo; i < hi; i++ {
			order[i] = l.key(parts[r].ranks[ids[i]], keys[i].Name, i)
		}
		slices.Sort(order[lo:hi])
	})
	merged := order[ranges[0][0]:ranges[0][1]]
	for _, r := range ranges[1:] {
		merged = sorted.Merge(merged, order[r[0]:r[1]], cmp.Compare[uint64])
	}
	sortTies(merged, l, keys)
	return merged, l
}

// rangeNamespaces is what numberNamespaces finds in one range of keys.
type rangeNamespaces struct {
	// namespaces are the range's distinct namespaces, in the order first
	// seen: a namespace's number is its index here.
	namespaces []string
	// ranks are, by number, the ranks of the namespaces among those of
	// every range (rankNamespaces fills them).
	ranks []int
	// firstName is the name of the range's first key, and common the
	// length of the beginning that every name of the range shares with it.
	firstName string
	common    int
}

// numberNamespaces numbers the distinct namespaces of keys[lo:hi], in the
// order first seen, and sets ids[i] to the number of keys[i]'s.
func numberNamespaces(keys []types.NamespacedName, lo, hi int, ids []int32) rangeNamespaces {
	var part rangeNamespaces
	if lo == hi {
		return part
	}
	numbers := map[string]int32{}
	part.firstName, part.common = keys[lo].Name, len(keys[lo].Name)
	for i := lo; i < hi; i++ {
		ns := keys[i].Namespace
		id, ok := numbers[ns]
		if !ok {
			id = int32(len(part.namespaces))
			numbers[ns] = id
			part.namespaces = append(part.namespaces, ns)
		}
		ids[i] = id
		part.common = commonPrefix(part.firstName[:part.common], keys[i].Name)
	}
	return part
}

// rankNamespaces fills the ranks of parts, the namespaces of every range
// sorted, and returns how many distinct namespaces there are.
func rankNamespaces(parts []rangeNamespaces) int {
	var all []string
	for _, p := range parts {
		all = append(all, p.namespaces...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	for r := range parts {
		parts[r].ranks = make([]int, len(parts[r].namespaces))
		for id, ns := range parts[r].namespaces {
			parts[r].ranks[id], _ = slices.BinarySearch(all, ns)
		}
	}
	return len(all)
}

// commonLength returns the length of the beginning that every name of
// every range shares.
func commonLength(parts []rangeNamespaces) int {
	n, first := -1, ""
	for _, p := range parts {
		switch {
		case len(p.namespaces) == 0:
		case n < 0:
			n, first = p.common, p.firstName
		default:
			n = commonPrefix(first[:n], p.firstName[:p.common])
		}
	}
	return max(n, 0)
}

// commonPrefix returns the length of the longest beginning of a and b
// that they share.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// sortTies sorts by name each run of sorted order keys that differ only
// in their indexes: Services of one namespace whose names' first bytes
// agree.
func sortTies(order []uint64, l orderLayout, keys []types.NamespacedName) {
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && order[end]>>l.idxBits == order[start]>>l.idxBits {
			end++
		}
		if end-start > 1 {
			slices.SortFunc(order[start:end], func(a, b uint64) int {
				return strings.Compare(keys[l.index(a)].Name, keys[l.index(b)].Name)
			})
		}
		start = end
	}
}
