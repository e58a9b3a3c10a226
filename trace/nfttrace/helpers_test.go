package nfttrace_test

import (
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// demoTable parses a file of testdata.
func demoTable(t *testing.T, name string) *nfttrace.Table {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := nfttrace.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// demoNode is node-a's address in the demo; its node ports are served
// there.
var demoNode = netip.MustParseAddr("198.18.0.1")

// demoPackets reach every kind of outcome of the demo table.
var demoPackets = []string{
	"tcp 198.18.64.5:40000 -> 198.19.0.10:80 from pod",     // web: two endpoints
	"tcp 198.18.0.1:40000 -> 198.19.0.10:80 from node",     // web from the node (not masqueraded: no cluster CIDRs)
	"tcp 198.18.9.1:40000 -> 198.19.100.1:443",             // api's LB IP, outside the source range
	"tcp 198.18.200.1:40000 -> 198.19.100.1:443",           // api's LB IP, inside: Local, no local endpoint
	"tcp 198.18.0.1:40000 -> 198.19.100.1:443 from node",   // from the node: firewalled
	"tcp 198.18.64.5:40000 -> 198.19.0.40:80 from pod",     // empty: rejected
	"tcp 198.18.64.5:40000 -> 198.19.0.30:80 from pod",     // cart: affinity
	"tcp 198.18.9.1:40000 -> 198.18.0.1:30080",             // shop's node port: Local
	"tcp 198.18.0.1:40000 -> 198.18.0.1:30080 from node",   // shop's node port from the node: short-circuit
	"tcp 198.18.9.1:40000 -> 198.18.0.1:30443",             // api's node port: dropped
	"tcp 198.18.9.1:40000 -> 198.19.0.10:81",               // an unknown port of a cluster IP
	"udp 198.18.2.42:40000 -> 198.19.0.53:53 from pod",     // dns: internal Local
	"udp 198.18.1.21:40000 -> 198.19.0.53:53 from pod",     // dns: hairpin
	"tcp 198.18.64.5:40000 -> 198.18.77.7:80 from pod",     // not a Service
	"tcp [2001:db8::1]:40000 -> [2001:db8::2]:80 from pod", // another family
}

// packet parses s; the node's own address is demoNode.
func packet(t *testing.T, s string) trace.Packet {
	t.Helper()
	p, err := tracePacket(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tracePacket(s string) (trace.Packet, error) {
	p, err := trace.ParsePacket(s)
	p.ToNode = p.Dst.Addr() == demoNode
	return p, err
}

func diffOutcomes(want, got trace.Outcome) string {
	return cmp.Diff(want, got,
		cmp.Comparer(func(a, b *big.Rat) bool { return a.Cmp(b) == 0 }),
		cmp.Comparer(func(a, b affinity.Policy) bool { return a == b }),
		cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{}),
		cmpopts.EquateEmpty())
}
