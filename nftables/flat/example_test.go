package flat_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// exampleRuleset builds the Ruleset of one Service, default/web
// (198.19.0.10:80), with the given pod IPs as endpoints on port 8080.
func exampleRuleset(pods ...string) *ruleset.Ruleset {
	must := warnings.Must(warnings.Example)
	svcs := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(svcs.Update(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}))
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	port, name := int32(8080), "http"
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port}},
	}
	for _, ip := range pods {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{ip}})
	}
	must.Used(eps.Update(es))
	b, err := ruleset.NewBuilder(ruleset.Config{
		Family:       v1.IPv4Protocol,
		Node:         topology.Node{Name: "node-a"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")},
	})
	if err != nil {
		panic(err)
	}
	s, _ := svcs.Snapshot()
	e, _ := eps.Snapshot()
	rs, ws := b.Build(s, e)
	must.None(ws)
	return rs
}

// grep prints the lines of s that contain sub.
func grep(s, sub string) {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			fmt.Println(line)
		}
	}
}

// Script renders the whole table as one nft script: the Service port's
// frontend is an element of the set of its target group, endpoint count
// and protocol, and its endpoints are elements of that set's map.
func ExampleScript() {
	_, script, res := flat.Script(exampleRuleset("198.18.64.2", "198.18.65.2"), flat.Options{})
	warnings.None(warnings.Example, res.Warnings)
	grep(script, "default/web")
	// Output:
	// add element ip svcproxy-flat cluster-ips { 198.19.0.10 comment "default/web:http/TCP" }
	// add element ip svcproxy-flat cluster-2-tcp { 198.19.0.10 . tcp . 80 comment "default/web:http/TCP" }
	// add element ip svcproxy-flat cluster-2-tcp-targets { 198.19.0.10 . tcp . 80 . 0 comment "default/web:http/TCP" : 198.18.64.2 . 8080, 198.19.0.10 . tcp . 80 . 1 comment "default/web:http/TCP" : 198.18.65.2 . 8080 }
}

// An Executor syncs the table; here into knftables' Fake, so without root.
// The first sync is a full one; the others change only what the Ruleset
// changed, each in one transaction.
func ExampleExecutor() {
	ex, err := flat.NewExecutor(flat.ExecutorConfig{
		Family: v1.IPv4Protocol,
		NewInterface: func(family knftables.Family, table string) (knftables.Interface, error) {
			return knftables.NewFake(family, table), nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer ex.Close()
	ctx := context.Background()
	for _, pods := range [][]string{{"198.18.64.2"}, {"198.18.64.2", "198.18.65.2"}, {"198.18.65.2"}} {
		res, err := ex.Apply(ctx, exampleRuleset(pods...))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d endpoint(s): full %v, %d transaction(s)\n", len(pods), res.Full, res.Transactions)
	}
	// Output:
	// 1 endpoint(s): full true, 1 transaction(s)
	// 2 endpoint(s): full false, 1 transaction(s)
	// 1 endpoint(s): full false, 1 transaction(s)
}
