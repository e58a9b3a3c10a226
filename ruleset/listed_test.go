package ruleset_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestListedEndpoints: a Ruleset counts the endpoints kube-proxy's
// iptables mode counts to choose its large-cluster mode, the length of its
// endpointsMap entry of every Service port it proxies: each address and
// port of the port's slices once, whatever its conditions and node; not
// those of a port or a Service it does not proxy, nor of the other family.
func TestListedEndpoints(t *testing.T) {
	withPort := func(es *discovery.EndpointSlice, name string, number int32) *discovery.EndpointSlice {
		es.Ports = []discovery.EndpointPort{{Name: ptr(name), Port: ptr(number), Protocol: ptr(v1.ProtocolTCP)}}
		return es
	}
	headless := service("ns", "headless", "None")
	headless.Spec.ClusterIPs = []string{"None"}
	for _, tc := range []struct {
		name string
		objs []any
		// listed is each port's ListedEndpoints, endpoints its
		// len(Endpoints); total the Ruleset's ListedEndpoints.
		listed, endpoints map[string]int
		total             int
	}{
		{name: "every condition counts, usable or not",
			objs: []any{service("ns", "web", "198.19.0.1"),
				endpointSlice("ns", "web", "web-1",
					ep{ip: "198.18.64.1", node: "node-a"},
					ep{ip: "198.18.64.2", node: "node-b", state: "terminating"},
					ep{ip: "198.18.64.3", node: "node-b", state: "gone"},
					ep{ip: "198.18.64.4", node: "node-b", state: "unready"})},
			listed: map[string]int{"web": 4}, endpoints: map[string]int{"web": 1}, total: 4},
		{name: "a Local policy without local endpoints still counts them",
			objs: []any{service("ns", "web", "198.19.0.1", iTPLocal),
				endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1", node: "node-b"}, ep{ip: "198.18.64.2", node: "node-c"})},
			listed: map[string]int{"web": 2}, endpoints: map[string]int{"web": 0}, total: 2},
		{name: "an address and port listed twice counts once",
			objs: []any{service("ns", "web", "198.19.0.1"),
				endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"}, ep{ip: "198.18.64.2"}),
				endpointSlice("ns", "web", "web-2", ep{ip: "198.18.64.1", state: "terminating"}, ep{ip: "198.18.64.3"})},
			listed: map[string]int{"web": 3}, endpoints: map[string]int{"web": 3}, total: 3},
		{name: "one address under two port numbers counts twice",
			objs: []any{service("ns", "web", "198.19.0.1"),
				endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"}),
				withPort(endpointSlice("ns", "web", "web-2", ep{ip: "198.18.64.1"}), "http", 8081)},
			listed: map[string]int{"web": 2}, endpoints: map[string]int{"web": 2}, total: 2},
		{name: "not a port or Service proxied: not counted",
			objs: []any{service("ns", "web", "198.19.0.1"),
				endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"}),
				withPort(endpointSlice("ns", "web", "web-metrics", ep{ip: "198.18.64.1"}, ep{ip: "198.18.64.2"}), "metrics", 9090),
				endpointSlice("ns", "gone", "gone-1", ep{ip: "198.18.64.5"}),
				headless, endpointSlice("ns", "headless", "headless-1", ep{ip: "198.18.64.6"})},
			listed: map[string]int{"web": 1}, endpoints: map[string]int{"web": 1}, total: 1},
		{name: "the other family's slices: not counted",
			objs: []any{service("ns", "web", "198.19.0.1"),
				endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"}),
				endpointSlice("ns", "web", "web-v6", ep{ip: "2001:db8:18::1"}, ep{ip: "2001:db8:18::2"})},
			listed: map[string]int{"web": 1}, endpoints: map[string]int{"web": 1}, total: 1},
		{name: "Services add up",
			objs: []any{service("ns", "web", "198.19.0.1"), service("ns", "api", "198.19.0.2"), service("ns", "idle", "198.19.0.3"),
				endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"}, ep{ip: "198.18.64.2", state: "unready"}),
				endpointSlice("ns", "api", "api-1", ep{ip: "198.18.64.1"}, ep{ip: "198.18.64.3"}, ep{ip: "198.18.64.4"})},
			listed: map[string]int{"web": 2, "api": 3, "idle": 0}, endpoints: map[string]int{"web": 1, "api": 3, "idle": 0}, total: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss, es := feedObjects(v1.IPv4Protocol, tc.objs)
			b, err := ruleset.NewBuilder(v4Config())
			if err != nil {
				t.Fatal(err)
			}
			rs, _ := b.Build(ss, es)
			if got := rs.ListedEndpoints(); got != tc.total {
				t.Errorf("Ruleset.ListedEndpoints() = %d, want %d", got, tc.total)
			}
			if rs.Len() != len(tc.listed) {
				t.Errorf("%d Services, want %d", rs.Len(), len(tc.listed))
			}
			for name, want := range tc.listed {
				s, ok := rs.Service(webPort("ns", name))
				if !ok {
					t.Fatalf("no Service ns/%s", name)
				}
				if s.ListedEndpoints != want || len(s.Endpoints) != tc.endpoints[name] {
					t.Errorf("ns/%s: ListedEndpoints %d and %d Endpoints, want %d and %d", name, s.ListedEndpoints, len(s.Endpoints), want, tc.endpoints[name])
				}
			}
			// Update keeps the count, from nothing and back to nothing.
			up, _, _ := b.Update(nil, ss, es)
			empty, _ := feedObjects(v1.IPv4Protocol, nil)
			for _, r := range []*ruleset.Ruleset{up, mustUpdate(b, rs, empty, es)} {
				if err := ruleset.CheckInvariants(r); err != nil {
					t.Error(err)
				}
			}
			if up.ListedEndpoints() != tc.total {
				t.Errorf("Update from nil: ListedEndpoints() = %d, want %d", up.ListedEndpoints(), tc.total)
			}
			if n := mustUpdate(b, rs, empty, es).ListedEndpoints(); n != 0 {
				t.Errorf("without Services: ListedEndpoints() = %d, want 0", n)
			}
		})
	}
	var nilRuleset *ruleset.Ruleset
	if n := nilRuleset.ListedEndpoints(); n != 0 {
		t.Errorf("nil Ruleset: ListedEndpoints() = %d, want 0", n)
	}
}

// TestListedEndpointsWithoutRuleChange: a change of endpoints that changes
// no rule (a not-ready endpoint added) is not a change, yet the Ruleset
// counts it, as Build does.
func TestListedEndpointsWithoutRuleChange(t *testing.T) {
	b, err := ruleset.NewBuilder(v4Config())
	if err != nil {
		t.Fatal(err)
	}
	svc := service("ns", "web", "198.19.0.1")
	ss, es := feedObjects(v1.IPv4Protocol, []any{svc, endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"})})
	prev, _ := b.Build(ss, es)
	ss, es = feedObjects(v1.IPv4Protocol, []any{svc, endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.1"}, ep{ip: "198.18.64.2", state: "unready"})})
	rs, ch, _ := b.Update(prev, ss, es)
	if !ch.Empty() {
		t.Errorf("Changes %+v, want none", ch)
	}
	if prev.ListedEndpoints() != 1 || rs.ListedEndpoints() != 2 {
		t.Errorf("ListedEndpoints() before and after: %d and %d, want 1 and 2", prev.ListedEndpoints(), rs.ListedEndpoints())
	}
	if err := ruleset.CheckInvariants(rs); err != nil {
		t.Error(err)
	}
}

// feedObjects feeds objs (*v1.Service, *discovery.EndpointSlice) to fresh
// trackers of family, whatever they skip, and returns their snapshots.
func feedObjects(family v1.IPFamily, objs []any) (servicemap.Snapshot, endpoints.Snapshot) {
	var events []event
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			events = append(events, event{Svc: o})
		case *discovery.EndpointSlice:
			events = append(events, event{ES: o})
		}
	}
	return feed(family, events)
}

// mustUpdate is b.Update's Ruleset.
func mustUpdate(b *ruleset.Builder, prev *ruleset.Ruleset, ss servicemap.Snapshot, es endpoints.Snapshot) *ruleset.Ruleset {
	rs, _, _ := b.Update(prev, ss, es)
	return rs
}
