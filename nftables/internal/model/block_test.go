package model

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// flatLikeBlocks is flatLikeTable with each Service's targets and pairs
// written as blocks, and one more Service, with rows targets, whose block
// needs more than one message; then the services+1 Services' second
// frontends, in one block whose rows have comments of their own
// (testFrontends).
func flatLikeBlocks(services, rows int) *Table {
	t := flatLikeTable(0)
	for s := range services + 1 {
		n := 10
		if s == services {
			n = rows
		}
		comment := fmt.Sprintf("namespace-%d/service-%d:http/TCP", s%100, s)
		frontend := []Datum{testAddr(19, s), Proto(6), Port(80)}
		t.Elements = append(t.Elements,
			Element{Set: "frontends", Key: frontend, Comment: comment},
			Element{Set: "targets", Key: frontend, Rows: n, Source: testTargets{s}, Comment: comment},
			Element{Set: "pairs", Rows: n, Source: testPairs{s}})
	}
	t.Elements = append(t.Elements, Element{Set: "frontends", Rows: services + 1, Source: testFrontends{}, Comment: "not used"})
	return t
}

// testFrontends makes the rows of the Services' second frontends, each
// with its Service's comment, of lengths that differ.
type testFrontends struct{}

func (testFrontends) Widths() (key, value int) { return 3, 0 }

func (testFrontends) AppendRow(dst []Datum, i int) []Datum {
	return append(dst, testAddr(20, i), Proto(6), Port(443))
}

func (testFrontends) RowComment(i int) string {
	return fmt.Sprintf("namespace-%d/service-%d:https/TCP", i%7, i)
}

func (testFrontends) MaxCommentLen() int { return 128 }

func testAddr(net byte, i int) Datum {
	return Addr(netip.AddrFrom4([4]byte{198, net, byte(i >> 8), byte(i)}))
}

// testTargets makes the rows of Service s's targets: index, then endpoint
// address and port.
type testTargets struct{ s int }

func (testTargets) Widths() (key, value int) { return 1, 2 }

func (t testTargets) AppendRow(dst []Datum, i int) []Datum {
	return append(dst, Int(uint32(i)), testAddr(18, 10*t.s+i), Port(8080))
}

// testPairs makes the rows of Service s's pairs: its endpoint address
// twice, as key.
type testPairs struct{ s int }

func (testPairs) Widths() (key, value int) { return 2, 0 }

func (p testPairs) AppendRow(dst []Datum, i int) []Datum {
	a := testAddr(18, 10*p.s+i)
	return append(dst, a, a)
}

// TestBlockRows: a block's rows are the elements it stands for, in text
// and as knftables objects, and Count counts them.
func TestBlockRows(t *testing.T) {
	blocks := flatLikeBlocks(3, 12)
	rows := &Table{Family: blocks.Family, Name: blocks.Name, Sets: blocks.Sets, Elements: Expand(blocks.Elements)}
	if got, want := len(rows.Elements), 3*(1+10+10)+1+12+12+4; got != want || Count(blocks.Elements) != want {
		t.Fatalf("%d elements expanded, Count %d; want %d", got, Count(blocks.Elements), want)
	}
	e := rows.Elements[1+10+3] // Service 0's pair 3
	if e.Set != "pairs" || fmt.Sprint(e.Key) != "[198.18.0.3 198.18.0.3]" || e.Value != nil {
		t.Errorf("pair 3: %+v", e)
	}
	e = rows.Elements[2] // Service 0's target 1
	if e.Set != "targets" || fmt.Sprint(e.Key, e.Value) != "[198.19.0.0 tcp 80 1] [198.18.0.1 8080]" {
		t.Errorf("target 1: %+v", e)
	}
	e = rows.Elements[len(rows.Elements)-2] // the second frontend of Service 2
	if e.Set != "frontends" || fmt.Sprint(e.Key) != "[198.20.0.2 tcp 443]" || e.Comment != "namespace-2/service-2:https/TCP" {
		t.Errorf("second frontend of Service 2: %+v", e)
	}
	if diff := cmp.Diff(rows.Script(), blocks.Script()); diff != "" {
		t.Errorf("script of blocks (-rows +blocks):\n%s", diff)
	}
	if diff := cmp.Diff(objectsText(rows), objectsText(blocks)); diff != "" {
		t.Errorf("objects of blocks (-rows +blocks):\n%s", diff)
	}
}

// objectsText is the text of a transaction that adds t's Objects.
func objectsText(t *Table) string {
	tx := knftables.NewFake(t.knftFamily(), t.Name).NewTransaction()
	for _, o := range t.Objects() {
		tx.Add(o)
	}
	return tx.String()
}

// TestChunks: chunks splits elements into runs within the budget, a block
// between rows where it does not fit, and their rows are the elements', in
// order; all of them fit in one run when the budget allows.
func TestChunks(t *testing.T) {
	blocks := flatLikeBlocks(20, 300)
	want := Expand(blocks.Elements)
	size := func(es []Element) int {
		bytes := 0
		for i := range es {
			bytes += es[i].Len() * (rowBytes(&es[i], false, new([]Datum)) + messageBytes*messageBytes/maxMessageBytes)
		}
		return bytes
	}
	row, maxRow, total := size(want[1:2]), 0, size(want)
	for i := range blocks.Elements { // a block's rows as their bound counts them
		maxRow = max(maxRow, size(blocks.Elements[i:i+1])/blocks.Elements[i].Len())
	}
	for _, budget := range []int{1, 7 * row, 100 * row, 1 << 30} {
		chunks := blocks.chunks(blocks.Elements, budget)
		var got []Element
		for _, c := range chunks {
			if bytes := size(c); bytes > max(budget, maxRow) {
				t.Errorf("budget %d: a chunk of %d bytes", budget, bytes)
			}
			got = append(got, Expand(c)...)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(Datum{})); diff != "" {
			t.Errorf("budget %d: rows of the chunks (-want +got):\n%s", budget, diff)
		}
		if budget == 1<<30 && len(chunks) != 1 {
			t.Errorf("budget %d: %d chunks", budget, len(chunks))
		}
		if len(chunks) < total/max(budget, maxRow) {
			t.Errorf("budget %d: %d chunks for %d bytes", budget, len(chunks), total)
		}
	}
}

// TestMessagesRefuseBadBlocks: a block with negative rows, or rows but no
// Source, is an error, not messages.
func TestMessagesRefuseBadBlocks(t *testing.T) {
	table := flatLikeBlocks(1, 10)
	for _, c := range []struct {
		name string
		e    Element
		want string
	}{
		{"negative rows", Element{Set: "targets", Rows: -1, Source: testTargets{0}}, "block of targets: -1 rows"},
		{"no source", Element{Set: "targets", Rows: 3}, "block of targets: 3 rows without a source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ElementBatch{Table: table, Add: []Element{c.e}}.messages()
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}
