package model

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The messages that Conn sends are encoded here as
// github.com/google/nftables encodes them (FlushSet, SetAddElements,
// SetDeleteElements), attribute for attribute, straight into one buffer per
// message: TestMessagesAsGoogleNftables compares the bytes.

// attrHeader is the length of a netlink attribute's header.
const attrHeader = 4

// Element attributes (NFTA_SET_ELEM_*, NFTA_DATA_VALUE) that
// golang.org/x/sys/unix does not name.
const (
	attrElemKeyEnd = 10
	attrDataValue  = 1
	// udataComment is libnftnl's NFTNL_UDATA_SET_ELEM_COMMENT.
	udataComment = 0
)

// attrStart appends the header of an attribute of type typ whose length
// attrEnd fills in, and returns where it starts.
func attrStart(buf []byte, typ uint16) ([]byte, int) {
	return binary.NativeEndian.AppendUint16(binary.NativeEndian.AppendUint16(buf, 0), typ), len(buf)
}

// attrEnd sets the length of the attribute that starts at start to what
// follows it in buf, and pads buf to 4 bytes.
func attrEnd(buf []byte, start int) []byte {
	binary.NativeEndian.PutUint16(buf[start:], uint16(len(buf)-start))
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	return buf
}

// attrString appends an attribute holding s and a NUL.
func attrString(buf []byte, typ uint16, s string) []byte {
	buf, start := attrStart(buf, typ)
	return attrEnd(append(append(buf, s...), 0), start)
}

// nfgenHeader is the nfgenmsg that starts an nf_tables message.
func nfgenHeader(family byte, size int) []byte {
	return append(make([]byte, 0, size), family, unix.NFNETLINK_V0, 0, 0)
}

// flushMessage deletes every element of a set.
func flushMessage(family byte, table, set string) netlink.Message {
	data := nfgenHeader(family, 16+len(table)+len(set))
	data = attrString(data, unix.NFTA_SET_TABLE, table)
	data = attrString(data, unix.NFTA_SET_NAME, set)
	return netlink.Message{
		Header: netlink.Header{Type: unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELSETELEM, Flags: netlink.Request | netlink.Acknowledge},
		Data:   data,
	}
}

// elementsMessage adds (typ NFT_MSG_NEWSETELEM) or deletes
// (NFT_MSG_DELSETELEM) the elements of es in g, of one set: each its key,
// in an interval set also its last key (KeyEnd), its value, its comment as
// user data.
func elementsMessage(typ uint16, family byte, table string, es []Element, g elementGroup, interval bool) netlink.Message {
	data := nfgenHeader(family, 32+len(table)+len(g.set)+g.bytes)
	data = attrString(data, unix.NFTA_SET_NAME, g.set)
	data, start := attrStart(data, unix.NFTA_SET_ELEM_LIST_SET_ID)
	data = attrEnd(binary.BigEndian.AppendUint32(data, 0), start)
	data = attrString(data, unix.NFTA_SET_TABLE, table)
	data, list := attrStart(data, unix.NFTA_SET_ELEM_LIST_ELEMENTS|unix.NLA_F_NESTED)
	for n, i := range g.index {
		data = appendElement(data, uint16(n+1), &es[i], interval)
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: netlink.Request | netlink.Acknowledge | netlink.Create},
		Data:   attrEnd(data, list),
	}
}

// appendElement appends e as the index'th attribute of an element list.
func appendElement(buf []byte, index uint16, e *Element, interval bool) []byte {
	buf, start := attrStart(buf, index|unix.NLA_F_NESTED)
	buf = appendDataAttr(buf, unix.NFTA_SET_ELEM_KEY, e.Key, false)
	if interval {
		buf = appendDataAttr(buf, attrElemKeyEnd, e.Key, true)
	}
	if len(e.Value) > 0 {
		buf = appendDataAttr(buf, unix.NFTA_SET_ELEM_DATA, e.Value, false)
	}
	if e.Comment != "" {
		var udata int
		buf, udata = attrStart(buf, unix.NFTA_SET_ELEM_USERDATA)
		buf = append(append(append(buf, udataComment, byte(len(e.Comment)+1)), e.Comment...), 0)
		buf = attrEnd(buf, udata)
	}
	return attrEnd(buf, start)
}

// appendDataAttr appends a nested nft_data attribute holding the fields ds,
// concatenated and padded to 4 bytes each; one field is not a
// concatenation and has its own length (a port's 2 bytes, a protocol's 1).
// last encodes a prefix's last address.
func appendDataAttr(buf []byte, typ uint16, ds []Datum, last bool) []byte {
	buf, nested := attrStart(buf, typ|unix.NLA_F_NESTED)
	buf, start := attrStart(buf, attrDataValue)
	value := len(buf)
	for _, d := range ds {
		buf = d.appendBytes(buf, last)
	}
	if len(ds) == 1 {
		buf = buf[:value+ds[0].size()]
	}
	return attrEnd(attrEnd(buf, start), nested)
}
