package model

import (
	"testing"

	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// TestAddDigest: a block adds to a digest what its rows, as elements,
// add; each element adds the hash of the key and value bytes this
// package writes; removing them all leaves the digest empty.
func TestAddDigest(t *testing.T) {
	tbl := flatLikeBlocks(3, 40)
	byBlock, byRow := map[string]nftnl.Digest{}, map[string]nftnl.Digest{}
	for i := range tbl.Elements {
		e := &tbl.Elements[i]
		d := byBlock[e.Set]
		e.AddDigest(&d, 1)
		byBlock[e.Set] = d
	}
	for _, e := range Expand(tbl.Elements) {
		d := byRow[e.Set]
		e.AddDigest(&d, 1)
		byRow[e.Set] = d
		want := nftnl.ElementHash(KeyBytes(e.Key), nil, nil, nil)
		if len(e.Value) > 0 {
			want = nftnl.ElementHash(KeyBytes(e.Key), nil, KeyBytes(e.Value), nil)
		}
		var one nftnl.Digest
		e.AddDigest(&one, 1)
		if one != (nftnl.Digest{N: 1, Sum: want}) {
			t.Fatalf("element %v: digest %+v, want sum %x", e, one, want)
		}
		one.Add(want, -1)
		if one != (nftnl.Digest{}) {
			t.Fatalf("element %v removed: %+v", e, one)
		}
	}
	if len(byBlock) != 3 {
		t.Fatalf("sets %v", byBlock)
	}
	for set, d := range byBlock {
		if d != byRow[set] || d.N == 0 {
			t.Errorf("set %s: blocks %+v, rows %+v", set, d, byRow[set])
		}
	}

	goTo := Element{Set: "m", Key: []Datum{Proto(6), Port(80)}, Verdict: &Verdict{Kind: "goto", Chain: "service-a"}}
	var d nftnl.Digest
	goTo.AddDigest(&d, 1)
	want := nftnl.ElementHash(KeyBytes(goTo.Key), nil, nil, &nftnl.Verdict{Code: nftnl.VerdictGoto, Chain: "service-a"})
	if d.Sum != want {
		t.Errorf("verdict element: %x, want %x", d.Sum, want)
	}
}
