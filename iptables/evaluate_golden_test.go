package iptables

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// TestEvaluateGoldens: every golden rendering, with the Executor's jumps,
// sends every packet of goldenPackets where the tracer says.
func TestEvaluateGoldens(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("testdata", sc.name+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			rs := sc.ruleset(t)
			c := evalCase{rs: rs, names: sc.names, packets: goldenPackets(rs)}
			seen := map[string]int{}
			if d := disagreement(c, withJumps(sc.names, golden), seen); d != "" {
				t.Fatal(d)
			}
			t.Logf("%d packets: %v", len(c.packets), seen)
		})
	}
}

// goldenPackets are, for each frontend of each Service of rs (cluster IP,
// external and load-balancer IPs with the port, node port and health-check
// node port on the node's address and the loopback), a new flow of the
// Service's protocol from a pod, from each endpoint (hairpin), from the node
// and from clients inside and outside the first source range.
func goldenPackets(rs *ruleset.Ruleset) []trace.Packet {
	a := addrsV4
	if rs.Config().Family == v1.IPv6Protocol {
		a = addrsV6
	}
	type dst struct {
		to     netip.AddrPort
		toNode bool
	}
	var ps []trace.Packet
	for _, s := range rs.Services() {
		dsts := []dst{{netip.AddrPortFrom(s.ClusterIP, s.Port), false}}
		for _, ip := range slices.Concat(s.ExternalIPs, s.LoadBalancerIPs) {
			dsts = append(dsts, dst{netip.AddrPortFrom(ip, s.Port), false}, dst{netip.AddrPortFrom(ip, s.Port), true})
		}
		nodeAddrs := slices.Concat([]netip.Addr{a.node, a.loopback}, rs.Config().NodePortAddresses)
		for _, port := range []uint16{s.NodePort, uint16(s.HealthCheckNodePort)} {
			for _, ip := range nodeAddrs {
				if port != 0 {
					dsts = append(dsts, dst{netip.AddrPortFrom(ip, port), true})
				}
			}
		}
		srcs := []netip.Addr{a.pods[3], a.outside[2]}
		for _, e := range s.Endpoints {
			srcs = append(srcs, e.AddrPort().Addr())
		}
		if len(s.LoadBalancerSourceRanges) > 0 {
			srcs = append(srcs, s.LoadBalancerSourceRanges[0].Addr().Next())
		}
		for _, d := range dsts {
			for _, src := range srcs {
				ps = append(ps, trace.Packet{Protocol: s.Name.Protocol, Src: netip.AddrPortFrom(src, 40000), Dst: d.to, ToNode: d.toNode})
			}
			nodeSrc := a.node
			if d.to.Addr().IsLoopback() {
				nodeSrc = a.loopback
			}
			ps = append(ps, trace.Packet{Protocol: s.Name.Protocol, Src: netip.AddrPortFrom(nodeSrc, 40000), Dst: d.to, ToNode: d.toNode, FromNode: true})
		}
	}
	return ps
}
