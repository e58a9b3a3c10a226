package ruleset_test

import (
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// A data plane that picks targets itself (a user-space proxy, say) draws x
// uniformly from [0, 1) for each new flow; Pick then spreads the flows by
// the targets' exact shares.
func ExamplePick() {
	must := warnings.Must(warnings.Example)
	b, _ := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	services, eps := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{}), endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(exampleService("web", "198.19.0.10", 0, "")))
	must.Used(eps.Update(exampleSlice("web", "198.18.1.1", "node-a", "198.18.2.1", "node-b", "198.18.3.1", "node-c")))
	svcSnap, _ := services.Snapshot()
	epSnap, _ := eps.Snapshot()
	rs, ws := b.Build(svcSnap, epSnap)
	must.None(ws)
	web, _ := rs.Service(servicemap.PortName{Namespace: "demo", Name: "web", Port: "http", Protocol: v1.ProtocolTCP})
	d := rs.Decide(web, ruleset.KindClusterIP, ruleset.Client{})
	for _, x := range []float64{0.1, 0.5, 0.9} {
		fmt.Printf("x=%.1f: %s\n", x, ruleset.Pick(d.Targets, x).Endpoint)
	}
	// Output:
	// x=0.1: 198.18.1.1:8080
	// x=0.5: 198.18.2.1:8080
	// x=0.9: 198.18.3.1:8080
}

// The frontends a node serves, each with the Service port that owns it: what
// a data plane outside netfilter (a user-space proxy, an eBPF map) listens
// on or fills its table with. The node port is served on the addresses
// Config.NodePortAddresses gives.
func ExampleRuleset_ServedFrontends() {
	must := warnings.Must(warnings.Example)
	b, _ := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	services, eps := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{}), endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(exampleService("web", "198.19.0.10", 30080, "")))
	must.Used(services.Update(exampleService("db", "198.19.0.11", 0, "")))
	must.Used(eps.Update(exampleSlice("web", "198.18.1.1", "node-a")))
	svcSnap, _ := services.Snapshot()
	epSnap, _ := eps.Snapshot()
	rs, ws := b.Build(svcSnap, epSnap)
	must.None(ws)
	for _, sf := range rs.ServedFrontends() {
		fmt.Printf("%s: the %s of %s, %s\n", sf.Frontend, sf.Kind, sf.Service.Name, rs.Decide(sf.Service, sf.Kind, ruleset.Client{}).Verdict)
	}
	// Output:
	// node port 30080/TCP: the node port of demo/web:http, forwarded
	// 198.19.0.10:80/TCP: the cluster IP of demo/web:http, forwarded
	// 198.19.0.11:80/TCP: the cluster IP of demo/db:http, rejected
}

// A data plane that picks targets itself chooses the target of each new flow
// with Choose, which applies the firewall, the origin of the flow and the
// Service's ClientIP affinity; the caller passes the time and draws x.
func ExampleRuleset_Choose() {
	must := warnings.Must(warnings.Example)
	b, _ := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	services, eps := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{}), endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	svc := exampleService("web", "198.19.0.10", 0, "")
	svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	must.Used(services.Update(svc))
	must.Used(eps.Update(exampleSlice("web", "198.18.1.1", "node-a", "198.18.2.1", "node-b")))
	svcSnap, _ := services.Snapshot()
	epSnap, _ := eps.Snapshot()
	rs, ws := b.Build(svcSnap, epSnap)
	must.None(ws)
	web, _ := rs.Service(servicemap.PortName{Namespace: "demo", Name: "web", Port: "http", Protocol: v1.ProtocolTCP})
	var sticky affinity.Table[servicemap.PortName]
	client, now := ruleset.Client{Addr: netip.MustParseAddr("198.18.32.1")}, time.Unix(0, 0)
	for _, x := range []float64{0.9, 0.1} {
		fmt.Printf("x=%.1f: %s\n", x, rs.Choose(&sticky, web, ruleset.KindClusterIP, client, now, x))
	}
	// Output:
	// x=0.9: 198.18.2.1:8080
	// x=0.1: 198.18.2.1:8080
}
