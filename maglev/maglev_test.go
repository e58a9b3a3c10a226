package maglev_test

import (
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/maglev"
)

func TestNewErrors(t *testing.T) {
	good := []netip.AddrPort{netip.MustParseAddrPort("198.18.1.2:8080")}
	for _, tc := range []struct {
		name    string
		targets []netip.AddrPort
		size    int
		wantErr bool
		size0   int
	}{
		{"nil targets", nil, 0, false, 0},
		{"empty targets, prime size", []netip.AddrPort{}, 7, false, 0},
		{"default size", good, 0, false, maglev.DefaultSize},
		{"max size", good, maglev.MaxSize, false, maglev.MaxSize},
		{"not prime", good, 100, true, 0},
		{"negative", good, -7, true, 0},
		{"one", good, 1, true, 0},
		{"above max", good, 65539, true, 0},
		{"zero target", []netip.AddrPort{{}}, 7, true, 0},
		{"more targets than entries", []netip.AddrPort{
			netip.MustParseAddrPort("198.18.1.1:1"), netip.MustParseAddrPort("198.18.1.2:1"), netip.MustParseAddrPort("198.18.1.3:1")}, 2, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := maglev.New(tc.targets, tc.size)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New: err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && tab.Size() != tc.size0 {
				t.Fatalf("Size %d, want %d", tab.Size(), tc.size0)
			}
		})
	}
}

func TestZeroAndNil(t *testing.T) {
	var nilTable *maglev.Table
	for _, tab := range []*maglev.Table{nilTable, {}} {
		if _, ok := tab.Lookup(42); ok || tab.Size() != 0 || tab.Targets() != nil || tab.Entries() != nil || len(tab.Counts()) != 0 {
			t.Fatalf("%#v: not empty", tab)
		}
	}
}

func TestIsPrime(t *testing.T) {
	for n, want := range map[int]bool{-3: false, 0: false, 1: false, 2: true, 3: true, 4: false, 251: true, 16381: true, 16383: false, 65537: true} {
		if got := maglev.IsPrime(n); got != want {
			t.Errorf("IsPrime(%d) = %v, want %v", n, got, want)
		}
	}
}

// The hash is pinned: a change of it changes every node's tables, and
// nodes running different versions would then disagree.
func TestHashPinned(t *testing.T) {
	a := netip.MustParseAddrPort("198.18.1.2:8080")
	if got, want := maglev.Hash(a, 0), uint64(0xe3b79efd8b92ef53); got != want {
		t.Errorf("Hash(%v, 0) = %#x, want %#x", a, got, want)
	}
	if maglev.Hash(a, 0) != maglev.Hash(netip.MustParseAddrPort("[::ffff:198.18.1.2]:8080"), 0) {
		t.Error("an IPv4-mapped address hashes differently from its IPv4 address")
	}
}

// genTargets draws distinct targets, IPv4 and IPv6.
func genTargets(min, max int) *rapid.Generator[[]netip.AddrPort] {
	return rapid.Custom(func(t *rapid.T) []netip.AddrPort {
		n := rapid.IntRange(min, max).Draw(t, "n")
		seen := map[netip.AddrPort]bool{}
		var out []netip.AddrPort
		for len(out) < n {
			var a netip.Addr
			if rapid.Bool().Draw(t, "v6") {
				a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x18, 0, 0x40, 14: rapid.Byte().Draw(t, "h"), 15: rapid.Byte().Draw(t, "l")})
			} else {
				a = netip.AddrFrom4([4]byte{198, 18, rapid.Byte().Draw(t, "c"), rapid.Byte().Draw(t, "d")})
			}
			ap := netip.AddrPortFrom(a, rapid.SampledFrom([]uint16{80, 8080, 53}).Draw(t, "port"))
			if !seen[ap] {
				seen[ap] = true
				out = append(out, ap)
			}
		}
		return out
	})
}

var sizes = []int{251, 1021, 4093, maglev.DefaultSize}

// Property: each of N targets owns ⌊M/N⌋ or ⌈M/N⌉ entries.
func TestPropBalance(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ts := genTargets(1, 100).Draw(t, "targets")
		m := rapid.SampledFrom(sizes).Draw(t, "size")
		tab, err := maglev.New(ts, m)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := m/len(ts), (m+len(ts)-1)/len(ts)
		for i, c := range tab.Counts() {
			if c < lo || c > hi {
				t.Fatalf("target %v owns %d entries of %d, want %d..%d", tab.Targets()[i], c, m, lo, hi)
			}
		}
	})
}

// Property: the table depends on the set of targets alone, not their
// order or repetitions.
func TestPropDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ts := genTargets(0, 30).Draw(t, "targets")
		perm := slices.Clone(ts)
		for i := len(perm) - 1; i > 0; i-- {
			j := rapid.IntRange(0, i).Draw(t, "swap")
			perm[i], perm[j] = perm[j], perm[i]
		}
		perm = append(perm, perm...)
		a, err := maglev.New(ts, 1021)
		if err != nil {
			t.Fatal(err)
		}
		b, err := maglev.New(perm, 1021)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Targets(), b.Targets()) || !slices.Equal(a.Entries(), b.Entries()) {
			t.Fatal("tables differ for the same set of targets")
		}
	})
}

// Property: in a table of M ≥ 4093 and M ≥ 100·N entries, removing one of N ≥ 2
// targets changes the entries it owned and at most MaxExtraDisruption·M
// others.
func TestPropDisruption(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := rapid.SampledFrom(sizes[2:]).Draw(t, "size")
		ts := genTargets(2, m/100).Draw(t, "targets")
		gone := rapid.IntRange(0, len(ts)-1).Draw(t, "removed")
		before, err := maglev.New(ts, m)
		if err != nil {
			t.Fatal(err)
		}
		after, err := maglev.New(slices.Delete(slices.Clone(ts), gone, gone+1), m)
		if err != nil {
			t.Fatal(err)
		}
		removed := ts[gone]
		extra := 0
		for i := range m {
			b, _ := before.Lookup(uint64(i))
			a, _ := after.Lookup(uint64(i))
			if a == removed {
				t.Fatalf("entry %d still reaches the removed target", i)
			}
			if b != removed && b != a {
				extra++
			}
		}
		if limit := int(maglev.MaxExtraDisruption * float64(m)); extra > limit {
			t.Fatalf("removing 1 of %d targets from %d entries moved %d others, bound %d", len(ts), m, extra, limit)
		}
	})
}
