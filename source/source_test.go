package source_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/source"
	"github.com/svcproxy/svcproxy/state"
)

func service(name string, labels map[string]string, clusterIPs ...string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels},
		Spec: v1.ServiceSpec{
			ClusterIP:  clusterIPs[0],
			ClusterIPs: clusterIPs,
			Ports:      []v1.ServicePort{{Name: "p", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
}

func slice(service, name string, addr string) *discovery.EndpointSlice {
	port, portName := int32(8080), "p"
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{addr}}},
	}
	if netip.MustParseAddr(addr).Is6() {
		es.AddressType = discovery.AddressTypeIPv6
	}
	return es
}

func node(name, zone string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelTopologyZone: zone}}}
}

// servingServiceCIDRs makes the fake's discovery list networking.k8s.io/v1
// ServiceCIDRs, as a server of Kubernetes 1.33 or later does.
func servingServiceCIDRs(client *fake.Clientset) {
	client.Resources = []*metav1.APIResourceList{{
		GroupVersion: networkingv1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "ingresses"}, {Name: "servicecidrs"}},
	}}
}

// view is what a State holds, in short: per family the ports with their
// endpoint count, the node's zone, the Service CIDRs.
func view(st *state.State) map[string]any {
	snap := st.Snapshot()
	out := map[string]any{"zone": snap.Node.Zone, "serviceCIDRs": len(snap.ServiceCIDRs)}
	for _, fam := range snap.Families() {
		ports := map[string]int{}
		for _, sp := range fam.Services.Ports() {
			ports[sp.Name.String()] = len(fam.Endpoints.Get(sp.Name))
		}
		out[string(fam.IPFamily)] = ports
	}
	return out
}

// eventually waits, up to 5 s, for the State to look like want.
func eventually(t *testing.T, st *state.State, changes <-chan struct{}, what string, want map[string]any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := view(st)
		diff := cmp.Diff(want, got)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: State (-want +got):\n%s", what, diff)
		}
		select {
		case <-changes:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestWatchFeedsTheState: adds, updates and deletes of every kind of object
// reach a dual-stack State, and OnEvent, once each; objects for another
// proxy and other Nodes do not; a dual-stack Service's warning comes once.
func TestWatchFeedsTheState(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client := fake.NewClientset(service("web", nil, "198.19.0.1", "2001:db8:19::1"), slice("web", "web-4", "198.18.1.1"), node("n1", "z1"))
	servingServiceCIDRs(client)
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, "n1", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan struct{}, 100)
	var mu sync.Mutex
	var warnings, events []string
	opts := source.Options{
		OnEvent: func(obj any) {
			mu.Lock()
			defer mu.Unlock()
			switch o := obj.(type) {
			case *v1.Service:
				events = append(events, "Service "+o.Name)
			case *discovery.EndpointSlice:
				events = append(events, "EndpointSlice "+o.Name)
			case *v1.Node:
				events = append(events, "Node "+o.Name)
			case *networkingv1.ServiceCIDR:
				events = append(events, "ServiceCIDR "+o.Name)
			default:
				events = append(events, fmt.Sprintf("%T", obj))
			}
		},
		OnChange: func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		},
		OnWarnings: func(ws []svcproxy.Warning) {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range ws {
				warnings = append(warnings, w.String())
			}
		},
	}
	serviceCIDRs, err := source.Watch(ctx, client, st, opts)
	if err != nil || !serviceCIDRs {
		t.Fatalf("Watch: ServiceCIDRs %v, error %v; want true, nil", serviceCIDRs, err)
	}
	both := func(v4, v6 map[string]int, zone string, cidrs int) map[string]any {
		return map[string]any{"IPv4": v4, "IPv6": v6, "zone": zone, "serviceCIDRs": cidrs}
	}
	eventually(t, st, changes, "first list", both(map[string]int{"ns/web:p": 1}, map[string]int{"ns/web:p": 0}, "z1", 0))

	svcs, slices := client.CoreV1().Services("ns"), client.DiscoveryV1().EndpointSlices("ns")
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(slices.Create(ctx, slice("web", "web-6", "2001:db8:18::1"), metav1.CreateOptions{}))
	bad := service("web", nil, "198.19.0.1", "2001:db8:19::1")
	bad.Spec.ExternalIPs = []string{"bogus"}
	must(svcs.Update(ctx, bad, metav1.UpdateOptions{}))
	must(svcs.Create(ctx, service("other", map[string]string{servicemap.LabelServiceProxyName: "x"}, "198.19.0.2"), metav1.CreateOptions{}))
	must(client.CoreV1().Nodes().Create(ctx, node("n2", "z2"), metav1.CreateOptions{}))
	must(client.CoreV1().Nodes().Update(ctx, node("n1", "z3"), metav1.UpdateOptions{}))
	must(client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"198.19.0.0/16"}}}, metav1.CreateOptions{}))
	eventually(t, st, changes, "updates", both(map[string]int{"ns/web:p": 1}, map[string]int{"ns/web:p": 1}, "z3", 1))

	must(nil, slices.Delete(ctx, "web-4", metav1.DeleteOptions{}))
	must(nil, client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}))
	must(nil, client.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}))
	eventually(t, st, changes, "deletes", both(map[string]int{"ns/web:p": 0}, map[string]int{"ns/web:p": 1}, "", 0))
	must(nil, svcs.Delete(ctx, "web", metav1.DeleteOptions{}))
	eventually(t, st, changes, "Service deleted", both(map[string]int{}, map[string]int{}, "", 0))

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{`Service ns/web: invalid externalIP "bogus" dropped`}, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	// Each informer delivers in order; across informers, any order. The
	// fake clientset ignores the selectors (TestWatchSelectors), so n2 and
	// other, which a server leaves out, are events too.
	sort.Strings(events)
	wantEvents := []string{
		"EndpointSlice web-4", "EndpointSlice web-4", "EndpointSlice web-6",
		"Node n1", "Node n1", "Node n1", "Node n2",
		"Service other", "Service web", "Service web", "Service web",
		"ServiceCIDR kubernetes", "ServiceCIDR kubernetes",
	}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestWatchSelectors: the Filter's label selector goes to the server with
// the lists of Services and EndpointSlices, and the node's name with the
// list of Nodes.
func TestWatchSelectors(t *testing.T) {
	for _, tt := range []struct {
		filter servicemap.Filter
		labels string
	}{
		{servicemap.Filter{}, "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"},
		{servicemap.Filter{ProxyName: "my-cni"}, "!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=my-cni"},
	} {
		client := fake.NewClientset()
		var mu sync.Mutex
		got := map[string]string{}
		client.PrependReactor("list", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
			r := action.(k8stesting.ListAction).GetListRestrictions()
			mu.Lock()
			defer mu.Unlock()
			got[action.GetResource().Resource] = "labels " + r.Labels.String() + "; fields " + r.Fields.String()
			return false, nil, nil
		})
		st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "n1", tt.filter)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		serviceCIDRs, err := source.Watch(ctx, client, st, source.Options{})
		cancel()
		if err != nil || serviceCIDRs {
			t.Fatalf("Watch: ServiceCIDRs %v, error %v; want false (the fake serves none), nil", serviceCIDRs, err)
		}
		want := map[string]string{
			"services":       "labels " + tt.labels + "; fields ",
			"endpointslices": "labels " + tt.labels + "; fields ",
			"nodes":          "labels ; fields metadata.name=n1",
		}
		mu.Lock()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%+v: list restrictions (-want +got):\n%s", tt.filter, diff)
		}
		mu.Unlock()
	}
}

// TestWatchBadProxyName: a proxy name that is no label value is an error
// where it is given, state.New, so no watch of everything can start; Watch
// without a State or a client is an error too.
func TestWatchBadProxyName(t *testing.T) {
	if _, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "n1", servicemap.Filter{ProxyName: "not a label"}); err == nil {
		t.Error("state.New with proxy name \"not a label\" succeeded")
	}
	if _, err := source.Watch(t.Context(), fake.NewClientset(), nil, source.Options{}); err == nil {
		t.Error("Watch without a State succeeded")
	}
}

// TestStartWithoutServer: Start returns at once while the server does not
// answer, reports each failed attempt, and fills the State once it
// answers.
func TestStartWithoutServer(t *testing.T) {
	client := fake.NewClientset(service("web", nil, "198.19.0.1"))
	var mu sync.Mutex
	down := 2
	client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if down > 0 {
			down--
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "n1", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 10)
	w, err := source.Start(t.Context(), client, st, source.Options{OnError: func(err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Synced():
		t.Fatal("synced while the server does not answer")
	case err := <-errs:
		if !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("OnError got %v", err)
		}
	}
	select {
	case <-w.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("not synced 10 s after the server answers")
	}
	if len(errs) != 1 || w.LastError() != nil {
		t.Errorf("%d more errors reported, last error %v; want 1, nil", len(errs), w.LastError())
	}
	if n := st.Snapshot().Families()[0].Services.Len(); n != 1 {
		t.Errorf("%d Service ports in the State once synced, want 1", n)
	}
}
