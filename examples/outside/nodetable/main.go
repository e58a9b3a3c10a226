// Command nodetable MANIFESTS NODE [CLUSTER-CIDR...] prints what happens to a new flow from
// outside, a pod and the node to each frontend the node serves: verdict, targets, shares.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"

	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
	v1 "k8s.io/api/core/v1"
)

func main() {
	flag.Parse()
	var base ruleset.Config
	for _, arg := range flag.Args()[min(2, flag.NArg()):] {
		base.ClusterCIDRs = append(base.ClusterCIDRs, must(netip.ParsePrefix(arg)))
	}
	objs, warnings, err := manifests.Load(flag.Arg(0))
	must(0, err)
	st := must(state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, flag.Arg(1), servicemap.Filter{}))
	builder := must(state.NewBuilder(must(state.ConfigFrom(base))))
	warnings = append(warnings, st.Replace(*objs)...)
	built := must(builder.Build(st.Snapshot()))
	for _, fam := range st.Families() {
		rs := built.Rulesets[fam]
		for _, sf := range rs.ServedFrontends() {
			for _, origin := range ruleset.Origins {
				d := rs.Decide(sf.Service, sf.Kind, rs.ClientOf(origin, nil))
				fmt.Printf("%-21s %-15s %-7s %s\n", sf.Frontend, sf.Service.Name, origin, d)
			}
		}
	}
	for _, w := range append(warnings, built.Warnings...) {
		fmt.Fprintln(os.Stderr, "warning:", w)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodetable:", err)
		os.Exit(2)
	}
	return v
}
