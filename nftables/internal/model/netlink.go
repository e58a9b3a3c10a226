package model

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ElementBatch is a list of element additions and deletions on one table,
// sent over netlink as one transaction by Conn.Send.
type ElementBatch struct {
	Table *Table
	// Flush are sets whose elements are all deleted first.
	Flush    []string
	Add, Del []Element
}

// Conn sends element batches over a netfilter netlink socket.
type Conn struct {
	nc *netlink.Conn
	// txBytes bounds the netlink messages of one transaction: a
	// transaction goes to the kernel in one sendmsg, which the kernel
	// refuses when it exceeds the socket's send buffer.
	txBytes int
}

// socketBuffer is the send and receive buffer that Dial asks for: room for
// the elements of 100,000 Services × 10 endpoints in one transaction, and
// for the kernel's acknowledgement of each of its messages, which it
// queues before the first is read. The kernel allocates only what a
// sendmsg holds.
const socketBuffer = 256 << 20

// Dial opens a netlink socket in the calling thread's network namespace,
// with send and receive buffers of socketBuffer bytes where the process
// may force them (CAP_NET_ADMIN), else as large as net.core.wmem_max and
// net.core.rmem_max allow.
func Dial() (*Conn, error) {
	nc, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{})
	if err != nil {
		return nil, fmt.Errorf("nftables netlink socket: %w", err)
	}
	sndbuf, err := raiseBuffers(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nftables netlink socket: %w", err)
	}
	return &Conn{nc: nc, txBytes: sndbuf - transactionSlack}, nil
}

// transactionSlack is what a transaction leaves of the send buffer: the
// kernel refuses a message longer than the buffer less 32 bytes, and the
// batch's begin and end messages take 40.
const transactionSlack = 4096

// raiseBuffers sets nc's buffers (see Dial) and returns the send buffer's
// size as the kernel reports it.
func raiseBuffers(nc *netlink.Conn) (int, error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("netlink socket: %w", err)
	}
	var forceErr error
	if err := raw.Control(func(fd uintptr) {
		for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, socketBuffer); err != nil {
				forceErr = err
			}
		}
	}); err != nil {
		return 0, fmt.Errorf("netlink socket: %w", err)
	}
	if forceErr != nil { // the kernel caps these at net.core.[wr]mem_max
		if err := nc.SetWriteBuffer(socketBuffer); err != nil {
			return 0, fmt.Errorf("netlink send buffer: %w", err)
		}
		if err := nc.SetReadBuffer(socketBuffer); err != nil {
			return 0, fmt.Errorf("netlink receive buffer: %w", err)
		}
	}
	n, err := nc.WriteBuffer()
	if err != nil {
		return 0, fmt.Errorf("netlink send buffer: %w", err)
	}
	return n, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.nc.Close() }

// Send applies b's set flushes, then its deletions, then its additions, as
// one transaction: the kernel applies all of them or none.
func (c *Conn) Send(b ElementBatch) error {
	if len(b.Add)+len(b.Del)+len(b.Flush) == 0 {
		return nil
	}
	msgs, err := b.messages()
	if err != nil {
		return err
	}
	return c.transact(msgs, b.Table)
}

// transact sends msgs as one batch and reads the kernel's answer to each.
func (c *Conn) transact(msgs []netlink.Message, t *Table) error {
	begin := netlink.Message{Header: netlink.Header{Type: unix.NFNL_MSG_BATCH_BEGIN, Flags: netlink.Request},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}}
	end := begin
	end.Header.Type = unix.NFNL_MSG_BATCH_END
	if _, err := c.nc.SendMessages(slices.Concat([]netlink.Message{begin}, msgs, []netlink.Message{end})); err != nil {
		return fmt.Errorf("element transaction on table %s %s: %w", t.Family, t.Name, err)
	}
	var errs error
	for answered := 0; answered < len(msgs); {
		replies, err := c.nc.Receive()
		if err != nil {
			// After these the kernel sends nothing more.
			if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.ENOBUFS) {
				return fmt.Errorf("element transaction on table %s %s: %w", t.Family, t.Name, err)
			}
			errs = errors.Join(errs, err)
			answered++
			continue
		}
		answered += max(len(replies), 1)
	}
	if errs != nil {
		return fmt.Errorf("element transaction on table %s %s: %w", t.Family, t.Name, errs)
	}
	return nil
}

// messages are b's nf_tables messages: a set flush, then element deletions
// and additions in messages of one set each.
func (b ElementBatch) messages() ([]netlink.Message, error) {
	sets := make(map[string]*Set, len(b.Table.Sets))
	for _, s := range b.Table.Sets {
		if s.netlinkEncoded() {
			sets[s.Name] = s
		}
	}
	encoded := lookupBySet(sets)
	for _, es := range [][]Element{b.Del, b.Add} {
		for i := range es {
			if s, _ := encoded.get(es[i].Set); s == nil {
				return nil, fmt.Errorf("elements of set %s are not encoded for netlink", es[i].Set)
			}
			if es[i].Verdict != nil {
				return nil, fmt.Errorf("element of %s: verdicts are not encoded for netlink", es[i].Set)
			}
			switch e := &es[i]; {
			case e.Rows < 0:
				return nil, fmt.Errorf("block of %s: %d rows", e.Set, e.Rows)
			case e.Rows > 0 && e.Source == nil:
				return nil, fmt.Errorf("block of %s: %d rows without a source", e.Set, e.Rows)
			}
		}
	}
	family := nlFamily(b.Table.Family)
	var msgs []netlink.Message
	for _, name := range b.Flush {
		if sets[name] == nil {
			return nil, fmt.Errorf("elements of set %s are not encoded for netlink", name)
		}
		msgs = append(msgs, flushMessage(family, b.Table.Name, name))
	}
	interval := b.Table.intervalSets()
	var fields []byte
	for _, op := range []struct {
		typ uint16
		es  []Element
	}{{unix.NFT_MSG_DELSETELEM, b.Del}, {unix.NFT_MSG_NEWSETELEM, b.Add}} {
		for _, group := range groupBySet(op.es, interval) {
			msgs = append(msgs, elementsMessage(op.typ, family, b.Table.Name, op.es, group, interval[group.set], &fields))
		}
	}
	return msgs, nil
}

// intervalSets reports which of t's sets have the interval flag.
func (t *Table) intervalSets() map[string]bool {
	interval := make(map[string]bool, len(t.Sets))
	for _, s := range t.Sets {
		interval[s.Name] = s.Interval
	}
	return interval
}

// maxMessageBytes bounds the encoded elements of one netlink message: the
// list is one attribute, whose length must fit in 16 bits.
const maxMessageBytes = 60000

// rowBytes bounds the bytes of one of the elements that e stands for (a
// block's rows have the same size but for their comments) in a netlink
// message as
// github.com/google/nftables encodes it: the nested key (and the last key
// in an interval set), the value, the comment as user data, and their
// attribute headers. A row that e's Source makes is made in buf.
func rowBytes(e *Element, interval bool, buf *[]Datum) int {
	rowKey, value := e.row(0, buf)
	key := dataBytes(e.Key) + dataBytes(rowKey)
	n := 64 + key + dataBytes(value) + e.maxCommentLen()
	if interval {
		n += key
	}
	return n
}

// messageBytes bounds a message's bytes besides its elements: netlink and
// nfnetlink headers, the table's and the set's names (at most 256 bytes
// each), the set ID.
const messageBytes = 600

// SendInChunks flushes b's Flush sets and adds b's elements (it deletes
// none) in as few transactions as the socket's send buffer takes (one for
// the elements of 100,000 Services × 10 endpoints when Dial could raise
// it; the flushes go with the first), and returns how many it sent. A
// block may be split between transactions. A failure leaves the
// transactions before it applied.
func (c *Conn) SendInChunks(b ElementBatch) (int, error) {
	if len(b.Add) == 0 && len(b.Flush) > 0 {
		return 1, c.Send(b)
	}
	// Every set may start one message that is not full; a full one holds
	// at least maxMessageBytes/messageBytes elements.
	budget := c.txBytes - len(b.Table.Sets)*messageBytes
	chunks := b.Table.chunks(b.Add, budget)
	for n, add := range chunks {
		chunk := ElementBatch{Table: b.Table, Add: add}
		if n == 0 {
			chunk.Flush = b.Flush
		}
		if err := c.Send(chunk); err != nil {
			return n, err
		}
	}
	return len(chunks), nil
}

// chunks splits es into runs of at most budget bytes of messages, each
// with at least one element (or a block's row), splitting blocks between
// rows where they do not fit: es itself when it fits whole.
func (t *Table) chunks(es []Element, budget int) [][]Element {
	interval := lookupBySet(t.intervalSets())
	var buf []Datum
	size := func(e *Element) int {
		isInterval, _ := interval.get(e.Set)
		return rowBytes(e, isInterval, &buf) + messageBytes*messageBytes/maxMessageBytes
	}
	total := 0
	for i := range es {
		total += size(&es[i]) * es[i].Len()
	}
	if total <= budget {
		return [][]Element{es}
	}
	var out [][]Element
	var cur []Element
	bytes := 0
	for i := range es {
		e, row := es[i], size(&es[i])
		for {
			if n := e.Len(); bytes+row*n <= budget || len(cur) == 0 && e.Rows == 0 {
				cur, bytes = append(cur, e), bytes+row*n
				break
			}
			fit := (budget - bytes) / row
			if fit <= 0 && len(cur) > 0 {
				out, cur, bytes = append(out, cur), nil, 0
				continue
			}
			// A block's rows that fit (at least one) close the chunk; the
			// others are the block that starts the next.
			if fit = max(fit, 1); fit >= e.Rows {
				out, cur, bytes = append(out, append(cur, e)), nil, 0
				break
			}
			out, cur, bytes = append(out, append(cur, e.rows(0, fit))), nil, 0
			e = e.rows(fit, e.Rows)
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// elementGroup is the elements of one message: parts of elements of es,
// all of set, bytes (rowBytes) together.
type elementGroup struct {
	set   string
	parts []elementPart
	bytes int
}

// elementPart is rows [from, to) of the element of es at index i: of a
// block, or row 0 of an element that is not one.
type elementPart struct{ i, from, to int32 }

// groupBySet splits elements into messages: the elements of each set, in
// the order in which the sets first appear and each set's in their order,
// in runs of at most maxMessageBytes (a block split between rows where it
// does not fit). The kernel applies a transaction whole, so the order of
// its additions does not matter.
func groupBySet(es []Element, interval map[string]bool) []elementGroup {
	// The elements' indices placed set after set in one array: a first
	// pass numbers the sets and counts each set's elements, a second puts
	// them at their set's offset.
	// A run of one set's elements (one string) costs one map lookup.
	ids := map[string]int32{}
	var names []string
	var count []int
	setOf := make([]int32, len(es))
	id := int32(-1)
	for i := range es {
		if id < 0 || es[i].Set != names[id] {
			var ok bool
			if id, ok = ids[es[i].Set]; !ok {
				id = int32(len(names))
				ids[es[i].Set] = id
				names, count = append(names, es[i].Set), append(count, 0)
			}
		}
		setOf[i] = id
		count[id]++
	}
	offset := make([]int, len(names))
	for id := 1; id < len(names); id++ {
		offset[id] = offset[id-1] + count[id-1]
	}
	sorted := make([]int32, len(es))
	for i, id := range setOf {
		sorted[offset[id]] = int32(i)
		offset[id]++
	}
	// Then the sets' elements, in that order, fill messages: a message
	// ends at its set's last element or where the next row does not fit.
	var groups []elementGroup
	parts := make([]elementPart, 0, len(es))
	first, bytes, cur := 0, 0, int32(-1) // the message being filled
	end := func() {
		if len(parts) > first {
			groups = append(groups, elementGroup{set: names[cur], parts: parts[first:len(parts):len(parts)], bytes: bytes})
		}
		first, bytes = len(parts), 0
	}
	isInterval := false
	var buf []Datum
	for _, i := range sorted {
		if id := setOf[i]; id != cur {
			end()
			cur, isInterval = id, interval[names[id]]
		}
		e := &es[i]
		row := rowBytes(e, isInterval, &buf)
		for from, n := 0, e.Len(); from < n; {
			fit := min(n-from, (maxMessageBytes-bytes)/row)
			if fit <= 0 && len(parts) > first {
				end()
				continue
			}
			fit = max(fit, 1) // alone, over the bound
			parts = append(parts, elementPart{i, int32(from), int32(from + fit)})
			bytes += fit * row
			from += fit
		}
	}
	end()
	return groups
}

// appendFields appends the encodings of the fields of head and then tail,
// concatenated and padded to 4 bytes each (last: a prefix's last address,
// else its first). A key or value of one field is not a concatenation, and
// has the field's own length (a port's 2 bytes, a protocol's 1), not a
// register's 4.
func appendFields(buf []byte, last bool, head, tail []Datum) []byte {
	start := len(buf)
	for _, d := range head {
		buf = d.appendBytes(buf, last)
	}
	for _, d := range tail {
		buf = d.appendBytes(buf, last)
	}
	switch {
	case len(head) == 1 && len(tail) == 0:
		buf = buf[:start+head[0].size()]
	case len(head) == 0 && len(tail) == 1:
		buf = buf[:start+tail[0].size()]
	}
	return buf
}

// LimitTransactions bounds the transactions that SendInChunks sends to
// bytes of messages (and to the send buffer, as always).
func (c *Conn) LimitTransactions(bytes int) { c.txBytes = min(c.txBytes, bytes) }
