package healthcheck_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/healthcheck"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// A LoadBalancer Service with externalTrafficPolicy Local and no endpoint
// on this node: its health check node port answers 503, so that load
// balancers send its traffic to other nodes. After each sync a proxy gives
// Update the Rulesets it synced.
func ExampleNodePortServers() {
	must := warnings.Must(warnings.Example)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port, for the example
	if err != nil {
		panic(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: int32(port),
			Ports: []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}},
		},
	}))
	builder, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	if err != nil {
		panic(err)
	}
	svcs, _ := services.Snapshot()
	eps, _ := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{}).Snapshot()
	rs, ws := builder.Build(svcs, eps)
	must.None(ws)

	// A proxy passes its health (engine.Engine.Health().Healthy): while
	// it is false, every port answers 503. nil: always healthy.
	servers := healthcheck.NewNodePortServers(false, nil)
	defer servers.Close()
	report := servers.Update(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs}, []netip.Addr{netip.MustParseAddr("127.0.0.1")})
	fmt.Println("not served:", report.Warnings, report.Errors)

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output:
	// not served: [] []
	// 503 {"localEndpoints":0,"service":{"name":"web","namespace":"shop"},"serviceProxyHealthy":true}
}
