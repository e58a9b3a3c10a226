package prefix

import (
	"net/netip"
	"testing"
)

func TestLast(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		want   string
	}{
		{"198.18.0.0/16", "198.18.255.255"},
		{"198.18.64.0/18", "198.18.127.255"},
		{"198.19.0.10/32", "198.19.0.10"},
		{"0.0.0.0/0", "255.255.255.255"},
		{"198.18.0.0/15", "198.19.255.255"},
		{"2001:db8::/32", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"},
		{"2001:db8:18:40::/60", "2001:db8:18:4f:ffff:ffff:ffff:ffff"},
		{"2001:db8::1/128", "2001:db8::1"},
		{"::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	} {
		if got := Last(netip.MustParsePrefix(tt.prefix)); got != netip.MustParseAddr(tt.want) {
			t.Errorf("Last(%s) = %v, want %s", tt.prefix, got, tt.want)
		}
	}
	if got := Last(netip.Prefix{}); got.IsValid() {
		t.Errorf("Last of the zero Prefix = %v, want the zero Addr", got)
	}
}

func TestFillHost(t *testing.T) {
	for _, tt := range []struct {
		bits int
		want [4]byte
	}{
		{-1, [4]byte{255, 255, 255, 255}},
		{0, [4]byte{255, 255, 255, 255}},
		{12, [4]byte{10, 15, 255, 255}},
		{32, [4]byte{10, 0, 0, 0}},
		{40, [4]byte{10, 0, 0, 0}},
	} {
		ip := []byte{10, 0, 0, 0}
		FillHost(ip, tt.bits)
		if [4]byte(ip) != tt.want {
			t.Errorf("FillHost(10.0.0.0, %d) = %v, want %v", tt.bits, ip, tt.want)
		}
	}
}
