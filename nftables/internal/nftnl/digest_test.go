package nftnl

import (
	"testing"
)

// elementHashes are the hashes kernelElementHash gives the elements of an
// element message's body, as the kernel dumps them back (the same
// attributes).
func elementHashes(t *testing.T, body []byte) []uint64 {
	t.Helper()
	var hs []uint64
	walkAttrs(body[4:], func(typ uint16, v []byte) {
		if typ != attrElemListElems {
			return
		}
		walkAttrs(v, func(typ uint16, elem []byte) {
			if h, ok := kernelElementHash(elem); ok {
				hs = append(hs, h)
			}
		})
	})
	return hs
}

// TestElementHashOfMessages: an element read back from the attributes it
// was written with hashes as ElementHash hashes its parts; comments do not
// count, interval ends are left out, and a changed key, value, verdict
// code or chain changes the hash.
func TestElementHashOfMessages(t *testing.T) {
	key := []byte{198, 19, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}
	goTo := func(chain string) *Verdict { return &Verdict{Code: VerdictGoto, Chain: chain} }
	tests := []struct {
		name string
		elem Element
		want uint64
	}{
		{"set element", Element{Key: key, Comment: "ns/web:p80"}, ElementHash(key, nil, nil, nil)},
		{"verdict", Element{Key: key, Verdict: goTo("service-a")}, ElementHash(key, nil, nil, goTo("service-a"))},
		{"drop", Element{Key: key, Verdict: &Verdict{Code: VerdictDrop}}, ElementHash(key, nil, nil, &Verdict{Code: VerdictDrop})},
		{"data", Element{Key: key, Data: []byte{198, 18, 64, 2, 0x1f, 0x90, 0, 0}}, ElementHash(key, nil, []byte{198, 18, 64, 2, 0x1f, 0x90, 0, 0}, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBatch(IPv4, "t")
			b.AddElements("s", []Element{tc.elem, {Key: key, IntervalEnd: true}})
			hs := elementHashes(t, b.msgs[0].body)
			if len(hs) != 1 || hs[0] != tc.want {
				t.Errorf("hashes %x, want [%x]", hs, tc.want)
			}
		})
	}

	m := NewElementsMessage(IPv4, "t", "s", 64)
	m.Add(key, []byte{1, 2, 3, 4}, []byte{5, 6}, "c")
	if hs := elementHashes(t, m.Body()); len(hs) != 1 || hs[0] != ElementHash(key, []byte{1, 2, 3, 4}, []byte{5, 6}, nil) {
		t.Errorf("ElementsMessage: hashes %x", hs)
	}

	other := append([]byte{198, 19, 0, 11}, key[4:]...)
	distinct := map[uint64]string{}
	for name, h := range map[string]uint64{
		"key":           ElementHash(key, nil, nil, nil),
		"other key":     ElementHash(other, nil, nil, nil),
		"goto a":        ElementHash(key, nil, nil, goTo("service-a")),
		"goto b":        ElementHash(key, nil, nil, goTo("service-b")),
		"jump a":        ElementHash(key, nil, nil, &Verdict{Code: VerdictJump, Chain: "service-a"}),
		"data as key":   ElementHash(key[:8], nil, key[8:], nil),
		"data":          ElementHash(key, nil, []byte{1}, nil),
		"interval":      ElementHash(key, []byte{1}, nil, nil),
		"empty data":    ElementHash(key, nil, []byte{}, nil),
		"empty verdict": ElementHash(key, nil, nil, &Verdict{}),
	} {
		if was, ok := distinct[h]; ok {
			t.Errorf("%s and %s hash alike", name, was)
		}
		distinct[h] = name
	}
}

// TestDigestAdd: a Digest counts and sums its elements in any order, and
// an element added and removed leaves it as it was.
func TestDigestAdd(t *testing.T) {
	a, b := ElementHash([]byte{1}, nil, nil, nil), ElementHash([]byte{2}, nil, nil, nil)
	var x, y Digest
	x.Add(a, 1)
	x.Add(b, 1)
	y.Add(b, 1)
	y.Add(a, 1)
	if x != y || x.N != 2 {
		t.Errorf("%+v and %+v", x, y)
	}
	x.Add(ElementHash([]byte{3}, nil, nil, nil), 1)
	x.Add(ElementHash([]byte{3}, nil, nil, nil), -1)
	if x != y {
		t.Errorf("added and removed: %+v, want %+v", x, y)
	}
	x.Add(a, -1)
	x.Add(ElementHash([]byte{3}, nil, nil, nil), 1)
	if x.N != y.N || x.Sum == y.Sum {
		t.Errorf("an element replaced: %+v, like %+v", x, y)
	}
}
