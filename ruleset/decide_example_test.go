package ruleset_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// Decide gives the whole answer for a client: here for each Origin, whose
// representative Client ClientOf makes from the Config and the node's
// address (outside the pod network, so the node's flows are masqueraded as
// the outside's are, and a pod's are not).
func ExampleRuleset_Decide() {
	must := warnings.Must(warnings.Example)
	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(exampleService("shop", "198.19.0.20", 30080, v1.ServiceExternalTrafficPolicyLocal)))
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(eps.Update(exampleSlice("shop", "198.18.2.3", "node-b", "198.18.1.7", "node-a")))
	b, err := ruleset.NewBuilder(ruleset.Config{
		Family:       v1.IPv4Protocol,
		Node:         topology.Node{Name: "node-a"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/20")},
	})
	if err != nil {
		panic(err)
	}
	svcSnap, _ := services.Snapshot()
	epSnap, _ := eps.Snapshot()
	rs, ws := b.Build(svcSnap, epSnap)
	must.None(ws)
	nodeAddrs := []netip.Addr{netip.MustParseAddr("198.18.100.1")}
	for _, sf := range rs.ServedFrontends() {
		for _, origin := range ruleset.Origins {
			fmt.Printf("%s from %s: %s\n", sf.Frontend, origin, rs.Decide(sf.Service, sf.Kind, rs.ClientOf(origin, nodeAddrs)))
		}
	}
	// Output:
	// node port 30080/TCP from outside: forwarded 198.18.1.7:8080=1
	// node port 30080/TCP from pod: forwarded 198.18.1.7:8080=1/2 198.18.2.3:8080=1/2 short-circuited
	// node port 30080/TCP from node: forwarded 198.18.1.7:8080=1/2 198.18.2.3:8080=1/2 short-circuited masqueraded
	// 198.19.0.20:80/TCP from outside: forwarded 198.18.1.7:8080=1/2 198.18.2.3:8080=1/2 masqueraded
	// 198.19.0.20:80/TCP from pod: forwarded 198.18.1.7:8080=1/2 198.18.2.3:8080=1/2
	// 198.19.0.20:80/TCP from node: forwarded 198.18.1.7:8080=1/2 198.18.2.3:8080=1/2 masqueraded
}
