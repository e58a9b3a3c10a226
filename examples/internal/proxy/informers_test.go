package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/google/go-cmp/cmp"
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

// TestReachabilityLines: one line when the server is lost and one when it
// is back; an answer to a request sent before the loss (a server that is
// shutting down still answers those) does not say it is back.
func TestReachabilityLines(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	refused := errors.New("connection refused")
	type event struct {
		at     int  // when the outcome is known, seconds after t0
		sent   int  // when the request was sent
		failed bool // no answer
	}
	for _, tc := range []struct {
		name   string
		events []event
		want   []string
	}{
		{"answers only", []event{{at: 1, sent: 0}, {at: 2, sent: 1}}, nil},
		{"lost and back", []event{{at: 1, sent: 1, failed: true}, {at: 2, sent: 2, failed: true}, {at: 4, sent: 3}},
			[]string{"ERROR unreachable", "INFO reachable unreachableFor=3s"}},
		{"answer to a request sent before the loss", []event{{at: 2, sent: 2, failed: true}, {at: 3, sent: 1}, {at: 4, sent: 3, failed: true}, {at: 6, sent: 5}},
			[]string{"ERROR unreachable", "INFO reachable unreachableFor=4s"}},
		{"lost twice", []event{{at: 1, sent: 1, failed: true}, {at: 2, sent: 2}, {at: 3, sent: 3, failed: true}, {at: 5, sent: 4}},
			[]string{"ERROR unreachable", "INFO reachable unreachableFor=1s", "ERROR unreachable", "INFO reachable unreachableFor=2s"}},
		{"stopping is not a loss", []event{{at: 1, sent: 1}, {at: 2, sent: 2, failed: true}}, []string{"ERROR unreachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			now := t0
			r := &reachability{
				log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey || a.Key == "err" {
						return slog.Attr{}
					}
					return a
				}})),
				now: func() time.Time { return now },
			}
			for _, e := range tc.events {
				now = at(e.at)
				if e.failed {
					r.failed(refused)
				} else {
					r.answered(at(e.sent))
				}
			}
			r.failed(context.Canceled)
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if line == "" {
					continue
				}
				word := "unreachable"
				if strings.Contains(line, "reachable again") {
					word = "reachable"
				}
				level := strings.TrimPrefix(strings.Fields(line)[0], "level=")
				got = append(got, strings.TrimSpace(level+" "+word+" "+logField(line, "unreachableFor")))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("log lines (-want +got):\n%s", diff)
			}
		})
	}
}

// logField returns key=value from a text log line, or "".
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, key+"=") {
			return f
		}
	}
	return ""
}
