package trace_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

// Where does a pod's connection to a Service go on node-a, and one from the
// node itself?
func ExampleTrace() {
	must := warnings.Must(warnings.Example)
	objs, _, err := manifests.Parse([]byte(`
apiVersion: v1
kind: Service
metadata: {namespace: demo, name: web}
spec:
  clusterIP: 198.19.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: demo, name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- {addresses: [198.18.64.2], nodeName: node-a}
- {addresses: [198.18.65.2], nodeName: node-b}
ports: [{name: http, port: 8080}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	svcs := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for _, s := range objs.Services {
		must.Used(svcs.Update(s))
	}
	for _, es := range objs.EndpointSlices {
		must.Used(eps.Update(es))
	}
	b, _ := ruleset.NewBuilder(ruleset.Config{
		Family:       v1.IPv4Protocol,
		Node:         topology.Node{Name: "node-a"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")},
	})
	ss, _ := svcs.Snapshot()
	es, _ := eps.Snapshot()
	rs, ws := b.Build(ss, es)
	must.None(ws)

	for _, p := range []trace.Packet{
		{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.64.7:40000"), Dst: netip.MustParseAddrPort("198.19.0.10:80")},
		{Protocol: v1.ProtocolTCP, Src: netip.MustParseAddrPort("198.18.0.1:40000"), Dst: netip.MustParseAddrPort("198.19.0.10:80"), FromNode: true},
	} {
		o := trace.Trace(rs, p, trace.Options{})
		fmt.Printf("%v: %s by %s %s\n", p, o.Verdict, o.Service, o.Kind)
		for _, c := range o.Targets {
			fmt.Printf("  %v share %s masquerade %v\n", c.Endpoint, c.Share.RatString(), c.Masquerade)
		}
	}
	// Output:
	// tcp 198.18.64.7:40000 -> 198.19.0.10:80 arriving: forwarded by demo/web:http cluster IP
	//   198.18.64.2:8080 share 1/2 masquerade false
	//   198.18.65.2:8080 share 1/2 masquerade false
	// tcp 198.18.0.1:40000 -> 198.19.0.10:80 from the node: forwarded by demo/web:http cluster IP
	//   198.18.64.2:8080 share 1/2 masquerade true
	//   198.18.65.2:8080 share 1/2 masquerade true
}
