package model

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
)

// ackingConn is a Conn on a test socket (github.com/mdlayher/netlink/nltest)
// that acknowledges every message: nothing reaches a kernel.
func ackingConn(tb testing.TB) *Conn {
	ack := func(req []netlink.Message) ([]netlink.Message, error) {
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
	}
	return &Conn{nc: nltest.Dial(ack), txBytes: socketBuffer - transactionSlack}
}

// flatLikeTable is a table shaped as the flat layout's at services × 10
// endpoints: a set of frontends, a map of their targets (frontend . index
// : endpoint) and a set of endpoint pairs, with comments.
func flatLikeTable(services int) *Table {
	t := &Table{Family: IPv4, Name: "t", Sets: []*Set{
		{Name: "frontends", KeyType: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService}},
		{Name: "targets", KeyType: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService, TypeInetService}, ValueType: []Type{TypeIPv4Addr, TypeInetService}},
		{Name: "pairs", KeyType: []Type{TypeIPv4Addr, TypeIPv4Addr}},
	}}
	addr := func(net byte, i int) Datum {
		return Addr(netip.AddrFrom4([4]byte{198, net, byte(i >> 8), byte(i)}))
	}
	for s := range services {
		comment := fmt.Sprintf("namespace-%d/service-%d:http/TCP", s%100, s)
		frontend := []Datum{addr(19, s), Proto(6), Port(80)}
		t.Elements = append(t.Elements, Element{Set: "frontends", Key: frontend, Comment: comment})
		for i := range 10 {
			ep := addr(18, 10*s+i)
			t.Elements = append(t.Elements,
				Element{Set: "targets", Key: append(frontend[:3:3], Int(uint32(i))), Value: []Datum{ep, Port(8080)}, Comment: comment},
				Element{Set: "pairs", Key: []Datum{ep, ep}})
		}
	}
	return t
}

// BenchmarkConnLoad is Conn.SendInChunks of the elements of flatLikeTable
// to a socket that acknowledges without a kernel: the encoding and the
// batching in user space.
func BenchmarkConnLoad(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		t := flatLikeTable(n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			c := ackingConn(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.SendInChunks(ElementBatch{Table: t, Add: t.Elements}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
