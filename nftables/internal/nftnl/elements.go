package nftnl

import (
	"encoding/binary"

	"github.com/svcproxy/svcproxy/nftables/internal/nlattr"
)

// The flat layout's element messages: many elements of one set per
// message, written straight into one buffer, in the attributes and order
// that github.com/google/nftables writes them (set name, set id 0, table,
// the elements numbered from 1; an element's key, the end of its interval,
// its value, its comment). Package model frames and sends them; its
// TestMessagesAsGoogleNftables compares the bytes.

// Attributes that the flat layout's element messages have besides those
// of Batch's (NFTA_SET_ELEM_KEY_END, NFTA_SET_ELEM_LIST_SET_ID is
// attrElemListSetID).
const attrElemKeyEnd = 10

// ElementsMessage is the body of one message that adds or deletes
// elements of one set. The zero value is not usable; see
// NewElementsMessage.
type ElementsMessage struct {
	buf  []byte
	list int
	n    uint16
}

// NewElementsMessage starts the body of a message on the elements of set
// in table, with room for size bytes of elements.
func NewElementsMessage(family Family, table, set string, size int) ElementsMessage {
	buf := append(make([]byte, 0, 32+len(table)+len(set)+size), byte(family), 0, 0, 0)
	buf = nlattr.String(buf, attrElemListSet, set)
	buf = nlattr.U32(buf, attrElemListSetID, 0)
	buf = nlattr.String(buf, attrElemListTable, table)
	buf, list := nlattr.Start(buf, attrElemListElems|nlattr.Nested)
	return ElementsMessage{buf: buf, list: list}
}

// Add appends an element: its key, the end of its interval (nil but in an
// interval set), its value (nil in a set) and its comment ("" for none),
// each as the bytes nf_tables compares.
func (m *ElementsMessage) Add(key, keyEnd, value []byte, comment string) {
	m.n++
	buf, start := nlattr.Start(m.buf, m.n|nlattr.Nested)
	buf = appendData(buf, attrElemKey, key)
	if keyEnd != nil {
		buf = appendData(buf, attrElemKeyEnd, keyEnd)
	}
	if len(value) > 0 {
		buf = appendData(buf, attrElemData, value)
	}
	if comment != "" {
		var udata int
		buf, udata = nlattr.Start(buf, attrElemUserdata)
		buf = appendUdataString(buf, 0, comment)
		buf = nlattr.End(buf, udata)
	}
	m.buf = nlattr.End(buf, start)
}

// Body ends the element list and returns the message's body.
func (m *ElementsMessage) Body() []byte { return nlattr.End(m.buf, m.list) }

// FlushSetMessage is the body of the message that deletes every element
// of set in table (NFT_MSG_DELSETELEM without elements).
func FlushSetMessage(family Family, table, set string) []byte {
	buf := append(make([]byte, 0, 16+len(table)+len(set)), byte(family), 0, 0, 0)
	buf = nlattr.String(buf, attrSetTable, table)
	return nlattr.String(buf, attrSetName, set)
}

// appendData appends a nested nft_data attribute of type typ holding v.
func appendData(buf []byte, typ uint16, v []byte) []byte {
	buf, nested := nlattr.Start(buf, typ|nlattr.Nested)
	buf = nlattr.Bytes(buf, attrDataValue, v)
	return nlattr.End(buf, nested)
}

// appendUdataString appends one libnftnl user-data TLV holding a
// NUL-terminated string, the form of rule and element comments.
func appendUdataString(buf []byte, typ byte, s string) []byte {
	return append(append(append(buf, typ, byte(len(s)+1)), s...), 0)
}

// udataIntervalOpen is the user data of an element that opens an interval
// running to the last key: NFTNL_UDATA_SET_ELEM_FLAGS holding
// NFTNL_SET_ELEM_F_INTERVAL_OPEN.
func udataIntervalOpen() []byte { return binary.NativeEndian.AppendUint32([]byte{1, 4}, 1) }
