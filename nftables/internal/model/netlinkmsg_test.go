package model

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	gnft "github.com/google/nftables"
	"github.com/mdlayher/netlink"
)

// netlinkElements encodes elements as nft does: concatenated fields padded
// to 4 bytes, an interval set's elements with their last key (KeyEnd), the
// comment as user data.
func netlinkElements(es []Element, interval bool) []gnft.SetElement {
	size := 0
	for i := range es {
		size += dataBytes(es[i].Key) + dataBytes(es[i].Value)
		if interval {
			size += dataBytes(es[i].Key)
		}
	}
	// One array holds every key and value.
	buf := make([]byte, 0, size)
	field := func(ds []Datum, last bool) []byte {
		start := len(buf)
		for _, d := range ds {
			buf = d.appendBytes(buf, last)
		}
		if len(ds) == 1 { // not a concatenation: the field's own length
			buf = buf[:start+ds[0].size()]
		}
		return buf[start:len(buf):len(buf)]
	}
	out := make([]gnft.SetElement, len(es))
	for i := range es {
		e := &es[i]
		out[i] = gnft.SetElement{Key: field(e.Key, false), Comment: e.Comment}
		if len(e.Value) > 0 {
			out[i].Val = field(e.Value, false)
		}
		if interval {
			out[i].KeyEnd = field(e.Key, true)
		}
	}
	return out
}

// groupElements are the elements of groupBySet's messages.
func groupElements(es []Element, interval map[string]bool) [][]Element {
	var out [][]Element
	for _, g := range groupBySet(es, interval) {
		var group []Element
		for _, p := range g.parts {
			if e := &es[p.i]; e.Rows > 0 {
				group = append(group, Expand([]Element{e.rows(int(p.from), int(p.to))})...)
			} else {
				group = append(group, *e)
			}
		}
		out = append(out, group)
	}
	return out
}

// googleMessages are the messages that github.com/google/nftables sends
// for b: its set flushes, then its deletions and additions of the elements
// as netlinkElements encodes them, in the messages of groupBySet.
func googleMessages(t *testing.T, b ElementBatch) []netlink.Message {
	var sent []netlink.Message
	c, err := gnft.New(gnft.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		sent = append(sent, req...)
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	gt := &gnft.Table{Name: b.Table.Name, Family: gnft.TableFamilyIPv4}
	if b.Table.Family == IPv6 {
		gt.Family = gnft.TableFamilyIPv6
	}
	interval := b.Table.intervalSets()
	for _, name := range b.Flush {
		c.FlushSet(&gnft.Set{Table: gt, Name: name})
	}
	for _, group := range groupElements(b.Del, interval) {
		if err := c.SetDeleteElements(&gnft.Set{Table: gt, Name: group[0].Set}, netlinkElements(group, interval[group[0].Set])); err != nil {
			t.Fatal(err)
		}
	}
	for _, group := range groupElements(b.Add, interval) {
		if err := c.SetAddElements(&gnft.Set{Table: gt, Name: group[0].Set}, netlinkElements(group, interval[group[0].Set])); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// Without the batch's begin and end, and the headers' lengths,
	// sequence numbers and port IDs, which the socket sets.
	out := sent[1 : len(sent)-1]
	for i := range out {
		out[i].Header = netlink.Header{Type: out[i].Header.Type, Flags: out[i].Header.Flags}
	}
	return out
}

// TestMessagesAsGoogleNftables: the messages that Conn sends are, byte for
// byte, those that github.com/google/nftables encodes for the same
// flushes, deletions and additions: concatenated keys, the last key of an
// interval set's element, single-field values, comments, in both
// families, in several messages of one set.
func TestMessagesAsGoogleNftables(t *testing.T) {
	v6 := &Table{Family: IPv6, Name: "v6", Sets: []*Set{
		{Name: "ranges", Key: []Expr{IP6Daddr, IP6Saddr}, Interval: true},
		{Name: "ports", KeyType: []Type{TypeIPv6Addr, TypeInetService}, ValueType: []Type{TypeInetService}},
	}}
	v6.Elements = []Element{
		{Set: "ranges", Key: []Datum{Prefix(netip.MustParsePrefix("2001:db8::/64")), Prefix(netip.MustParsePrefix("2001:db8:1::1/128"))}, Comment: "ns/a:p/TCP"},
		{Set: "ports", Key: []Datum{Addr(netip.MustParseAddr("2001:db8:19::1")), Port(80)}, Value: []Datum{Port(8080)}},
	}
	big := flatLikeTable(400) // the targets in more than one message
	blocks := flatLikeBlocks(40, 700)
	for _, c := range []struct {
		name string
		b    ElementBatch
	}{
		{"IPv4, several messages per set, flushes and deletions", ElementBatch{Table: big, Flush: []string{"pairs", "targets"},
			Del: big.Elements[:5], Add: big.Elements}},
		{"IPv6, interval concatenation and a one-field value", ElementBatch{Table: v6, Del: v6.Elements[1:], Add: v6.Elements}},
		{"blocks, one split between messages", ElementBatch{Table: blocks, Del: blocks.Elements[:3], Add: blocks.Elements}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := googleMessages(t, c.b)
			got, err := c.b.messages()
			if err != nil {
				t.Fatal(err)
			}
			if len(want) < 3 {
				t.Fatalf("the reference sent %d messages", len(want))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("messages (-google/nftables +Conn):\n%s", diff)
			}
		})
	}
}
