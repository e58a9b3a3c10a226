package iptables

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// BenchmarkEvaluate parses the rendering of n ClusterIP Services with 10
// endpoints each (with the Executor's jumps), and evaluates a pod's flow to
// the last Service's cluster IP, the longest walk of KUBE-SERVICES.
func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		rs := build(b, testConfig(), scaleObjects(n)...)
		text := withJumps(Names{}, Render(Names{}, rs))
		last := rs.Services()[n-1]
		p := trace.Packet{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.64.100:40000"), Dst: netip.AddrPortFrom(last.ClusterIP, last.Port)}
		b.Run(fmt.Sprintf("parse/%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := iptrace.Parse(text); err != nil {
					b.Fatal(err)
				}
			}
		})
		rules, err := iptrace.Parse(text)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("evaluate/%d", n), func(b *testing.B) {
			for b.Loop() {
				o, _, err := rules.Evaluate(p)
				if err != nil || o.Verdict != ruleset.VerdictForward || len(o.Targets) != 10 {
					b.Fatalf("%+v, %v", o, err)
				}
			}
		})
	}
}
