// Package prefix computes what net/netip does not with network prefixes:
// the last address of one, which nftables writes as the end of an
// interval (its renderers, its netlink encoders and its evaluator alike).
package prefix

import "net/netip"

// Last is the last address of p: p's address with every bit after the
// first p.Bits() set. For a masked p (netip.Prefix.Masked) it is the
// highest address in p. An invalid p gives the zero Addr.
func Last(p netip.Prefix) netip.Addr {
	if !p.IsValid() {
		return netip.Addr{}
	}
	b := p.Addr().AsSlice()
	FillHost(b, p.Bits())
	a, _ := netip.AddrFromSlice(b)
	return a
}

// FillHost sets, in place, every bit of the address ip (4 or 16 bytes)
// after its first bits, which makes the last address of the prefix
// ip/bits. A bits outside 0…len(ip)·8 sets none, or all.
func FillHost(ip []byte, bits int) {
	for i := max(bits, 0); i < len(ip)*8; i++ {
		ip[i/8] |= 0x80 >> (i % 8)
	}
}
