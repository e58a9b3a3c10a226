package main

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// testManifests: a Service with a node port and an external IP, a Service
// without endpoints, an SCTP Service, and two Services that claim one
// external IP and port.
const testManifests = `
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: web}
spec:
  type: NodePort
  clusterIP: 198.19.0.1
  externalIPs: [198.19.1.1]
  ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [198.18.64.2], conditions: {ready: true}, nodeName: n1}
- {addresses: [198.18.65.2], conditions: {ready: true}, nodeName: n2}
---
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: empty}
spec:
  clusterIP: 198.19.0.2
  ports: [{name: dns, port: 53, protocol: UDP}]
---
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: sctp}
spec:
  clusterIP: 198.19.0.3
  ports: [{name: s, port: 9, protocol: SCTP}]
---
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: also}
spec:
  clusterIP: 198.19.0.4
  externalIPs: [198.19.1.1]
  ports: [{name: http, port: 80, protocol: TCP}]
`

// buildTest builds the Rulesets of testManifests for node n1 with node IP
// 198.18.0.1.
func buildTest(t *testing.T) []*ruleset.Ruleset {
	t.Helper()
	return buildFrom(t, testManifests)
}

// buildFrom builds the Rulesets of objects (YAML) for node n1 with node IP
// 198.18.0.1.
func buildFrom(t *testing.T, objects string) []*ruleset.Ruleset {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := newProxy("n1", []netip.Addr{netip.MustParseAddr("198.18.0.1")}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifests.NewWatcher(dir, 0).Read()
	if err != nil {
		t.Fatal(err)
	}
	p.apply(m)
	d, err := p.source.Desired(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return []*ruleset.Ruleset{d.Rulesets[v1.IPv4Protocol], d.Rulesets[v1.IPv6Protocol]}
}

// TestFrontends: every TCP and UDP frontend of the node, the Service and
// kind that serve it (the owner where two claim one: the one that forwards
// before one without endpoints), which ones are refused, and the addresses that
// must be local.
func TestFrontends(t *testing.T) {
	type served struct {
		Service string
		Kind    ruleset.FrontendKind
		Refused bool
	}
	routes, addrs := frontends(buildTest(t)[0])
	got := map[string]served{}
	for f, r := range routes {
		got[f.String()] = served{r.svc.Name.String(), r.kind, r.refused}
	}
	want := map[string]served{
		"198.19.0.1:80/TCP":    {"ns/web:http", ruleset.KindClusterIP, false},
		"198.19.1.1:80/TCP":    {"ns/web:http", ruleset.KindExternalIP, false}, // the Service that forwards owns it
		"198.18.0.1:30080/TCP": {"ns/web:http", ruleset.KindNodePort, false},
		"198.19.0.2:53/UDP":    {"ns/empty:dns", ruleset.KindClusterIP, true},
		"198.19.0.4:80/TCP":    {"ns/also:http", ruleset.KindClusterIP, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("frontends (-want +got):\n%s", diff)
	}
	wantAddrs := []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2"),
		netip.MustParseAddr("198.19.0.4"), netip.MustParseAddr("198.19.1.1")}
	slices.SortFunc(addrs, netip.Addr.Compare)
	if diff := cmp.Diff(wantAddrs, addrs, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("addresses to make local (-want +got):\n%s", diff)
	}
	// The Service and kind that trace.Trace, the specification, gives a
	// packet from outside to each frontend.
	rs, client := buildTest(t)[0], netip.MustParseAddrPort("198.18.32.2:40000")
	for f, r := range routes {
		o := trace.Trace(rs, trace.Packet{Protocol: f.Protocol, Src: client, Dst: netip.AddrPortFrom(f.Addr, f.Port), ToNode: r.kind == ruleset.KindNodePort}, trace.Options{})
		if o.Service != r.svc.Name || o.Kind != r.kind {
			t.Errorf("%v: served as the %s of %s, trace says the %s of %s", f, r.kind, r.svc.Name, o.Kind, o.Service)
		}
	}
	if v6, _ := frontends(buildTest(t)[1]); len(v6) != 0 {
		t.Errorf("IPv6 frontends of IPv4 Services: %v", v6)
	}
}

// TestFrontendsUnspecified: a load-balancer IP at the unspecified address
// (which the API server accepts) gets no socket and no route, since a
// socket there would take the port on every address of the node; a
// loopback one is served as kube-proxy serves it.
func TestFrontendsUnspecified(t *testing.T) {
	const objects = `
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: lb}
spec:
  type: LoadBalancer
  clusterIP: 198.19.0.1
  ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]
status:
  loadBalancer:
    ingress: [{ip: 0.0.0.0, ipMode: VIP}, {ip: 127.0.0.5, ipMode: VIP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: ns, name: lb-1, labels: {kubernetes.io/service-name: lb}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [198.18.64.2], conditions: {ready: true}, nodeName: n1}
`
	routes, addrs := frontends(buildFrom(t, objects)[0])
	var got []string
	for f := range routes {
		got = append(got, f.String())
	}
	slices.Sort(got)
	want := []string{"127.0.0.5:80/TCP", "198.18.0.1:30080/TCP", "198.19.0.1:80/TCP"}
	if !slices.Equal(got, want) {
		t.Errorf("frontends %v, want %v", got, want)
	}
	if slices.ContainsFunc(addrs, netip.Addr.IsUnspecified) {
		t.Errorf("addresses to make local %v hold the unspecified address", addrs)
	}
}
