package nftables

import (
	"errors"
	"fmt"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// FlatNetlink sends the flat layout's elements over a netlink socket,
// without nft: an element-only change of RenderFlatChanges as one
// transaction (Apply), the elements of a FlatLoad (Load). It is the flat
// layout's thin executor: it holds no policy and does not read the table.
type FlatNetlink struct{ conn *model.Conn }

// DialFlatNetlink opens a netlink socket in the calling thread's network
// namespace.
func DialFlatNetlink() (*FlatNetlink, error) {
	c, err := model.Dial()
	if err != nil {
		return nil, err
	}
	return &FlatNetlink{conn: c}, nil
}

// Close closes the socket.
func (n *FlatNetlink) Close() error {
	if n == nil || n.conn == nil {
		return nil
	}
	return n.conn.Close()
}

// Apply sends ch, which must be ElementsOnly.
func (n *FlatNetlink) Apply(ch FlatChanges) error {
	if n == nil || n.conn == nil {
		return errors.New("nftables: FlatNetlink not made by DialFlatNetlink")
	}
	if !ch.ElementsOnly {
		return fmt.Errorf("flat nftables changes touch chains or sets: apply the transaction with nft")
	}
	return n.conn.Send(model.ElementBatch{Table: ch.table, Add: ch.add, Del: ch.del})
}

// Load sends the elements of l that its Definitions leave out (for a
// FlatResync, after flushing the sets that hold them), and returns the
// number of transactions it took.
func (n *FlatNetlink) Load(l FlatLoad) (int, error) {
	if n == nil || n.conn == nil {
		return 0, errors.New("nftables: FlatNetlink not made by DialFlatNetlink")
	}
	tx, _, err := n.load(l)
	return tx, err
}

// load is Load, also returning the number of elements it sent.
func (n *FlatNetlink) load(l FlatLoad) (tx, elements int, err error) {
	b := model.ElementBatch{Table: l.table, Add: l.table.NetlinkElements()}
	if l.resync {
		b.Flush = l.table.NetlinkSets()
	}
	tx, err = n.conn.SendInChunks(b)
	return tx, model.Count(b.Add), err
}
