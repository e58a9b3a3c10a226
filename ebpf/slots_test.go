package ebpf

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

func ap(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 64, byte(i)}), 8080)
}

func targets(is ...int) []ruleset.Target {
	var ts []ruleset.Target
	for _, i := range is {
		ts = append(ts, ruleset.Target{Endpoint: ap(i)})
	}
	return ts
}

func aps(is ...int) []netip.AddrPort {
	var out []netip.AddrPort
	for _, i := range is {
		out = append(out, ap(i))
	}
	return out
}

func TestSlots(t *testing.T) {
	for _, tc := range []struct {
		prev    []netip.AddrPort
		targets []ruleset.Target
		want    []netip.AddrPort
	}{
		{nil, nil, nil},
		{aps(1, 2), nil, nil},
		{nil, targets(3, 1, 2), aps(3, 1, 2)},
		{aps(1, 2, 3), targets(1, 2, 3, 4), aps(1, 2, 3, 4)},
		{aps(1, 2, 3), targets(4, 3, 2, 1), aps(1, 2, 3, 4)},
		{aps(1, 2, 3), targets(1, 3), aps(1, 3)},       // 3 moves down into the hole
		{aps(1, 2, 3), targets(2, 3), aps(3, 2)},       // the highest fills slot 0
		{aps(1, 2, 3), targets(1, 3, 5), aps(1, 5, 3)}, // the new one takes the hole
		{aps(1, 2, 3, 4), targets(4), aps(4)},          //
		{aps(1, 2), targets(5, 6, 7), aps(5, 6, 7)},    // all replaced
	} {
		t.Run(fmt.Sprint(tc.prev, tc.targets), func(t *testing.T) {
			if got := slots(tc.prev, tc.targets); !slices.Equal(got, tc.want) {
				t.Fatalf("slots = %v, want %v", got, tc.want)
			}
		})
	}
}

// Property: slots holds each target once and nothing else, and a target
// that was in prev keeps its slot unless the group shrank below it.
func TestPropSlots(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.SliceOfDistinct(rapid.IntRange(0, 20), func(i int) int { return i })
		prev := aps(gen.Draw(t, "prev")...)
		want := gen.Draw(t, "targets")
		got := slots(prev, targets(want...))
		if len(got) != len(want) {
			t.Fatalf("%d slots for %d targets", len(got), len(want))
		}
		for _, i := range want {
			if !slices.Contains(got, ap(i)) {
				t.Fatalf("target %v has no slot: %v", ap(i), got)
			}
		}
		for s, at := range prev {
			if s < len(got) && slices.Contains(want, int(at.Addr().As4()[3])) && got[s] != at {
				t.Fatalf("kept target %v left slot %d: prev %v, got %v", at, s, prev, got)
			}
		}
	})
}
