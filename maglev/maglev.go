// Package maglev builds Maglev lookup tables (Eisenbud et al., "Maglev: A
// Fast and Reliable Software Network Load Balancer", NSDI 2016): a table of
// M entries, M prime, each naming one of N targets, such that a flow hashed
// to an entry reaches the same target on every node that holds the same
// targets, each target owns M/N entries (within one), and removing one
// target moves few entries besides its own.
//
// A Table depends only on the set of targets and the size: New sorts the
// targets and drops duplicates before filling the table, and every hash is
// a documented function of a target's address and port (Offset, Skip), so
// the same input gives the same entries on every node, whatever order the
// targets came in. The package is pure: no I/O, clock, randomness or
// logging.
//
// # Bounds (property-tested)
//
//   - Balance: each of N targets owns ⌊M/N⌋ or ⌈M/N⌉ entries (the
//     population takes one entry per target per round until the table is
//     full).
//   - Disruption: in a table of M ≥ 4093 entries and M ≥ 100·N (the size
//     Maglev's paper advises), removing one of N ≥ 2 targets changes the
//     entries it owned (⌊M/N⌋ or ⌈M/N⌉, which must move) and at most
//     MaxExtraDisruption·M others. Measured, 300 random sets of IPv4
//     targets per N: the worst was 3.3% of M for M = 16381 (N from 2 to
//     160; the mean 0.1–1.6%), 5.9% for M = 4093. Small tables disrupt
//     more: 15.5% for M = 1021 and N = 8, which is why the bound starts at
//     4093.
package maglev

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// DefaultSize is the table size New uses for a size of 0: 16381, the
// largest prime below 2^14. With at most a few hundred targets per
// Service port, every target owns at least 30 entries, and a table of
// 4-byte entries takes 64 KiB. Maglev's paper advises M ≥ 100·N for a
// balance within 1%: 16381 keeps that up to 163 targets.
const DefaultSize = 16381

// MaxSize is the largest size New accepts: 65537, a prime, so that the
// table of one frontend stays within 256 KiB of 4-byte entries.
const MaxSize = 65537

// MaxExtraDisruption bounds, as a fraction of the table size M, how many
// entries besides the removed target's own change when one of N ≥ 2
// targets is removed from a table with M ≥ 4093 and M ≥ 100·N (see the
// package documentation).
const MaxExtraDisruption = 0.08

// Table is a Maglev lookup table: Size entries, each the index of a
// target in Targets. The zero Table, and a Table of no targets, has no
// entries: Lookup reports false.
type Table struct {
	targets []netip.AddrPort
	entries []uint32
}

// New fills a table of size entries (DefaultSize when size is 0) for
// targets. The targets are sorted (netip.AddrPort.Compare) and
// duplicates dropped first, so the order they come in does not matter.
// An IPv4-mapped IPv6 address counts as the IPv4 address it holds. New
// fails when size is not a prime in [2, MaxSize], when there are more
// targets than entries, or when a target's address is not valid. No
// targets give a Table without entries.
func New(targets []netip.AddrPort, size int) (*Table, error) {
	if size == 0 {
		size = DefaultSize
	}
	if size < 2 || size > MaxSize || !IsPrime(size) {
		return nil, fmt.Errorf("maglev: table size %d is not a prime in [2, %d]", size, MaxSize)
	}
	ts := make([]netip.AddrPort, 0, len(targets))
	for _, t := range targets {
		if !t.Addr().IsValid() {
			return nil, fmt.Errorf("maglev: target %v has no valid address", t)
		}
		ts = append(ts, netip.AddrPortFrom(t.Addr().Unmap().WithZone(""), t.Port()))
	}
	slices.SortFunc(ts, netip.AddrPort.Compare)
	ts = slices.Compact(ts)
	if len(ts) > size {
		return nil, fmt.Errorf("maglev: %d targets do not fit a table of %d entries", len(ts), size)
	}
	if len(ts) == 0 {
		return &Table{targets: ts}, nil
	}
	return &Table{targets: ts, entries: populate(ts, uint64(size))}, nil
}

// populate is Maglev's population: each target in turn takes the next
// free entry of its permutation (Offset + j·Skip mod m), until every
// entry is taken.
func populate(ts []netip.AddrPort, m uint64) []uint32 {
	const free = ^uint32(0)
	entries := make([]uint32, m)
	for i := range entries {
		entries[i] = free
	}
	offset, skip, next := make([]uint64, len(ts)), make([]uint64, len(ts)), make([]uint64, len(ts))
	for i, t := range ts {
		offset[i], skip[i] = Offset(t, m), Skip(t, m)
	}
	for filled := uint64(0); ; {
		for i := range ts {
			c := (offset[i] + next[i]*skip[i]) % m
			for entries[c] != free {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % m
			}
			entries[c] = uint32(i)
			next[i]++
			if filled++; filled == m {
				return entries
			}
		}
	}
}

// Offset is where target t's permutation of a table of m entries starts:
// Hash(t, 0) mod m; 0 when m is 0.
func Offset(t netip.AddrPort, m uint64) uint64 {
	if m == 0 {
		return 0
	}
	return Hash(t, 0) % m
}

// Skip is the step of target t's permutation of a table of m entries:
// Hash(t, 1) mod (m−1) + 1, which is prime to m when m is prime, so that
// the permutation visits every entry; 1 when m is below 2.
func Skip(t netip.AddrPort, m uint64) uint64 {
	if m < 2 {
		return 1
	}
	return Hash(t, 1)%(m-1) + 1
}

// Hash is the first 8 bytes, big-endian, of the SHA-256 digest of 19
// bytes: seed, t's address as 16 bytes (an IPv4 address in its
// IPv4-mapped IPv6 form) and its port in network byte order. A weaker
// hash (64-bit FNV-1a) gave neighbouring addresses correlated
// permutations, and removing one of 6 targets moved 12% of a table.
func Hash(t netip.AddrPort, seed byte) uint64 {
	var buf [19]byte
	buf[0] = seed
	a := t.Addr().Unmap().As16()
	copy(buf[1:17], a[:])
	binary.BigEndian.PutUint16(buf[17:], t.Port())
	sum := sha256.Sum256(buf[:])
	return binary.BigEndian.Uint64(sum[:8])
}

// Size is the number of entries: 0 for a Table without targets.
func (t *Table) Size() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Targets returns the targets, sorted, each once: entry values index it.
// The slice must not be modified.
func (t *Table) Targets() []netip.AddrPort {
	if t == nil {
		return nil
	}
	return t.targets
}

// Entries returns the entries: entry i is the index in Targets of the
// target that flows hashed to i reach. The slice must not be modified.
func (t *Table) Entries() []uint32 {
	if t == nil {
		return nil
	}
	return t.entries
}

// Lookup returns the target of a flow whose hash is h: the target of
// entry h mod Size. It reports false for a Table without entries.
func (t *Table) Lookup(h uint64) (netip.AddrPort, bool) {
	if t.Size() == 0 {
		return netip.AddrPort{}, false
	}
	return t.targets[t.entries[h%uint64(len(t.entries))]], true
}

// Counts returns how many entries each target owns, in the order of
// Targets.
func (t *Table) Counts() []int {
	counts := make([]int, len(t.Targets()))
	for _, e := range t.Entries() {
		counts[e]++
	}
	return counts
}

// IsPrime reports whether n is prime.
func IsPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
