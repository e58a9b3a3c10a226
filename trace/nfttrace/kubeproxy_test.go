package nfttrace_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/trace"
)

// TestEvaluateKubeProxy137: a table as kube-proxy v1.37.2's nftables mode
// wrote it (listed with `nft list table ip6 kube-proxy`, by
// e2e/differential) is evaluated as the kernel would run it: a Service
// port's endpoints in an anonymous map keyed by `numgen random mod N` (and
// a single one as `dnat to [ADDR]:PORT`), and hairpin masquerade only for
// the connections in @hairpin-connections (local endpoints to themselves).
func TestEvaluateKubeProxy137(t *testing.T) {
	tb := demoTable(t, "kube-proxy-1.37-ip6.nft")
	port := func(name, p string, proto v1.Protocol) servicemap.PortName {
		return servicemap.PortName{Namespace: "diff", Name: name, Port: p, Protocol: proto}
	}
	p1, p2, p0 := port("d4-s3", "p1", v1.ProtocolTCP), port("d4-s3", "p2", v1.ProtocolUDP), port("d4-s3", "p0", v1.ProtocolTCP)
	for _, tc := range []struct {
		packet string
		want   trace.Outcome
	}{
		{"tcp [2001:db8:18:64::2]:40000 -> [2001:db8:19::baba]:8080 from pod", trace.Outcome{Verdict: ruleset.VerdictForward, Service: p1, Kind: ruleset.KindClusterIP,
			Targets: []ruleset.Choice{choice("[2001:db8:18:41::2]:8001", 2, false), choice("[2001:db8:18:49::2]:8001", 2, false)}}},
		// Hairpin of a local endpoint: in @hairpin-connections.
		{"tcp [2001:db8:18:49::2]:40000 -> [2001:db8:19::baba]:8080 from pod", trace.Outcome{Verdict: ruleset.VerdictForward, Service: p1, Kind: ruleset.KindClusterIP,
			Targets: []ruleset.Choice{choice("[2001:db8:18:41::2]:8001", 2, false), choice("[2001:db8:18:49::2]:8001", 2, true)}}},
		// Hairpin of an endpoint elsewhere: not in the set, not masqueraded.
		{"tcp [2001:db8:18:41::2]:40000 -> [2001:db8:19::baba]:8080 from pod", trace.Outcome{Verdict: ruleset.VerdictForward, Service: p1, Kind: ruleset.KindClusterIP,
			Targets: []ruleset.Choice{choice("[2001:db8:18:41::2]:8001", 2, false), choice("[2001:db8:18:49::2]:8001", 2, false)}}},
		{"udp [2001:db8:18:64::2]:40000 -> [2001:db8:19::baba]:80 from pod", trace.Outcome{Verdict: ruleset.VerdictForward, Service: p2, Kind: ruleset.KindClusterIP,
			Targets: []ruleset.Choice{choice("[2001:db8:18:49::2]:8002", 1, false)}}},
		{"tcp [2001:db8:18:20::2]:40000 -> [2001:db8:19:100::2]:80", trace.Outcome{Verdict: ruleset.VerdictForward, Service: p0, Kind: ruleset.KindExternalIP,
			Targets: []ruleset.Choice{choice("[2001:db8:18:49::2]:8000", 1, true)}, Masquerade: true}},
		{"udp [2001:db8:18:64::2]:40000 -> [2001:db8:19::fc95]:8080 from pod", trace.Outcome{Verdict: ruleset.VerdictReject,
			Service: port("d4-s0", "", v1.ProtocolUDP), Kind: ruleset.KindClusterIP}},
		{"tcp [2001:db8:18:64::2]:40000 -> [2001:db8:19::baba]:9999 from pod", trace.Outcome{Verdict: ruleset.VerdictReject}},
		{"tcp [2001:db8:18:64::2]:40000 -> [2001:db8:19::1234]:80 from pod", trace.Outcome{Verdict: ruleset.VerdictDrop}},
	} {
		got, path, err := tb.Evaluate(packet(t, tc.packet))
		if err != nil {
			t.Fatalf("%s: %v", tc.packet, err)
		}
		if diff := diffOutcomes(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s\npath:\n%s", tc.packet, diff, path)
		}
	}
}
