package model

import (
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/nftables/internal/nlattr"
)

// The messages that Conn sends are encoded here as
// github.com/google/nftables encodes them (FlushSet, SetAddElements,
// SetDeleteElements), attribute for attribute, straight into one buffer per
// message (with nlattr, as nftnl writes its own): TestMessagesAsGoogleNftables
// compares the bytes.

// Element attributes (NFTA_SET_ELEM_*, NFTA_DATA_VALUE) that
// golang.org/x/sys/unix does not name.
const (
	attrElemKeyEnd = 10
	attrDataValue  = 1
	// udataComment is libnftnl's NFTNL_UDATA_SET_ELEM_COMMENT.
	udataComment = 0
)

// nfgenHeader is the nfgenmsg that starts an nf_tables message.
func nfgenHeader(family byte, size int) []byte {
	return append(make([]byte, 0, size), family, unix.NFNETLINK_V0, 0, 0)
}

// flushMessage deletes every element of a set.
func flushMessage(family byte, table, set string) netlink.Message {
	data := nfgenHeader(family, 16+len(table)+len(set))
	data = nlattr.String(data, unix.NFTA_SET_TABLE, table)
	data = nlattr.String(data, unix.NFTA_SET_NAME, set)
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
	data = nlattr.String(data, unix.NFTA_SET_NAME, g.set)
	data, start := nlattr.Start(data, unix.NFTA_SET_ELEM_LIST_SET_ID)
	data = nlattr.End(binary.BigEndian.AppendUint32(data, 0), start)
	data = nlattr.String(data, unix.NFTA_SET_TABLE, table)
	data, list := nlattr.Start(data, unix.NFTA_SET_ELEM_LIST_ELEMENTS|unix.NLA_F_NESTED)
	n := uint16(0)
	var buf []Datum
	for _, p := range g.parts {
		e := &es[p.i]
		for r := p.from; r < p.to; r++ {
			n++
			data = appendElement(data, n, e, int(r), interval, &buf)
		}
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: netlink.Request | netlink.Acknowledge | netlink.Create},
		Data:   nlattr.End(data, list),
	}
}

// appendElement appends row r of e (a block's, or e itself) as the
// index'th attribute of an element list. A row that e's Source makes is
// made in rowBuf.
func appendElement(buf []byte, index uint16, e *Element, r int, interval bool, rowBuf *[]Datum) []byte {
	rowKey, value := e.row(r, rowBuf)
	buf, start := nlattr.Start(buf, index|unix.NLA_F_NESTED)
	buf = appendDataAttr(buf, unix.NFTA_SET_ELEM_KEY, e.Key, rowKey, false)
	if interval {
		buf = appendDataAttr(buf, attrElemKeyEnd, e.Key, rowKey, true)
	}
	if len(value) > 0 {
		buf = appendDataAttr(buf, unix.NFTA_SET_ELEM_DATA, value, nil, false)
	}
	if comment := e.rowComment(r); comment != "" {
		var udata int
		buf, udata = nlattr.Start(buf, unix.NFTA_SET_ELEM_USERDATA)
		buf = append(append(append(buf, udataComment, byte(len(comment)+1)), comment...), 0)
		buf = nlattr.End(buf, udata)
	}
	return nlattr.End(buf, start)
}

// appendDataAttr appends a nested nft_data attribute holding the fields
// of head and then tail (appendFields). last encodes a prefix's last
// address.
func appendDataAttr(buf []byte, typ uint16, head, tail []Datum, last bool) []byte {
	buf, nested := nlattr.Start(buf, typ|unix.NLA_F_NESTED)
	buf, start := nlattr.Start(buf, attrDataValue)
	buf = appendFields(buf, last, head, tail)
	return nlattr.End(nlattr.End(buf, start), nested)
}
