package nftables_test

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
	"github.com/svcproxy/svcproxy/nftables"
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

// Script renders the whole table as an nft script, as a dry run prints it.
func ExampleScript() {
	script, res, err := nftables.Script(exampleRuleset("198.18.64.2", "198.18.65.2"), nftables.Options{})
	if err != nil {
		panic(err)
	}
	warnings.None(warnings.Example, res.Warnings)
	grep(script, "default/web")
	// Output:
	// add chain ip kube-proxy service-SUSTUHLJ-default/web/tcp/http
	// add rule ip kube-proxy service-SUSTUHLJ-default/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.18.64.2 . 8080 , 1 : 198.18.65.2 . 8080 }
	// add element ip kube-proxy service-ips { 198.19.0.10 . tcp . 80 : goto service-SUSTUHLJ-default/web/tcp/http }
}

// RenderChanges writes only what an endpoint change touches: here the
// Service's chain, which DNATs to its endpoints, and the Service's
// elements again (unchanged, so that one deleted behind the proxy's back
// comes back). (A chain that goes away,
// an endpoint's of a ClientIP-affinity Service say, is flushed now, listed
// as stale, and deleted by a later transaction.)
func ExampleRenderChanges() {
	before := exampleRuleset("198.18.64.2", "198.18.65.2")
	after := exampleRuleset("198.18.64.2", "198.18.66.2")
	fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
	tx := fake.NewTransaction()
	res, err := nftables.RenderChanges(tx, before, after, nftables.Options{}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Print(tx)
	fmt.Println("stale:", res.Stale)
	// Output:
	// flush chain ip kube-proxy service-SUSTUHLJ-default/web/tcp/http
	// add rule ip kube-proxy service-SUSTUHLJ-default/web/tcp/http meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.18.64.2 . 8080 , 1 : 198.18.66.2 . 8080 }
	// add element ip kube-proxy cluster-ips { 198.19.0.10 }
	// add element ip kube-proxy service-ips { 198.19.0.10 . tcp . 80 : goto service-SUSTUHLJ-default/web/tcp/http }
	// stale: []
}

// An Executor applies Rulesets: a full sync first, then only the changes.
// Here it drives knftables' Fake; nftables.NewExecutor without NewInterface
// runs the real nft, after checking its version and the kernel's.
func ExampleExecutor() {
	ex, err := nftables.NewExecutor(nftables.ExecutorConfig{
		Family: v1.IPv4Protocol,
		NewInterface: func(family knftables.Family, table string) (knftables.Interface, error) {
			return knftables.NewFake(family, table), nil
		},
	})
	if err != nil {
		panic(err)
	}
	for _, rs := range []*ruleset.Ruleset{
		exampleRuleset("198.18.64.2"),
		exampleRuleset("198.18.64.2", "198.18.65.2"),
		exampleRuleset("198.18.64.2", "198.18.65.2"),
	} {
		res, err := ex.Apply(context.Background(), rs)
		if err != nil {
			panic(err)
		}
		fmt.Printf("full=%v operations=%d\n", res.Full, res.Operations)
	}
	// Output:
	// full=true operations=62
	// full=false operations=4
	// full=false operations=0
}

// The chain names are kube-proxy's.
func ExampleServiceChainBase() {
	name := servicemap.PortName{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: v1.ProtocolTCP}
	fmt.Println("service-" + nftables.ServiceChainBase(name))
	fmt.Println("endpoint-" + nftables.EndpointChainBase(name, netip.MustParseAddrPort("10.180.0.1:80")))
	fmt.Println("endpoint-" + nftables.EndpointChainBase(name, netip.MustParseAddrPort("[fd00::1]:80")))
	// Output:
	// service-ULMVA6XW-ns1/svc1/tcp/p80
	// endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80
	// endpoint-MDGHXLRU-ns1/svc1/tcp/p80__fd00..1/80
}
