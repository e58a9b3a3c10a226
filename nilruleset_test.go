package svcproxy_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

// TestNilRulesetReadsEmpty drives the readers of a Ruleset with a nil one
// and real arguments (the sweep of TestAPINilSafe passes zero ones): it
// reads as empty, or is refused with an error, never a panic.
func TestNilRulesetReadsEmpty(t *testing.T) {
	var rs *ruleset.Ruleset
	p := trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.1.5:40000"), Dst: netip.MustParseAddrPort("198.19.0.10:80")}
	for _, opts := range []trace.Options{{}, trace.IPTablesMode, trace.NFTablesMode} {
		if out := trace.Trace(rs, p, opts); out.Verdict != ruleset.VerdictNotServed {
			t.Errorf("Trace on a nil Ruleset (%+v): %v", opts, out.Verdict)
		}
	}
	if _, _, err := nftables.Script(rs, nftables.Options{}); err == nil {
		t.Error("nftables.Script of a nil Ruleset: no error (it has no family)")
	}
	_ = iptables.Render(iptables.Names{}, rs) // no panic
	if got := topology.Categorize(nil, nil, topology.Node{Name: "n1"}); got.HasAnyEndpoints || got.Cluster != nil {
		t.Errorf("Categorize(nil ServicePort) = %+v", got)
	}
}
