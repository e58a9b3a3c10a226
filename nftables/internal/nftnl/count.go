package nftnl

import (
	"encoding/binary"

	"github.com/svcproxy/svcproxy/nftables/internal/nlattr"
)

// Message types and attributes of the counting dumps.
const (
	msgGetSetElem = 13
	// elemIntervalEnd is the flag (attrElemFlags) of the end of an
	// interval.
	elemIntervalEnd = 0x1
)

// dumpCounting is dumpEach, retried a few times when the table changes
// during the dump, with reset called before each attempt.
func (c *Conn) dumpCounting(typ uint16, family Family, filter func(*attrs), reset func(), each func([]byte) error) error {
	var err error
	for range 3 {
		reset()
		if err = c.dumpEach(typ, family, filter, each); err != errDumpInterrupted {
			return err
		}
	}
	return err
}

// walkAttrs calls f with the type (without the nested flag) and value of each
// attribute of b, stopping at the first malformed one.
func walkAttrs(b []byte, f func(typ uint16, v []byte)) {
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return
		}
		f(binary.NativeEndian.Uint16(b[2:])&^nlattr.Nested, b[4:n])
		b = b[min(len(b), (n+3)&^3):]
	}
}
