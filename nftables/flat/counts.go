package flat

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/internal/sorted"
	"github.com/svcproxy/svcproxy/ruleset"
)

// hairpinKey is an element of the hairpin set: an endpoint on this node by
// its address, the protocol of the Service port it is a target of, and its
// port (kube-proxy 1.37's hairpin-connections key, the address twice).
type hairpinKey struct {
	addr  netip.Addr
	proto uint8
	port  uint16
}

// hairpinKeyOf is the key of target t of a Service port of protocol proto.
func hairpinKeyOf(t ruleset.Target, proto uint8) hairpinKey {
	return hairpinKey{t.Endpoint.Addr(), proto, t.Endpoint.Port()}
}

// compareHairpin orders keys by address (netip.Addr.Compare: IPv4 before
// IPv6), protocol, then port.
func compareHairpin(a, b hairpinKey) int {
	return cmp.Or(a.addr.Compare(b.addr), cmp.Compare(a.proto, b.proto), cmp.Compare(a.port, b.port))
}

// hairpinCounts counts the uses of hairpin keys, IPv4 ones packed in a
// uint64 and IPv6 ones as three integers (which compare fast), each in the
// order of compareHairpin. Counted whole (countSorted), the uses are two
// sorted arrays, made in one pass; uses added later go into a map of
// changes, which is merged into the arrays when it grows past half their
// length (in O(n), so O(1) amortized per change). Filling a hash map with
// the keys of a whole table costs a cache miss per key, a sort does not.
type hairpinCounts struct {
	v4 sortedCounts[uint64]
	v6 sortedCounts[v6Key]
}

// v6Key is an IPv6 hairpin key: the address's 16 bytes, big-endian, then
// the protocol and port (protocol << 16 | port).
type v6Key struct {
	hi, lo    uint64
	protoPort uint32
}

func v6KeyOf(k hairpinKey) v6Key {
	b := k.addr.As16()
	return v6Key{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), uint32(k.proto)<<16 | uint32(k.port)}
}

func (k v6Key) key() hairpinKey {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return hairpinKey{netip.AddrFrom16(b), uint8(k.protoPort >> 16), uint16(k.protoPort)}
}

func compare6(a, b v6Key) int {
	return cmp.Or(cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo), cmp.Compare(a.protoPort, b.protoPort))
}

// v4Key is an IPv4 hairpin key: address << 24 | protocol << 16 | port.
func v4Key(k hairpinKey) uint64 {
	b := k.addr.As4()
	a := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	return a<<24 | uint64(k.proto)<<16 | uint64(k.port)
}

func v4HairpinKey(k uint64) hairpinKey {
	a := k >> 24
	return hairpinKey{netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), uint8(k >> 16), uint16(k)}
}

var compare4 = cmp.Compare[uint64]

// useKeys are the keys of uses of hairpin keys, a use each (repeats
// kept): IPv4's and IPv6's.
type useKeys struct {
	v4 []uint64
	v6 []v6Key
}

// addLocalTargets appends the keys of the targets that run on this node,
// of a Service port of protocol proto.
func (k *useKeys) addLocalTargets(targets []ruleset.Target, proto uint8) {
	for i := range targets {
		if !targets[i].Local {
			continue
		}
		if h := hairpinKeyOf(targets[i], proto); h.addr.Is4() {
			k.v4 = append(k.v4, v4Key(h))
		} else {
			k.v6 = append(k.v6, v6KeyOf(h))
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
func countSorted(k useKeys) hairpinCounts {
	return hairpinCounts{v4: fromSorted(k.v4), v6: fromSorted(k.v6)}
}

// inUse is the number of keys that c, as countSorted made it (no changes
// since), counts.
func (c *hairpinCounts) inUse() int { return len(c.v4.keys) + len(c.v6.keys) }

// at is the i'th key (0 ≤ i < inUse()) that c, as countSorted made it,
// counts, in the order of compareHairpin.
func (c *hairpinCounts) at(i int) hairpinKey {
	if i < len(c.v4.keys) {
		return v4HairpinKey(c.v4.keys[i])
	}
	return c.v6.keys[i-len(c.v4.keys)].key()
}

// add adds d (1 or −1) to k's uses.
func (c *hairpinCounts) add(k hairpinKey, d int32) {
	if k.addr.Is4() {
		c.v4.add(v4Key(k), d, compare4)
	} else {
		c.v6.add(v6KeyOf(k), d, compare6)
	}
}

// get is k's uses.
func (c *hairpinCounts) get(k hairpinKey) int32 {
	if k.addr.Is4() {
		return c.v4.get(v4Key(k), compare4)
	}
	return c.v6.get(v6KeyOf(k), compare6)
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
