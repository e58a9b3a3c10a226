package nftables

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// TestNetlinkEncodesDeclarations: the typed chains, sets and elements of
// kube-proxy's layout encode as the nftnl messages of the same objects,
// and those outside what the netlink path knows are refused, not encoded
// as something else.
func TestNetlinkEncodesDeclarations(t *testing.T) {
	addr4, addr6 := model.Addr(netip.MustParseAddr("198.19.0.1")), model.Addr(netip.MustParseAddr("2001:db8:19::1"))
	svc := model.Goto("service-X-ns/svc/tcp/p80")
	elem := func(set string, v *model.Verdict, comment string, key ...model.Datum) *model.Element {
		return &model.Element{Set: set, Key: key, Verdict: v, Comment: comment}
	}
	affinity := func(key model.Type, timeout time.Duration) *model.Set {
		return &model.Set{Name: "affinity-x", KeyType: []model.Type{key}, Dynamic: true, Timeout: timeout}
	}
	for _, c := range []struct {
		name   string
		family knftables.Family
		op     op
		// want builds the expected batch; nil when the op is refused.
		want    func(b *nftnl.Batch)
		wantErr string
	}{
		{"map element with a goto and a comment", knftables.IPv4Family,
			elementOp(opAdd, elem(mapServiceIPs, &svc, "ns/svc:p", addr4, model.Proto(6), model.Port(80)), true),
			func(b *nftnl.Batch) {
				b.AddElements(mapServiceIPs, []nftnl.Element{{Key: []byte{198, 19, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0},
					Verdict: &nftnl.Verdict{Code: nftnl.VerdictGoto, Chain: svc.Chain}, Comment: "ns/svc:p"}})
			}, ""},
		{"node-port element with drop", knftables.IPv6Family,
			elementOp(opAdd, elem(mapNoEndpointNodePorts, &model.Drop, "", model.Proto(17), model.Port(30053)), true),
			func(b *nftnl.Batch) {
				b.AddElements(mapNoEndpointNodePorts, []nftnl.Element{{Key: []byte{17, 0, 0, 0, 0x75, 0x65, 0, 0},
					Verdict: &nftnl.Verdict{Code: nftnl.VerdictDrop}}})
			}, ""},
		{"set element", knftables.IPv6Family,
			elementOp(opAdd, elem(setClusterIPs, nil, "", addr6), false),
			func(b *nftnl.Batch) {
				b.AddElements(setClusterIPs, []nftnl.Element{{Key: netip.MustParseAddr("2001:db8:19::1").AsSlice()}})
			}, ""},
		{"element deleted by its key", knftables.IPv4Family,
			elementOp(opDelete, elem(mapServiceIPs, nil, "", addr4, model.Proto(132), model.Port(9)), true),
			func(b *nftnl.Batch) {
				b.DelElements(mapServiceIPs, [][]byte{{198, 19, 0, 1, 132, 0, 0, 0, 0, 9, 0, 0}})
			}, ""},
		{"affinity set", knftables.IPv6Family, setOp(opAdd, affinity(model.TypeIPv6Addr, 3*time.Hour), false),
			func(b *nftnl.Batch) {
				b.AddSet(nftnl.Set{Name: "affinity-x", Flags: nftnl.SetTimeout | nftnl.SetEval, KeyType: nftnl.TypeIPv6Addr,
					KeyLen: 16, TimeoutMS: 3 * 3600 * 1000, Userdata: udataKeyBigEndian})
			}, ""},
		{"map deleted", knftables.IPv4Family, setOp(opDelete, &model.Set{Name: "m"}, true),
			func(b *nftnl.Batch) { b.DelSet("m") }, ""},
		{"chain added, flushed", knftables.IPv4Family, chainOp(opFlush, chainRef("c")),
			func(b *nftnl.Batch) { b.FlushChain("c") }, ""},

		{"address of the other family", knftables.IPv4Family,
			elementOp(opAdd, elem(setClusterIPs, nil, "", addr6), false), nil, "address 2001:db8:19::1 in a table of family ip"},
		{"map element without a verdict", knftables.IPv4Family,
			elementOp(opAdd, elem(mapServiceIPs, nil, "", addr4, model.Proto(6), model.Port(80)), true), nil, "value other than a verdict"},
		{"set element with a verdict", knftables.IPv4Family,
			elementOp(opAdd, elem(setClusterIPs, &model.Drop, "", addr4), false), nil, "value other than a verdict"},
		{"affinity set of the other family", knftables.IPv4Family, setOp(opAdd, affinity(model.TypeIPv6Addr, time.Hour), false), nil, "other than an affinity set"},
		{"set without a timeout", knftables.IPv4Family, setOp(opAdd, affinity(model.TypeIPv4Addr, 0), false), nil, "other than an affinity set"},
		{"timeout under a millisecond", knftables.IPv4Family, setOp(opAdd, affinity(model.TypeIPv4Addr, time.Microsecond), false), nil, "other than an affinity set"},
		{"set flushed", knftables.IPv4Family, setOp(opFlush, &model.Set{Name: "s"}, false), nil, "flush of set s"},
		{"map added", knftables.IPv4Family, setOp(opAdd, &model.Set{Name: "m", KeyType: []model.Type{model.TypeInetProto}, ValueType: []model.Type{model.TypeVerdict}}, true), nil, "map m other than a delete"},
		{"base chain", knftables.IPv4Family, chainOp(opAdd, &baseChains[0]), nil, "base chain"},
		{"table", knftables.IPv4Family, op{verb: opAdd, kind: kindTable, table: &model.Table{Name: "t"}}, nil, "operation on the table"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := netlinkBatch(c.family, "t", []op{c.op}, "")
			if c.want == nil {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := nftnl.NewBatch(newEncoder(c.family).family, "t")
			c.want(want)
			if diff := cmp.Diff(want, got, cmp.Exporter(func(reflect.Type) bool { return true })); diff != "" {
				t.Errorf("batch (-want +got):\n%s", diff)
			}
		})
	}
}
