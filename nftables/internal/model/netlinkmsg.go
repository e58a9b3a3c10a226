package model

import (
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// The messages that Conn sends are written by nftables/internal/nftnl
// (ElementsMessage, FlushSetMessage) as github.com/google/nftables encodes
// them (FlushSet, SetAddElements, SetDeleteElements), attribute for
// attribute: TestMessagesAsGoogleNftables compares the bytes. This file
// gives nftnl each row's fields and frames the messages.

// nlFamily is nftnl's name of a table's family.
func nlFamily(f Family) nftnl.Family {
	if f == IPv6 {
		return nftnl.IPv6
	}
	return nftnl.IPv4
}

// flushMessage deletes every element of a set.
func flushMessage(family nftnl.Family, table, set string) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELSETELEM, Flags: netlink.Request | netlink.Acknowledge},
		Data:   nftnl.FlushSetMessage(family, table, set),
	}
}

// elementsMessage adds (typ NFT_MSG_NEWSETELEM) or deletes
// (NFT_MSG_DELSETELEM) the elements of es in g, of one set: each its key,
// in an interval set also its last key (KeyEnd), its value, its comment.
// A row's fields are made in *fieldsBuf, which the caller keeps across
// messages.
func elementsMessage(typ uint16, family nftnl.Family, table string, es []Element, g elementGroup, interval bool, fieldsBuf *[]byte) netlink.Message {
	m := nftnl.NewElementsMessage(family, table, g.set, g.bytes)
	var rowBuf []Datum
	fields := *fieldsBuf
	for _, p := range g.parts {
		e := &es[p.i]
		for r := p.from; r < p.to; r++ {
			rowKey, value := e.row(int(r), &rowBuf)
			fields = appendFields(fields[:0], false, e.Key, rowKey)
			keyEnd := len(fields)
			if interval {
				fields = appendFields(fields, true, e.Key, rowKey)
			}
			valueAt := len(fields)
			if len(value) > 0 {
				fields = appendFields(fields, false, value, nil)
			}
			var end []byte
			if interval {
				end = fields[keyEnd:valueAt]
			}
			m.Add(fields[:keyEnd], end, fields[valueAt:], e.rowComment(int(r)))
		}
	}
	*fieldsBuf = fields
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: netlink.Request | netlink.Acknowledge | netlink.Create},
		Data:   m.Body(),
	}
}
