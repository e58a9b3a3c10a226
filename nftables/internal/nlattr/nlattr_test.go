package nlattr

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// le16 is a native-endian uint16 as bytes (attribute lengths and types).
func le16(v uint16) []byte { return binary.NativeEndian.AppendUint16(nil, v) }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestAttributes: lengths count the header and the value but not the
// padding, values are padded to 4 bytes (of the buffer, whose attributes
// start aligned), numbers are big-endian, and a nested attribute's length
// covers what it holds, padding included.
func TestAttributes(t *testing.T) {
	nested := func() []byte {
		buf, start := Start([]byte{0xff, 0xff, 0xff, 0xff}, 7|Nested) // after a 4-byte header, as in a message
		buf = String(buf, 1, "ab")
		return End(buf, start)
	}
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"bytes, padded", Bytes(nil, 3, []byte{1, 2, 3, 4, 5}), cat(le16(9), le16(3), []byte{1, 2, 3, 4, 5, 0, 0, 0})},
		{"bytes, aligned", Bytes(nil, 3, []byte{1, 2, 3, 4}), cat(le16(8), le16(3), []byte{1, 2, 3, 4})},
		{"string and NUL", String(nil, 1, "abc"), cat(le16(8), le16(1), []byte("abc\x00"))},
		{"u32 big-endian", U32(nil, 2, 0x01020304), cat(le16(8), le16(2), []byte{1, 2, 3, 4})},
		{"u64 big-endian", U64(nil, 2, 0x0102030405060708), cat(le16(12), le16(2), []byte{1, 2, 3, 4, 5, 6, 7, 8})},
		{"nested", nested(), cat([]byte{0xff, 0xff, 0xff, 0xff}, le16(12), le16(7|Nested), le16(7), le16(1), []byte("ab\x00\x00"))},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}
