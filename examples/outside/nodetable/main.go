// Command nodetable MANIFESTS NODE prints the node's frontends, and targets with shares.
package main

import (
	"cmp"
	"fmt"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"net/netip"
	"os"
	"slices"
)

func main() {
	objs, warnings, err := manifests.Load(os.Args[min(1, len(os.Args)-1)])
	if err != nil || len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: nodetable MANIFESTS NODE; error:", err)
		os.Exit(2)
	}
	nodes := slices.DeleteFunc(objs.Nodes, func(n *v1.Node) bool { return n.Name != os.Args[2] })
	node := topology.NodeFromObject(append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: os.Args[2]}})[0]) // without zone if absent
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		outside := map[v1.IPFamily]netip.Addr{v1.IPv4Protocol: netip.IPv4Unspecified(), v1.IPv6Protocol: netip.IPv6Unspecified()}[family]
		services, eps := servicemap.NewTracker(family, servicemap.Filter{}), endpoints.NewTracker(family, servicemap.Filter{})
		for _, svc := range objs.Services {
			_, w := services.Update(svc)
			warnings = append(warnings, w...)
		}
		for _, es := range objs.EndpointSlices {
			_, w := eps.Update(es)
			warnings = append(warnings, w...)
		}
		builder, _ := ruleset.NewBuilder(ruleset.Config{Family: family, Node: node}) // a valid Config
		svcSnap, _ := services.Snapshot()
		epSnap, _ := eps.Snapshot()
		rs, _ := builder.Build(svcSnap, epSnap) // warns only about externalIPs that Config restricts
		for _, s := range rs.Services() {
			for _, f := range slices.DeleteFunc(s.Frontends(), func(f ruleset.Frontend) bool { return f.Port == 0 }) {
				dst := netip.AddrPortFrom(cmp.Or(f.Addr, outside), f.Port) // a node port: on any node address
				o := trace.Trace(rs, trace.Packet{Protocol: f.Protocol, Src: netip.AddrPortFrom(outside, 0), Dst: dst, ToNode: !f.Addr.IsValid()}, trace.Options{})
				fmt.Printf("%-22s %-18s %s", f, o.Service, o.Result)
				for _, c := range o.Targets {
					fmt.Printf(" %s=%s", c.Endpoint, c.Share.RatString())
				}
				fmt.Println()
			}
		}
	}
	for i, w := range warnings {
		if !slices.Contains(warnings[:i], w) { // once, not once per family
			fmt.Fprintln(os.Stderr, "warning:", w)
		}
	}
}
