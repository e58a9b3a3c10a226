package model

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// TestDeclarationsAsKnftablesWritesThem: sets declared by type names, with
// dynamic and timeout flags, and verdict-map elements, are written by Script
// as knftables writes the objects SetObject and ElementObject make of them;
// the names that flushes and deletes take name sets, maps, chains and
// elements alone.
func TestDeclarationsAsKnftablesWritesThem(t *testing.T) {
	a := func(s string) Datum { return Addr(netip.MustParseAddr(s)) }
	svc := Goto("service-X-ns/svc/tcp/p80")
	tbl := &Table{
		Family: IPv6, Name: "kube-proxy", Comment: "rules",
		Sets: []*Set{
			{Name: "cluster-ips", KeyType: []Type{TypeIPv6Addr}, Comment: "Active ClusterIPs"},
			{Name: "service-ips", KeyType: []Type{TypeIPv6Addr, TypeInetProto, TypeInetService}, ValueType: []Type{TypeVerdict}, Comment: "ClusterIP traffic"},
			{Name: "service-nodeports", KeyType: []Type{TypeInetProto, TypeInetService}, ValueType: []Type{TypeVerdict}},
			{Name: "affinity-x", KeyType: []Type{TypeIPv6Addr}, Dynamic: true, Timeout: 3 * time.Hour},
		},
		Elements: []Element{
			{Set: "cluster-ips", Key: []Datum{a("2001:db8:19::1")}},
			{Set: "service-ips", Key: []Datum{a("2001:db8:19::1"), Proto(6), Port(80)}, Verdict: &svc},
			{Set: "service-nodeports", Key: []Datum{Proto(132), Port(30080)}, Verdict: &Drop, Comment: "ns/svc:p"},
		},
	}
	want := []string{
		`add table ip6 kube-proxy { comment "rules" ; }`,
		`add set ip6 kube-proxy cluster-ips { type ipv6_addr ; comment "Active ClusterIPs" ; }`,
		`add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ; comment "ClusterIP traffic" ; }`,
		`add map ip6 kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; }`,
		`add set ip6 kube-proxy affinity-x { type ipv6_addr ; flags dynamic,timeout ; timeout 10800s ; }`,
		`add element ip6 kube-proxy cluster-ips { 2001:db8:19::1 }`,
		`add element ip6 kube-proxy service-ips { 2001:db8:19::1 . tcp . 80 : goto service-X-ns/svc/tcp/p80 }`,
		`add element ip6 kube-proxy service-nodeports { sctp . 30080 comment "ns/svc:p" : drop }`,
	}
	tx := knftables.NewFake(knftables.IPv6Family, "kube-proxy").NewTransaction()
	for _, o := range tbl.Objects() {
		tx.Add(o)
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(tx.String()), "\n")); diff != "" {
		t.Errorf("knftables objects (-want +got):\n%s", diff)
	}
	script := strings.Split(strings.TrimSpace(tbl.Script()), "\n")
	wantScript := append([]string{"add table ip6 kube-proxy", "delete table ip6 kube-proxy"}, want[:5]...)
	wantScript = append(wantScript,
		`add element ip6 kube-proxy cluster-ips { 2001:db8:19::1 }`,
		`add element ip6 kube-proxy service-ips { 2001:db8:19::1 . tcp . 80 : goto service-X-ns/svc/tcp/p80 }`,
		`add element ip6 kube-proxy service-nodeports { sctp . 30080 comment "ns/svc:p" : drop }`)
	if diff := cmp.Diff(wantScript, script); diff != "" {
		t.Errorf("script (-want +got):\n%s", diff)
	}

	tx = knftables.NewFake(knftables.IPv6Family, "kube-proxy").NewTransaction()
	tx.Flush(tbl.SetName("service-ips", true))
	tx.Delete(tbl.SetName("affinity-x", false))
	tx.Flush(tbl.ChainName("services"))
	tx.Delete(tbl.ElementKey(tbl.Elements[1], true))
	tx.Delete(tbl.ElementKey(tbl.Elements[0], false))
	wantNames := []string{
		`flush map ip6 kube-proxy service-ips`,
		`delete set ip6 kube-proxy affinity-x`,
		`flush chain ip6 kube-proxy services`,
		`delete element ip6 kube-proxy service-ips { 2001:db8:19::1 . tcp . 80 }`,
		`delete element ip6 kube-proxy cluster-ips { 2001:db8:19::1 }`,
	}
	if diff := cmp.Diff(wantNames, strings.Split(strings.TrimSpace(tx.String()), "\n")); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if k := tbl.ElementKey(tbl.Elements[1], true); k.Map != "service-ips" || k.Set != "" || k.Value != nil {
		t.Errorf("ElementKey of a map element: %+v", k)
	}
}

// TestKeyBytes: keys encode as their fields' netlink encodings, each padded
// to 4 bytes, in order.
func TestKeyBytes(t *testing.T) {
	got := KeyBytes([]Datum{Addr(netip.MustParseAddr("198.19.0.1")), Proto(17), Port(53)})
	want := []byte{198, 19, 0, 1, 17, 0, 0, 0, 0, 53, 0, 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("key (-want +got):\n%s", diff)
	}
}

// TestConnRefusesVerdicts: Conn does not encode verdict-map elements; it
// refuses them before it sends anything.
func TestConnRefusesVerdicts(t *testing.T) {
	tbl := &Table{Family: IPv4, Name: "t", Sets: []*Set{
		{Name: "m", KeyType: []Type{TypeInetProto, TypeInetService}, ValueType: []Type{TypeVerdict}},
	}}
	err := (&Conn{}).Send(ElementBatch{Table: tbl, Add: []Element{{Set: "m", Key: []Datum{Proto(6), Port(80)}, Verdict: &Drop}}})
	if err == nil || !strings.Contains(err.Error(), "verdicts are not encoded") {
		t.Errorf("Send of a verdict element: %v", err)
	}
}
