package model

import (
	"fmt"
	"slices"

	gnft "github.com/google/nftables"
)

// ElementBatch is a list of element additions and deletions on one table,
// sent over netlink as one transaction by Conn.Send.
type ElementBatch struct {
	Table    *Table
	Add, Del []Element
}

// Conn sends element batches over a netfilter netlink socket.
type Conn struct {
	c *gnft.Conn
}

// Dial opens a netlink socket in the calling thread's network namespace.
func Dial() (*Conn, error) {
	c, err := gnft.New(gnft.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables netlink socket: %w", err)
	}
	return &Conn{c: c}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.c.CloseLasting() }

// Send applies b's deletions, then its additions, as one transaction: the
// kernel applies all of them or none.
func (c *Conn) Send(b ElementBatch) error {
	if len(b.Add)+len(b.Del) == 0 {
		return nil
	}
	gt := &gnft.Table{Name: b.Table.Name, Family: gnft.TableFamilyIPv4}
	if b.Table.Family == IPv6 {
		gt.Family = gnft.TableFamilyIPv6
	}
	interval := make(map[string]bool, len(b.Table.Sets))
	for _, s := range b.Table.Sets {
		interval[s.Name] = s.Interval
	}
	for _, e := range slices.Concat(b.Add, b.Del) {
		if !b.Table.netlinkEncodes(e.Set) {
			return fmt.Errorf("elements of set %s are not encoded for netlink", e.Set)
		}
		if e.Verdict != nil {
			return fmt.Errorf("element of %s: verdicts are not encoded for netlink", e.Set)
		}
	}
	for _, group := range groupBySet(b.Del) {
		s := &gnft.Set{Table: gt, Name: group[0].Set}
		if err := c.c.SetDeleteElements(s, netlinkElements(group, interval[s.Name])); err != nil {
			return fmt.Errorf("delete elements of %s: %w", s.Name, err)
		}
	}
	for _, group := range groupBySet(b.Add) {
		s := &gnft.Set{Table: gt, Name: group[0].Set}
		if err := c.c.SetAddElements(s, netlinkElements(group, interval[s.Name])); err != nil {
			return fmt.Errorf("add elements to %s: %w", s.Name, err)
		}
	}
	if err := c.c.Flush(); err != nil {
		return fmt.Errorf("element transaction on table %s %s: %w", b.Table.Family, b.Table.Name, err)
	}
	return nil
}

// maxMessageElements bounds the elements of one netlink message: the
// list is one attribute, whose length must fit in 16 bits.
const maxMessageElements = 200

// maxTransactionElements bounds the elements of one transaction that
// SendInChunks sends: a transaction must go to the kernel in one sendmsg,
// which must fit in the socket's send buffer (net.core.wmem_default, 208
// KiB on most systems); raising the buffer beyond net.core.wmem_max takes
// SO_SNDBUFFORCE, which github.com/google/nftables does not set.
const maxTransactionElements = 1000

// SendInChunks adds b's elements (it deletes none) in transactions of at
// most maxTransactionElements elements each, and returns how many it sent.
// A failure leaves the transactions before it applied.
func (c *Conn) SendInChunks(b ElementBatch) (int, error) {
	n := 0
	for start := 0; start < len(b.Add); start += maxTransactionElements {
		chunk := b.Add[start:min(start+maxTransactionElements, len(b.Add))]
		if err := c.Send(ElementBatch{Table: b.Table, Add: chunk}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// groupBySet splits elements into runs of the same set, keeping their
// order, of at most maxMessageElements each.
func groupBySet(es []Element) [][]Element {
	var groups [][]Element
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].Set == es[i].Set && j-i < maxMessageElements {
			j++
		}
		groups = append(groups, es[i:j])
		i = j
	}
	return groups
}

// netlinkElements encodes elements as nft does: concatenated fields padded
// to 4 bytes, an interval set's elements with their last key (KeyEnd), the
// comment as user data.
func netlinkElements(es []Element, interval bool) []gnft.SetElement {
	out := make([]gnft.SetElement, len(es))
	for i, e := range es {
		key, keyEnd := encode(e.Key)
		val, _ := encode(e.Value)
		out[i] = gnft.SetElement{Key: key, Val: val, Comment: e.Comment}
		if interval {
			out[i].KeyEnd = keyEnd
		}
	}
	return out
}

// encode concatenates the fields' encodings: the first and the last key.
// A key or value of one field is not a concatenation, and has the field's
// own length (a port's 2 bytes, a protocol's 1), not a register's 4.
func encode(ds []Datum) (first, last []byte) {
	for _, d := range ds {
		lo, hi := d.bytes()
		first, last = append(first, lo...), append(last, hi...)
	}
	if len(ds) == 1 {
		n := ds[0].size()
		first, last = first[:n], last[:n]
	}
	return first, last
}
