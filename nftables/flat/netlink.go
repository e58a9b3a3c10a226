package flat

import (
	"errors"
	"fmt"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// Netlink sends the flat layout's elements over a netlink socket,
// without nft: an element-only change of RenderChanges as one
// transaction (Apply), the elements of a Load (Load). It is the flat
// layout's thin executor: it holds no policy and does not read the table.
type Netlink struct{ conn *model.Conn }

// DialNetlink opens a netlink socket in the calling thread's network
// namespace.
func DialNetlink() (*Netlink, error) {
	c, err := model.Dial()
	if err != nil {
		return nil, err
	}
	return &Netlink{conn: c}, nil
}

// errNoNetlink is the error of a Netlink that DialNetlink did not make.
var errNoNetlink = errors.New("nftables/flat: Netlink not made by DialNetlink")

// Close closes the socket.
func (n *Netlink) Close() error {
	if n == nil || n.conn == nil {
		return nil
	}
	return n.conn.Close()
}

// Apply sends ch, which must be ElementsOnly.
func (n *Netlink) Apply(ch Changes) error {
	if n == nil || n.conn == nil {
		return errNoNetlink
	}
	if !ch.ElementsOnly {
		return fmt.Errorf("flat nftables changes touch chains or sets: apply the transaction with nft")
	}
	return n.conn.Send(model.ElementBatch{Table: ch.table, Add: ch.add, Del: ch.del})
}

// Load sends the elements of l that its Definitions leave out (for a
// Resync, after flushing the sets that hold them), and returns the
// number of transactions it took.
func (n *Netlink) Load(l Load) (int, error) {
	if n == nil || n.conn == nil {
		return 0, errNoNetlink
	}
	tx, _, err := n.load(l)
	return tx, err
}

// load is Load, also returning the number of elements it sent.
func (n *Netlink) load(l Load) (tx, elements int, err error) {
	b := model.ElementBatch{Table: l.table, Add: l.table.NetlinkElements()}
	if l.resync {
		b.Flush = l.table.NetlinkSets()
	}
	tx, err = n.conn.SendInChunks(b)
	return tx, model.Count(b.Add), err
}
