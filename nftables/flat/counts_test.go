package flat

import (
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

// targetsAt are targets at port 80 of addrs.
func targetsAt(addrs []netip.Addr) []ruleset.Target {
	out := make([]ruleset.Target, len(addrs))
	for i, a := range addrs {
		out[i] = ruleset.Target{Endpoint: netip.AddrPortFrom(a, 80), Local: true}
	}
	return out
}

// TestAddrCountsAsMap checks addrCounts against a map of counts: counted
// whole, then changed by uses added and taken back in any order (a
// Service port's uses are taken back only after they were added), across
// the merges of changes into the sorted arrays.
func TestAddrCountsAsMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// A few addresses of both families, so that keys repeat.
		pool := []netip.Addr{
			netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.1.0"),
			netip.MustParseAddr("198.18.255.255"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"),
			netip.MustParseAddr("2001:db8:18::ffff"),
		}
		n := rapid.IntRange(0, 60).Draw(t, "extra")
		for i := range n {
			pool = append(pool, netip.AddrFrom4([4]byte{198, 18, 2, byte(i)}))
		}
		addr := rapid.SampledFrom(pool)
		initial := rapid.SliceOf(addr).Draw(t, "initial")
		want := map[netip.Addr]int32{}
		for _, a := range initial {
			want[a]++
		}
		// Counted as flatTable counts them: in two parts, their keys
		// sorted apart and merged.
		cut := rapid.IntRange(0, len(initial)).Draw(t, "cut")
		var a, b useKeys
		a.addLocalTargets(targetsAt(initial[:cut]))
		b.addLocalTargets(targetsAt(initial[cut:]))
		a.sort()
		b.sort()
		c := countSorted(a.merge(b))
		var inUse []netip.Addr
		for i := range c.inUse() {
			inUse = append(inUse, c.at(i))
		}
		var wantInUse []netip.Addr
		for a := range want {
			wantInUse = append(wantInUse, a)
		}
		slices.SortFunc(wantInUse, netip.Addr.Compare)
		if !slices.Equal(inUse, wantInUse) {
			t.Fatalf("countSorted in use %v, want %v", inUse, wantInUse)
		}
		held := slices.Clone(initial) // uses that may be taken back
		for i := range rapid.IntRange(0, 300).Draw(t, "steps") {
			if len(held) > 0 && rapid.Bool().Draw(t, "remove") {
				j := rapid.IntRange(0, len(held)-1).Draw(t, "which")
				a := held[j]
				held = slices.Delete(held, j, j+1)
				c.add(a, -1)
				want[a]--
			} else {
				a := addr.Draw(t, "add")
				held = append(held, a)
				c.add(a, 1)
				want[a]++
			}
			for _, a := range pool {
				if got := c.get(a); got != want[a] {
					t.Fatalf("step %d: uses of %v = %d, want %d", i, a, got, want[a])
				}
			}
		}
	})
}
