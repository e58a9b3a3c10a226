package nfttrace

import "testing"

// TestJHash: the kernel's jhash is Bob Jenkins' lookup3 hashlittle on a
// little-endian host; these are lookup3.c's own check values.
func TestJHash(t *testing.T) {
	for _, c := range []struct {
		key     string
		initval uint32
		want    uint32
	}{
		{"", 0, 0xdeadbeef},
		{"", 0xdeadbeef, 0xbd5b7dde},
		{"Four score and seven years ago", 0, 0x17770551},
		{"Four score and seven years ago", 1, 0xcd628161},
	} {
		if got := jhash([]byte(c.key), c.initval); got != c.want {
			t.Errorf("jhash(%q, %#x) = %#x, want %#x", c.key, c.initval, got, c.want)
		}
	}
}
