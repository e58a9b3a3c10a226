// Command nodetable MANIFESTS NODE prints the node's frontends, and targets with shares.
package main

import (
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
	"github.com/svcproxy/svcproxy/trace"
	v1 "k8s.io/api/core/v1"
)

func main() {
	objs, warnings, err := manifests.Load(os.Args[min(1, len(os.Args)-1)])
	if err != nil || len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: nodetable MANIFESTS NODE; error:", err)
		os.Exit(2)
	}
	st, _ := state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, os.Args[2], servicemap.Filter{}) // valid arguments
	warnings = append(warnings, st.Replace(state.Objects{Services: objs.Services, EndpointSlices: objs.EndpointSlices, Nodes: objs.Nodes})...)
	snap := st.Snapshot()
	for _, fam := range snap.Families() {
		outside := map[v1.IPFamily]netip.Addr{v1.IPv4Protocol: netip.IPv4Unspecified(), v1.IPv6Protocol: netip.IPv6Unspecified()}[fam.IPFamily]
		builder, _ := ruleset.NewBuilder(ruleset.Config{Family: fam.IPFamily, Node: snap.Node}) // a valid Config
		rs, _ := builder.Build(fam.Services, fam.Endpoints)                                     // warns only about externalIPs that Config restricts
		for _, s := range rs.Services() {
			for _, f := range slices.DeleteFunc(s.Frontends(), func(f ruleset.Frontend) bool { return f.Port == 0 }) {
				dst := netip.AddrPortFrom(cmp.Or(f.Addr, outside), f.Port) // a node port: on any node address
				o := trace.Trace(rs, trace.Packet{Protocol: f.Protocol, Src: netip.AddrPortFrom(outside, 0), Dst: dst, ToNode: !f.Addr.IsValid()}, trace.Options{})
				fmt.Printf("%-22s %-18s %s", f, o.Service, o.Verdict)
				for _, c := range o.Targets {
					fmt.Printf(" %s=%s", c.Endpoint, c.Share.RatString())
				}
				fmt.Println()
			}
		}
	}
	for _, w := range warnings { // each once, not once per family
		fmt.Fprintln(os.Stderr, "warning:", w)
	}
}
