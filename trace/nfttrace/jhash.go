package nfttrace

import (
	"encoding/binary"
	"math/bits"
)

// jhashValue is what `jhash SELECTORS mod N seed S offset O` gives for the
// values key of s.inner, as the kernel's nft_hash computes it: Bob
// Jenkins' lookup3 hash (the kernel's jhash) of the values' bytes, each
// field padded to 4 bytes as in a register, scaled to N.
func jhashValue(s selector, key []datum) uint64 {
	var data []byte
	for i, in := range s.inner {
		data = appendField(data, in, key[i])
	}
	h := jhash(data, s.seed)
	return uint64(uint32((uint64(h)*s.mod)>>32)) + s.off
}

// appendField appends one value as the kernel's registers hold it:
// addresses in network order, ports in network order and protocols as one
// byte (both padded to 4 bytes), marks and integers in host order.
func appendField(b []byte, s selector, d datum) []byte {
	switch s.typ {
	case typeIPv4, typeIPv6:
		return append(b, d.addr.AsSlice()...)
	case typePort:
		return append(binary.BigEndian.AppendUint16(b, uint16(d.num)), 0, 0)
	case typeProto:
		return append(b, byte(d.num), 0, 0, 0)
	}
	return binary.NativeEndian.AppendUint32(b, uint32(d.num))
}

// jhash is the kernel's jhash (include/linux/jhash.h) of k with initval.
func jhash(k []byte, initval uint32) uint32 {
	a := 0xdeadbeef + uint32(len(k)) + initval
	b, c := a, a
	for len(k) > 12 { // whole words in host order, the rest byte by byte
		a += binary.NativeEndian.Uint32(k)
		b += binary.NativeEndian.Uint32(k[4:])
		c += binary.NativeEndian.Uint32(k[8:])
		a, b, c = jhashMix(a, b, c)
		k = k[12:]
	}
	if len(k) == 0 {
		return c
	}
	var tail [12]byte
	copy(tail[:], k)
	a += binary.LittleEndian.Uint32(tail[:])
	b += binary.LittleEndian.Uint32(tail[4:])
	c += binary.LittleEndian.Uint32(tail[8:])
	return jhashFinal(a, b, c)
}

func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
