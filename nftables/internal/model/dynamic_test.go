package model

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// TestDynamicStatementText: the affinity statements print as nft reads
// them (and as nft 1.0.6 lists them, but for its durations).
func TestDynamicStatementText(t *testing.T) {
	client := []Expr{IPSaddr, CtOrigIPDaddr, L4Proto, CtOrigProtoDst}
	for _, c := range []struct {
		s    Stmt
		want string
	}{
		{UpdateMap{Map: "affinity-tcp", Key: client, Timeout: 10800, Value: []Expr{IPDaddr, TCPDport}},
			"update @affinity-tcp { ip saddr . ct original ip daddr . meta l4proto . ct original proto-dst timeout 10800s : ip daddr . tcp dport }"},
		{DeleteMap{Map: "affinity-udp", Key: client, Value: []Expr{IPDaddr, UDPDport}},
			"delete @affinity-udp { ip saddr . ct original ip daddr . meta l4proto . ct original proto-dst : ip daddr . udp dport }"},
		{InSet{Key: []Expr{CtOrigIP6Daddr, L4Proto, CtOrigProtoDst}, Set: "affinity-60s"},
			"ct original ip6 daddr . meta l4proto . ct original proto-dst @affinity-60s"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("%#v prints %q, want %q", c.s, got, c.want)
		}
	}
}

// TestDynamicMapDeclaration: a dynamic map is declared with the flags
// dynamic and timeout and its size, in a script and as a knftables object,
// and holds no elements of the table's.
func TestDynamicMapDeclaration(t *testing.T) {
	tb := &Table{Family: IPv4, Name: "t", Sets: []*Set{{
		Name: "affinity-tcp", Key: []Expr{IPSaddr, IPDaddr, L4Proto, THDport}, Value: []Expr{IPDaddr, TCPDport}, Dynamic: true, Size: 1 << 20,
	}}}
	want := "add map ip t affinity-tcp { typeof ip saddr . ip daddr . meta l4proto . th dport : ip daddr . tcp dport ; flags dynamic,timeout ; size 1048576 ; }"
	if got := scriptLine(tb.Script(), "add map "); got != want {
		t.Errorf("script declares %q, want %q", got, want)
	}
	m, ok := tb.SetObject(tb.Sets[0]).(*knftables.Map)
	if !ok {
		t.Fatalf("SetObject of a dynamic map is %T", tb.SetObject(tb.Sets[0]))
	}
	if diff := cmp.Diff([]knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, m.Flags); diff != "" {
		t.Errorf("knftables flags (-want +got):\n%s", diff)
	}
	if m.Size == nil || *m.Size != 1<<20 {
		t.Errorf("knftables size %v, want 1048576", m.Size)
	}
	if len(tb.NetlinkElements()) != 0 || strings.Contains(tb.Definitions(), "add element") {
		t.Errorf("a table without elements writes some:\n%s", tb.Definitions())
	}
}

func scriptLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
