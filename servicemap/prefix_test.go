package servicemap

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestComparePrefixed(t *testing.T) {
	for _, tc := range []struct{ x, y string }{
		{"", ""},
		{"", "a"},
		{"a", "a\x00"},
		{"ns042", "ns042"},
		{"ns042", "ns043"},
		{"svc00042", "svc00042"},
		{"svc00042", "svc000420"},
		{"kube-system", "kube-public"},
		{"kube-system", "kube-system"},
		{"abcdefgh", "abcdefgh\x00"},
		{"abcdefg\xff", "abcdefh"},
		{"abcdefgha", "abcdefghb"},
		{"abcdefghijklmnop", "abcdefghijklmnop\x00"},
		{"abcdefghijklmno\xff", "abcdefghijklmnp"},
		{"abcdefghijklmnopa", "abcdefghijklmnopb"},
		{"team-1-namespace-12", "team-1-namespace-7"},
	} {
		for _, p := range [][2]string{{tc.x, tc.y}, {tc.y, tc.x}} {
			x, y := p[0], p[1]
			if got, want := comparePrefixed(prefixOf(x), prefixOf(y), x, y), strings.Compare(x, y); got != want {
				t.Errorf("comparePrefixed(%q, %q) = %d, want %d", x, y, got, want)
			}
		}
	}
}

// Pairs of strings over a small alphabet that includes the zero byte, with
// a common beginning around the prefix length, so that prefixes are often
// equal and the strings often are not.
func TestPropComparePrefixed(t *testing.T) {
	runes := rapid.SampledFrom([]rune{0, 'a', 'b', 0x7f})
	common, rest := rapid.StringOfN(runes, 0, 18, -1), rapid.StringOfN(runes, 0, 3, -1)
	rapid.Check(t, func(t *rapid.T) {
		c := common.Draw(t, "common")
		x, y := c+rest.Draw(t, "x"), c+rest.Draw(t, "y")
		if got, want := comparePrefixed(prefixOf(x), prefixOf(y), x, y), strings.Compare(x, y); got != want {
			t.Fatalf("comparePrefixed(%q, %q) = %d, want %d", x, y, got, want)
		}
	})
}
