package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/source"
)

func slice(service, name, ip string) *discovery.EndpointSlice {
	port, portName := int32(8080), "p"
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{ip}}},
	}
}

// TestInformersReachTheRules drives the API path with client-go's fake
// clientset: adds, updates and deletes of Services and EndpointSlices must
// show in the rendered rules.
func TestInformersReachTheRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(service("web", "198.19.0.1"), slice("web", "web-1", "198.18.1.1"))
	state := ipv4State()
	changes := make(chan struct{}, 100)
	if _, err := source.Watch(ctx, client, state, source.Options{OnChange: func() { changes <- struct{}{} }}); err != nil {
		t.Fatal(err)
	}
	p := &proxy{mode: Mode{Render: fakeRender}, opts: &Options{}, log: discardLogger()}
	p.useState(state)
	render := func() string {
		var out bytes.Buffer
		if err := p.dryRun(&out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	eventually := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := render()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: rules\n%s\nwant\n%s", what, got, want)
			}
			select {
			case <-changes:
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	eventually("initial list", "IPv4 ns/web:p 198.19.0.1 cluster\n")

	svcs, slices := client.CoreV1().Services("ns"), client.DiscoveryV1().EndpointSlices("ns")
	if _, err := svcs.Create(ctx, service("api", "198.19.0.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("Service added", "IPv4 ns/api:p 198.19.0.2 reject\nIPv4 ns/web:p 198.19.0.1 cluster\n")

	if _, err := slices.Create(ctx, slice("api", "api-1", "198.18.1.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("EndpointSlice added", "IPv4 ns/api:p 198.19.0.2 cluster\nIPv4 ns/web:p 198.19.0.1 cluster\n")

	moved := service("web", "198.19.0.9")
	if _, err := svcs.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("Service updated", "IPv4 ns/api:p 198.19.0.2 cluster\nIPv4 ns/web:p 198.19.0.9 cluster\n")

	if err := slices.Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("EndpointSlice deleted", "IPv4 ns/api:p 198.19.0.2 cluster\nIPv4 ns/web:p 198.19.0.9 reject\n")

	if err := svcs.Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("Service deleted", "IPv4 ns/web:p 198.19.0.9 reject\n")

	labelled := service("other", "198.19.0.3")
	labelled.Labels = map[string]string{servicemap.LabelServiceProxyName: "someone-else"}
	if _, err := svcs.Create(ctx, labelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := render(); strings.Contains(got, "other") {
		t.Errorf("a Service for another proxy reached the rules:\n%s", got)
	}
}

// TestInformersFollowServiceCIDRs: the ServiceCIDR objects of the API server
// reach the Rulesets' Config, with --service-cluster-ip-range's, as they are
// added and deleted; a CIDR that does not parse is a warning.
func TestInformersFollowServiceCIDRs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serviceCIDR := func(name string, cidrs ...string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	client := fake.NewClientset(serviceCIDR("kubernetes", "198.19.0.0/17", "2001:db8:19::/108"))
	client.Resources = []*metav1.APIResourceList{{GroupVersion: "networking.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "servicecidrs"}}}}
	state := ipv4State()
	changes := make(chan struct{}, 100)
	var warnings []svcproxy.Warning
	var mu sync.Mutex
	warn := func(w []svcproxy.Warning) { mu.Lock(); warnings = append(warnings, w...); mu.Unlock() }
	if _, err := source.Watch(ctx, client, state, source.Options{OnChange: func() { changes <- struct{}{} }, OnWarnings: warn}); err != nil {
		t.Fatal(err)
	}
	render := func(w io.Writer, rs *ruleset.Ruleset, _ *Options) ([]svcproxy.Warning, error) {
		_, err := fmt.Fprint(w, rs.Config().ServiceCIDRs)
		return nil, err
	}
	flag := []netip.Prefix{netip.MustParsePrefix("198.19.200.0/24")}
	p := &proxy{mode: Mode{Render: render}, opts: &Options{ServiceCIDRs: flag}, log: discardLogger()}
	p.useState(state)
	eventually := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var out bytes.Buffer
			if err := p.dryRun(&out); err != nil {
				t.Fatal(err)
			}
			if out.String() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Service CIDRs %s, want %s", what, out.String(), want)
			}
			select {
			case <-changes:
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	eventually("initial list", "[198.19.0.0/17 198.19.200.0/24]")
	cidrs := client.NetworkingV1().ServiceCIDRs()
	if _, err := cidrs.Create(ctx, serviceCIDR("more", "198.19.128.0/17", "not-a-cidr"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("ServiceCIDR added", "[198.19.0.0/17 198.19.128.0/17 198.19.200.0/24]")
	if err := cidrs.Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("ServiceCIDR deleted", "[198.19.128.0/17 198.19.200.0/24]")
	mu.Lock()
	defer mu.Unlock()
	if len(warnings) != 1 || warnings[0].String() != `ServiceCIDR more: CIDR "not-a-cidr" is not a prefix: skipped` {
		t.Errorf("warnings %v, want one about not-a-cidr", warnings)
	}
}
