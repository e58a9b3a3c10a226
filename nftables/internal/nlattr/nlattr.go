// Package nlattr appends netlink attributes to a buffer as nf_tables reads
// them: a native-endian 16-bit length and type, the value, padding to 4
// bytes. Numbers inside values are big-endian, as nf_tables wants. It is
// the attribute writer of nftables/internal/nftnl, the encoder of both
// layouts' messages.
package nlattr

import "encoding/binary"

// Nested marks an attribute whose value is attributes (NLA_F_NESTED).
const Nested = 0x8000

// Start appends the header of an attribute of type typ whose length End
// fills in, and returns where it starts.
func Start(buf []byte, typ uint16) ([]byte, int) {
	return binary.NativeEndian.AppendUint16(binary.NativeEndian.AppendUint16(buf, 0), typ), len(buf)
}

// End sets the length of the attribute that starts at start to what
// follows it in buf, and pads buf to 4 bytes.
func End(buf []byte, start int) []byte {
	binary.NativeEndian.PutUint16(buf[start:], uint16(len(buf)-start))
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	return buf
}

// Bytes appends an attribute holding v.
func Bytes(buf []byte, typ uint16, v []byte) []byte {
	buf, start := Start(buf, typ)
	return End(append(buf, v...), start)
}

// String appends an attribute holding s and a NUL.
func String(buf []byte, typ uint16, s string) []byte {
	buf, start := Start(buf, typ)
	return End(append(append(buf, s...), 0), start)
}

// U32 appends an attribute holding v, big-endian.
func U32(buf []byte, typ uint16, v uint32) []byte {
	buf, start := Start(buf, typ)
	return End(binary.BigEndian.AppendUint32(buf, v), start)
}

// U64 appends an attribute holding v, big-endian.
func U64(buf []byte, typ uint16, v uint64) []byte {
	buf, start := Start(buf, typ)
	return End(binary.BigEndian.AppendUint64(buf, v), start)
}
