package flat

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/internal/sorted"
	"github.com/svcproxy/svcproxy/ruleset"
)

// addrCounts counts the uses of endpoint addresses, IPv4 addresses under
// their 32 bits and IPv6 addresses under their 16 bytes (as two uint64s,
// which compare fast). Counted whole (countSorted), the uses are two sorted
// arrays, made in one pass; uses added later go into a map of changes,
// which is merged into the arrays when it grows past half their length (in
// O(n), so O(1) amortized per change). Filling a hash map with the
// addresses of a whole table costs a cache miss per address, a sort does
// not.
type addrCounts struct {
	v4 sortedCounts[uint32]
	v6 sortedCounts[v6Key]
}

// v6Key is an IPv6 address's 16 bytes, big-endian.
type v6Key struct{ hi, lo uint64 }

func v6KeyOf(a netip.Addr) v6Key {
	b := a.As16()
	return v6Key{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (k v6Key) addr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.AddrFrom16(b)
}

func compare6(a, b v6Key) int { return cmp.Or(cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo)) }

func v4Key(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func v4Addr(k uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)})
}

var compare4 = cmp.Compare[uint32]

// useKeys are the keys of uses of addresses, a use each (repeats kept):
// IPv4's and IPv6's.
type useKeys struct {
	v4 []uint32
	v6 []v6Key
}

// addLocalTargets appends the keys of the addresses of the targets that
// run on this node.
func (k *useKeys) addLocalTargets(targets []ruleset.Target) {
	for i := range targets {
		if !targets[i].Local {
			continue
		}
		if a := targets[i].Endpoint.Addr(); a.Is4() {
			k.v4 = append(k.v4, v4Key(a))
		} else {
			k.v6 = append(k.v6, v6KeyOf(a))
		}
	}
}

// sort sorts the keys.
func (k *useKeys) sort() {
	slices.Sort(k.v4)
	slices.SortFunc(k.v6, compare6)
}

// merge returns the keys of k and o, both sorted, in one sorted list.
func (k useKeys) merge(o useKeys) useKeys {
	return useKeys{sorted.Merge(k.v4, o.v4, compare4), sorted.Merge(k.v6, o.v6, compare6)}
}

// countSorted counts every use in k, sorted.
func countSorted(k useKeys) addrCounts {
	return addrCounts{v4: fromSorted(k.v4), v6: fromSorted(k.v6)}
}

// inUse is the number of addresses that c, as countSorted made it (no
// changes since), counts.
func (c *addrCounts) inUse() int { return len(c.v4.keys) + len(c.v6.keys) }

// at is the i'th address (0 ≤ i < inUse()) that c, as countSorted made it,
// counts, as netip.Addr.Compare sorts them (IPv4 before IPv6).
func (c *addrCounts) at(i int) netip.Addr {
	if i < len(c.v4.keys) {
		return v4Addr(c.v4.keys[i])
	}
	return c.v6.keys[i-len(c.v4.keys)].addr()
}

// add adds d (1 or −1) to a's uses.
func (c *addrCounts) add(a netip.Addr, d int32) {
	if a.Is4() {
		c.v4.add(v4Key(a), d, compare4)
	} else {
		c.v6.add(v6KeyOf(a), d, compare6)
	}
}

// get is a's uses.
func (c *addrCounts) get(a netip.Addr) int32 {
	if a.Is4() {
		return c.v4.get(v4Key(a), compare4)
	}
	return c.v6.get(v6KeyOf(a), compare6)
}

// sortedCounts are uses of keys: keys sorted, each once, with its uses in
// uses (at least 1), plus the changes since in delta (never 0).
type sortedCounts[K comparable] struct {
	keys  []K
	uses  []int32
	delta map[K]int32
}

// fromSorted counts the keys of sorted, in which a key is repeated once
// per use.
func fromSorted[K comparable](sorted []K) sortedCounts[K] {
	n := 0
	for i := range sorted {
		if i == 0 || sorted[i] != sorted[i-1] {
			n++
		}
	}
	c := sortedCounts[K]{keys: make([]K, 0, n), uses: make([]int32, 0, n)}
	for _, k := range sorted {
		if n := len(c.keys); n > 0 && c.keys[n-1] == k {
			c.uses[n-1]++
			continue
		}
		c.keys, c.uses = append(c.keys, k), append(c.uses, 1)
	}
	return c
}

func (c *sortedCounts[K]) get(k K, cmp func(a, b K) int) int32 {
	n := c.delta[k]
	if i, ok := slices.BinarySearchFunc(c.keys, k, cmp); ok {
		n += c.uses[i]
	}
	return n
}

func (c *sortedCounts[K]) add(k K, d int32, cmp func(a, b K) int) {
	if c.delta == nil {
		c.delta = map[K]int32{}
	}
	if c.delta[k] += d; c.delta[k] == 0 {
		delete(c.delta, k)
	}
	if len(c.delta) > 8+len(c.keys)/2 {
		c.merge(cmp)
	}
}

// merge moves the changes into the arrays, dropping keys no longer used.
func (c *sortedCounts[K]) merge(cmp func(a, b K) int) {
	added := make([]K, 0, len(c.delta))
	for k := range c.delta {
		if _, ok := slices.BinarySearchFunc(c.keys, k, cmp); !ok {
			added = append(added, k)
		}
	}
	slices.SortFunc(added, cmp)
	keys := make([]K, 0, len(c.keys)+len(added))
	uses := make([]int32, 0, len(c.keys)+len(added))
	keep := func(k K, n int32) {
		if n += c.delta[k]; n > 0 {
			keys, uses = append(keys, k), append(uses, n)
		}
	}
	i := 0
	for _, k := range added {
		for ; i < len(c.keys) && cmp(c.keys[i], k) < 0; i++ {
			keep(c.keys[i], c.uses[i])
		}
		keep(k, 0)
	}
	for ; i < len(c.keys); i++ {
		keep(c.keys[i], c.uses[i])
	}
	c.keys, c.uses, c.delta = keys, uses, nil
}
