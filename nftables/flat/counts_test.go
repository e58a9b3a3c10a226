package flat

import (
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

// addKeys adds the keys of ks to u as the targets on this node of Service
// ports, with a target elsewhere beside each, which has no key.
func addKeys(u *useKeys, ks []hairpinKey) {
	for _, k := range ks {
		ep := netip.AddrPortFrom(k.addr, k.port)
		u.addLocalTargets([]ruleset.Target{{Endpoint: ep, Local: true}, {Endpoint: netip.AddrPortFrom(k.addr.Next(), k.port)}}, k.proto)
	}
}

// TestHairpinCountsAsMap checks hairpinCounts against a map of counts:
// counted whole, then changed by uses added and taken back in any order
// (a Service port's uses are taken back only after they were added),
// across the merges of changes into the sorted arrays.
func TestHairpinCountsAsMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// A few addresses of both families, protocols and ports, so that
		// keys repeat, and keys that differ in one part only.
		addrs := []netip.Addr{
			netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.1.0"),
			netip.MustParseAddr("198.18.255.255"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"),
			netip.MustParseAddr("2001:db8:18::ffff"),
		}
		n := rapid.IntRange(0, 60).Draw(t, "extra")
		for i := range n {
			addrs = append(addrs, netip.AddrFrom4([4]byte{198, 18, 2, byte(i)}))
		}
		var pool []hairpinKey
		for _, a := range addrs {
			for _, proto := range []uint8{6, 17, 132} {
				for _, port := range []uint16{80, 8080, 65535} {
					pool = append(pool, hairpinKey{a, proto, port})
				}
			}
		}
		key := rapid.SampledFrom(pool)
		initial := rapid.SliceOf(key).Draw(t, "initial")
		want := map[hairpinKey]int32{}
		for _, k := range initial {
			want[k]++
		}
		// Counted as flatTable counts them: in two parts, their keys
		// sorted apart and merged.
		cut := rapid.IntRange(0, len(initial)).Draw(t, "cut")
		var a, b useKeys
		addKeys(&a, initial[:cut])
		addKeys(&b, initial[cut:])
		a.sort()
		b.sort()
		c := countSorted(a.merge(b))
		var inUse []hairpinKey
		for i := range c.inUse() {
			inUse = append(inUse, c.at(i))
		}
		var wantInUse []hairpinKey
		for k := range want {
			wantInUse = append(wantInUse, k)
		}
		slices.SortFunc(wantInUse, compareHairpin)
		if !slices.Equal(inUse, wantInUse) {
			t.Fatalf("countSorted in use %v, want %v", inUse, wantInUse)
		}
		held := slices.Clone(initial) // uses that may be taken back
		for i := range rapid.IntRange(0, 300).Draw(t, "steps") {
			if len(held) > 0 && rapid.Bool().Draw(t, "remove") {
				j := rapid.IntRange(0, len(held)-1).Draw(t, "which")
				k := held[j]
				held = slices.Delete(held, j, j+1)
				c.add(k, -1)
				want[k]--
			} else {
				k := key.Draw(t, "add")
				held = append(held, k)
				c.add(k, 1)
				want[k]++
			}
			for _, k := range pool {
				if got := c.get(k); got != want[k] {
					t.Fatalf("step %d: uses of %v = %d, want %d", i, k, got, want[k])
				}
			}
		}
	})
}
