package model

import (
	"bytes"
	"net/netip"
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
		{DNATMaps{Family: IPv6, AddrKey: []Expr{JHash{Key: []Expr{IP6Saddr, IP6Daddr, THDport}, Seed: 0x5eed}}, AddrMap: "affinity-tcp", PortKey: []Expr{THDport}, PortMap: "ports"},
			"dnat ip6 to jhash ip6 saddr . ip6 daddr . th dport mod 4294967295 seed 0x5eed map @affinity-tcp : th dport map @ports"},
		{UpdateMap{Map: "affinity-udp", Key: []Expr{JHash{Key: []Expr{IP6Saddr, CtOrigIP6Daddr, CtOrigProtoDst}, Seed: 1}}, Timeout: 60, Value: []Expr{IP6Daddr}},
			"update @affinity-udp { jhash ip6 saddr . ct original ip6 daddr . ct original proto-dst mod 4294967295 seed 0x1 timeout 60s : ip6 daddr }"},
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
		Name: "affinity-tcp", Key: []Expr{IPSaddr, IPDaddr, L4Proto, THDport}, Value: []Expr{IPDaddr, TCPDport}, Dynamic: true, Expiring: true, Size: 1 << 20,
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

// TestEncodeOneField: a key or value of one field has the field's own
// length; in a concatenation each field takes 4 bytes (16 for IPv6).
func TestEncodeOneField(t *testing.T) {
	for _, c := range []struct {
		name string
		ds   []Datum
		want []byte
	}{
		{"port", []Datum{Port(8080)}, []byte{0x1f, 0x90}},
		{"protocol", []Datum{Proto(6)}, []byte{6}},
		{"IPv4 address", []Datum{Addr(netip.MustParseAddr("198.18.0.1"))}, []byte{198, 18, 0, 1}},
		{"protocol . port", []Datum{Proto(6), Port(8080)}, []byte{6, 0, 0, 0, 0x1f, 0x90, 0, 0}},
	} {
		if got := KeyBytes(c.ds); !bytes.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
