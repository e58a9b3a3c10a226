package main

import (
	"context"
	"io"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
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
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(testManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := newInputs("n1", []netip.Addr{netip.MustParseAddr("198.18.0.1")}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifests.NewWatcher(dir, 0).Read()
	if err != nil {
		t.Fatal(err)
	}
	in.apply(m)
	d, err := in.Desired(context.Background())
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
		got[f.addr.String()+"/"+string(f.proto)] = served{r.svc.Name.String(), r.kind, r.refused}
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
		o := trace.Trace(rs, trace.Packet{Protocol: f.proto, Src: client, Dst: f.addr, ToNode: r.kind == ruleset.KindNodePort}, trace.Options{})
		if o.Service != r.svc.Name || o.Kind != r.kind {
			t.Errorf("%v: served as the %s of %s, trace says the %s of %s", f, r.kind, r.svc.Name, o.Kind, o.Service)
		}
	}
	if v6, _ := frontends(buildTest(t)[1]); len(v6) != 0 {
		t.Errorf("IPv6 frontends of IPv4 Services: %v", v6)
	}
}

// TestStickyTable: a client's new flow goes where its last one to the
// Service port went while that is less than the timeout ago (as the
// Service says it now) and the target is still offered; otherwise it is
// picked anew; reap forgets what has expired.
func TestStickyTable(t *testing.T) {
	a, b := netip.MustParseAddrPort("198.18.64.2:80"), netip.MustParseAddrPort("198.18.65.2:80")
	choices := func(eps ...netip.AddrPort) []ruleset.Choice {
		var cs []ruleset.Choice
		for _, ep := range eps {
			cs = append(cs, ruleset.Choice{Target: ruleset.Target{Endpoint: ep}, Share: big.NewRat(1, int64(len(eps)))})
		}
		return cs
	}
	service := func(seconds int32) *ruleset.Service {
		s := &ruleset.Service{}
		s.Name = servicemap.PortName{Namespace: "ns", Name: "web", Port: "http", Protocol: v1.ProtocolTCP}
		if seconds > 0 {
			var err error
			if s.Affinity, err = affinity.ClientIP(seconds); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	client, start := netip.MustParseAddr("198.18.32.2"), time.Unix(1000, 0)
	newTable := func() *stickyTable { return &stickyTable{last: map[stickyKey]stickyEntry{}} }
	tests := []struct {
		name           string
		before, after  int32 // the timeout at the first flow (to a) and at the later one
		later          time.Duration
		laterChoices   []ruleset.Choice
		kept, maybeNot bool // the later flow must go to a; it may go elsewhere
	}{
		{"within the timeout", 10, 10, 9 * time.Second, choices(a, b), true, false},
		{"timeout passed", 10, 10, 10 * time.Second, choices(a, b), false, true},
		{"timeout since lowered", 10800, 10, 20 * time.Second, choices(a, b), false, true},
		{"timeout since raised", 10, 10800, 9 * time.Second, choices(a, b), true, false},
		{"target no longer offered", 10, 10, time.Second, choices(b), false, false},
		{"no affinity", 0, 0, time.Second, choices(a, b), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 50 tries: a and b equally likely would all give a once in 2^50.
			picks := map[netip.AddrPort]int{}
			for range 50 {
				table := newTable()
				table.choose(service(tt.before), client, choices(a), start)
				picks[table.choose(service(tt.after), client, tt.laterChoices, start.Add(tt.later))]++
			}
			switch {
			case tt.kept && picks[a] != 50:
				t.Errorf("later flows went to %v, want all to %v", picks, a)
			case !tt.kept && !tt.maybeNot && picks[a] != 0:
				t.Errorf("later flows went to %v, want none to %v", picks, a)
			case tt.maybeNot && picks[b] == 0:
				t.Errorf("later flows went to %v, want new picks", picks)
			}
		})
	}
	table, key := newTable(), stickyKey{service(10).Name, client}
	table.choose(service(10), client, choices(a), start)
	table.choose(service(10), client, choices(a), start.Add(5*time.Second)) // refreshes the timeout
	table.reap(start.Add(14 * time.Second))
	if _, ok := table.last[key]; !ok {
		t.Error("reap forgot a client 9 s after its last flow (timeout 10 s)")
	}
	table.reap(start.Add(15 * time.Second))
	if _, ok := table.last[key]; ok {
		t.Error("reap kept a client 10 s after its last flow (timeout 10 s)")
	}
}

// TestWeighted: each of three targets of share 1/3 gets a third of 30,000
// picks, within 2% (seven standard deviations).
func TestWeighted(t *testing.T) {
	var cs []ruleset.Choice
	for _, ep := range []string{"198.18.64.2:80", "198.18.65.2:80", "198.18.66.2:80"} {
		cs = append(cs, ruleset.Choice{Target: ruleset.Target{Endpoint: netip.MustParseAddrPort(ep)}, Share: big.NewRat(1, 3)})
	}
	counts := map[netip.AddrPort]int{}
	const n = 30000
	for range n {
		counts[weighted(cs)]++
	}
	for _, c := range cs {
		if got := float64(counts[c.Endpoint]) / n; got < 1.0/3-0.02 || got > 1.0/3+0.02 {
			t.Errorf("%v got %.3f of the picks, want 1/3: %v", c.Endpoint, got, counts)
		}
	}
}
