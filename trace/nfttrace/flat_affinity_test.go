package nfttrace_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// flatAffinityPackets reach every kind of outcome of the flat affinity
// demo table (see TestEvaluateFlatAffinity).
var flatAffinityPackets = []string{
	"tcp 198.18.9.1:40000 -> 198.19.0.10:80",            // sticky: listed entry
	"tcp 198.18.9.2:40000 -> 198.19.0.10:80",            // sticky: listed entry to a removed endpoint
	"tcp 198.18.9.3:40000 -> 198.19.200.1:80",           // external IP, Local: listed entry to a remote endpoint
	"tcp 198.18.64.9:40000 -> 198.19.200.1:80 from pod", // external IP from a pod: short-circuit
	"tcp 198.18.9.1:40000 -> 198.19.0.11:80",            // web: no affinity
}

// TestEvaluateFlatAffinity: ClientIP affinity in the flat layout
// (testdata/flat-affinity*.nft: sticky in namespace ns1, 600 s, cluster
// IP 198.19.0.10, node port 30080 and external IP 198.19.200.1 under
// externalTrafficPolicy Local, endpoints 198.18.64.2 on node-a and
// 198.18.65.2 on node-b; web without affinity). As rendered, the affinity
// map is empty: every client gets the numgen choice, and the update after
// DNAT reports the timeout. As listed after the kernel held three clients,
// the evaluator follows the listed entries: 198.18.9.1 goes to its
// endpoint; 198.18.9.2's endpoint (198.18.66.6) is no target, and
// 198.18.9.3's (198.18.65.2, for the external IP) is no target for an
// external source under the Local policy: both are dropped, their entries
// deleted.
func TestEvaluateFlatAffinity(t *testing.T) {
	sticky, web := flatPort("sticky", v1.ProtocolTCP), flatPort("web", v1.ProtocolTCP)
	tenMinutes, _ := affinity.ClientIP(600)
	both := func(masq bool) []ruleset.Choice {
		return []ruleset.Choice{choice("198.18.64.2:8080", 2, masq), choice("198.18.65.2:8080", 2, masq)}
	}
	outside := trace.Outcome{Verdict: ruleset.VerdictForward, Service: sticky, Kind: ruleset.KindClusterIP, Targets: both(true), Masquerade: true, Affinity: tenMinutes}
	packets := []struct {
		packet         string
		rendered, held trace.Outcome
	}{
		{flatAffinityPackets[0], outside,
			trace.Outcome{Verdict: ruleset.VerdictForward, Service: sticky, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.65.2:8080", 1, true)}, Masquerade: true, Affinity: tenMinutes}},
		{flatAffinityPackets[1], outside,
			trace.Outcome{Verdict: ruleset.VerdictDrop, Service: sticky, Kind: ruleset.KindClusterIP}},
		{flatAffinityPackets[2],
			trace.Outcome{Verdict: ruleset.VerdictForward, Service: sticky, Kind: ruleset.KindExternalIP, Targets: []ruleset.Choice{choice("198.18.64.2:8080", 1, false)}, Affinity: tenMinutes},
			trace.Outcome{Verdict: ruleset.VerdictDrop, Service: sticky, Kind: ruleset.KindExternalIP}},
		{flatAffinityPackets[3],
			trace.Outcome{Verdict: ruleset.VerdictForward, Service: sticky, Kind: ruleset.KindExternalIP, Targets: both(false), ShortCircuit: true, Affinity: tenMinutes}, trace.Outcome{}},
		{flatAffinityPackets[4],
			trace.Outcome{Verdict: ruleset.VerdictForward, Service: web, Kind: ruleset.KindClusterIP, Targets: []ruleset.Choice{choice("198.18.64.3:8080", 1, true)}, Masquerade: true}, trace.Outcome{}},
	}
	for _, name := range []string{"flat-affinity.nft", "flat-affinity-listed.nft", "flat-affinity-listed.json"} {
		tb := demoTable(t, name)
		for _, c := range packets {
			want := c.rendered
			if name != "flat-affinity.nft" && c.held.Verdict != 0 {
				want = c.held
			}
			got, path, err := tb.Evaluate(packet(t, c.packet))
			if err != nil {
				t.Fatalf("%s: %s: %v", name, c.packet, err)
			}
			if diff := diffOutcomes(want, got); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s\npath:\n%s", name, c.packet, diff, path)
			}
		}
	}
}
