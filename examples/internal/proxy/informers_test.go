package proxy

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
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
	state := NewState([]v1.IPFamily{v1.IPv4Protocol}, "n1", servicemap.Filter{})
	changes := make(chan struct{}, 100)
	if err := watchAPI(ctx, client, state, "n1", func() { changes <- struct{}{} }, func([]svcproxy.Warning) {}); err != nil {
		t.Fatal(err)
	}
	p := &proxy{mode: Mode{Render: fakeRender}, opts: &Options{}, log: discardLogger(), state: state, families: []v1.IPFamily{v1.IPv4Protocol}}
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
