package ebpf_test

import (
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/ruleset"
)

func TestPick(t *testing.T) {
	a, b := netip.MustParseAddrPort("198.18.64.2:8080"), netip.MustParseAddrPort("198.18.65.2:8080")
	plain := ebpf.Translation{Verdict: ruleset.VerdictForward, Backends: []netip.AddrPort{a, b}}
	sticky := plain
	sticky.Affinity = 10 * time.Second
	for _, tc := range []struct {
		name      string
		t         ebpf.Translation
		rnd       uint32
		entry     *ebpf.Sticky
		now       time.Duration
		want      netip.AddrPort
		wantEntry *ebpf.Sticky
	}{
		{"not forwarded", ebpf.Translation{Verdict: ruleset.VerdictReject}, 0, nil, 0, netip.AddrPort{}, nil},
		{"no backends", ebpf.Translation{Verdict: ruleset.VerdictForward}, 0, nil, 0, netip.AddrPort{}, nil},
		{"rnd 0", plain, 0, nil, 0, a, nil},
		{"rnd 1", plain, 1, nil, 0, b, nil},
		{"rnd mod N", plain, 7, nil, 0, b, nil},
		{"affinity, no entry", sticky, 0, nil, 5 * time.Second, a, &ebpf.Sticky{0, a, 5 * time.Second}},
		{"affinity, recent", sticky, 0, &ebpf.Sticky{1, b, 1 * time.Second}, 10*time.Second + time.Second - 1, b, &ebpf.Sticky{1, b, 11*time.Second - 1}},
		{"affinity, expired", sticky, 0, &ebpf.Sticky{1, b, 1 * time.Second}, 11 * time.Second, a, &ebpf.Sticky{0, a, 11 * time.Second}},
		{"affinity, from the future", sticky, 0, &ebpf.Sticky{1, b, 9 * time.Second}, 8 * time.Second, a, &ebpf.Sticky{0, a, 8 * time.Second}},
		{"affinity, slot holds another", sticky, 0, &ebpf.Sticky{1, a, 1 * time.Second}, 2 * time.Second, a, &ebpf.Sticky{0, a, 2 * time.Second}},
		{"affinity, slot gone", sticky, 1, &ebpf.Sticky{5, a, 1 * time.Second}, 2 * time.Second, b, &ebpf.Sticky{1, b, 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, entry := tc.t.Pick(tc.rnd, tc.entry, tc.now)
			if got != tc.want || (entry == nil) != (tc.wantEntry == nil) || entry != nil && *entry != *tc.wantEntry {
				t.Fatalf("Pick = %v, %+v; want %v, %+v", got, entry, tc.want, tc.wantEntry)
			}
		})
	}
}

func TestNilAndEmpty(t *testing.T) {
	var c *ebpf.Contents
	if c.Family() != "" || len(c.Maps().Services) != 0 {
		t.Fatal("nil Contents not empty")
	}
	if e := ebpf.Render(nil, nil); len(e.Maps().Services) != 0 || len(e.Maps().Backends) != 0 {
		t.Fatal("Render(nil) not empty")
	}
	var m *ebpf.Maps
	if m.Lookup(ebpf.ProtoTCP, netip.MustParseAddrPort("198.19.0.10:80")).Verdict != ruleset.VerdictNotServed {
		t.Fatal("nil Maps translate")
	}
	if ops := ebpf.Diff(nil, nil); ops.Len() != 0 {
		t.Fatal("Diff(nil, nil) not empty")
	}
	if ops := ebpf.Changes(nil, nil); ops.Len() != 0 || len(ebpf.GoneEndpoints(nil, nil)) != 0 || c.AllOps().Len() != 0 {
		t.Fatal("Changes, GoneEndpoints or AllOps of nil Contents not empty")
	}
	if n, err := m.WriteTo(io.Discard); n != 0 || err != nil || !m.Equal(nil) {
		t.Fatal("nil Maps not empty")
	}
	ns, err := ebpf.RenderNorthSouth(nil, nil, 0)
	if err != nil || len(ns.Ext) != 0 {
		t.Fatalf("RenderNorthSouth(nil): %v, %v", ns, err)
	}
	var none *ebpf.NorthSouth
	if none.Lookup(nil, ebpf.ProtoTCP, netip.Addr{}, netip.MustParseAddrPort("198.19.0.10:80")).Verdict != ruleset.VerdictNotServed {
		t.Fatal("nil NorthSouth translates")
	}
	if _, err := ebpf.RenderNorthSouth(nil, nil, 100); err != nil {
		t.Fatal(err)
	}
}
