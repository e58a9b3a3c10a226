package ruleset_test

import (
	"math"
	"math/big"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/ruleset"
)

// choices returns n Choices of 198.18.64.i:80, each with the given share.
func choices(shares ...*big.Rat) []ruleset.Choice {
	cs := make([]ruleset.Choice, len(shares))
	for i, s := range shares {
		cs[i] = ruleset.Choice{Target: ruleset.Target{Endpoint: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 64, byte(i)}), 80)}, Share: s}
	}
	return cs
}

func TestPick(t *testing.T) {
	third, half := big.NewRat(1, 3), big.NewRat(1, 2)
	thirds := choices(third, third, third)
	tests := []struct {
		name    string
		choices []ruleset.Choice
		x       float64
		want    int // index into choices; -1 for the zero Choice
	}{
		{"x 0: the first", thirds, 0, 0},
		{"float64(1/3) is below 1/3: the first", thirds, 1.0 / 3, 0},
		{"the float after 1/3 is above it: the second", thirds, math.Nextafter(1.0/3, 1), 1},
		{"just below 1: the last", thirds, math.Nextafter(1, 0), 2},
		{"x 1: the last", thirds, 1, 2},
		{"x +Inf: the last", thirds, math.Inf(1), 2},
		{"x below 0: the first", thirds, -0.5, 0},
		{"x NaN: the first", thirds, math.NaN(), 0},
		{"exactly at a boundary: the next one", choices(half, half), 0.5, 1},
		{"unequal shares", choices(big.NewRat(1, 4), big.NewRat(3, 4)), 0.3, 1},
		{"a nil share counts as 0", choices(nil, half, half), 0, 1},
		{"shares summing below 1: the last takes the rest", choices(big.NewRat(1, 10), big.NewRat(1, 10)), 0.5, 1},
		{"one choice", choices(big.NewRat(1, 1)), 0.99, 0},
		{"no choices: the zero Choice", nil, 0.5, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ruleset.Pick(tt.choices, tt.x)
			want := netip.AddrPort{}
			if tt.want >= 0 {
				want = tt.choices[tt.want].Endpoint
			}
			if got.Endpoint != want {
				t.Errorf("Pick(x=%v) = %v, want %v", tt.x, got.Endpoint, want)
			}
		})
	}
}

// TestPickShares: for N targets of share 1/N (what Decide gives), the
// midpoints of M = N·K equal slices of [0, 1) pick each target exactly K
// times: Pick divides [0, 1) by the exact shares.
func TestPickShares(t *testing.T) {
	const k = 7
	for n := 1; n <= 12; n++ {
		shares := make([]*big.Rat, n)
		for i := range shares {
			shares[i] = big.NewRat(1, int64(n))
		}
		cs, counts := choices(shares...), map[netip.AddrPort]int{}
		for i := range n * k {
			counts[ruleset.Pick(cs, (float64(i)+0.5)/float64(n*k)).Endpoint]++
		}
		for _, c := range cs {
			if counts[c.Endpoint] != k {
				t.Errorf("%d targets: %v picked %d times of %d, want %d", n, c.Endpoint, counts[c.Endpoint], n*k, k)
			}
		}
	}
}
