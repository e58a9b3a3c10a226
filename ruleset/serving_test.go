package ruleset_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

// TestServing: Service.Serving lists every serving endpoint of the port, on
// any node and whether or not this node sends new traffic there, so that
// conntrack cleanup spares their flows as kube-proxy does.
func TestServing(t *testing.T) {
	tests := []struct {
		name string
		mods []func(*v1.Service)
		eps  []ep
		want []string
	}{
		{"ready and terminating-serving", nil,
			[]ep{{ip: "198.18.64.2"}, {ip: "198.18.64.3", state: "terminating"}, {ip: "198.18.64.4", state: "gone"}, {ip: "198.18.64.5", state: "unready"}},
			[]string{"198.18.64.2:8080", "198.18.64.3:8080"}},
		{"iTP Local: remote endpoints still serving", []func(*v1.Service){iTPLocal},
			[]ep{{ip: "198.18.64.2", node: thisNode.Name}, {ip: "198.18.65.2", node: "other"}},
			[]string{"198.18.64.2:8080", "198.18.65.2:8080"}},
		{"no endpoints", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var slices []*discovery.EndpointSlice
			if tt.eps != nil {
				slices = append(slices, endpointSlice("ns", "web", "web-1", tt.eps...))
			}
			rs := build(t, v4Config(), []*v1.Service{service("ns", "web", "198.19.0.1", tt.mods...)}, slices)
			svc, ok := rs.Service(webPort("ns", "web"))
			if !ok {
				t.Fatal("Service missing")
			}
			var want []netip.AddrPort
			for _, s := range tt.want {
				want = append(want, netip.MustParseAddrPort(s))
			}
			if diff := cmp.Diff(want, svc.Serving, cmpopts.EquateEmpty(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("Serving (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServingChangeIsAChange: losing a serving endpoint that no target used
// is still a change, so that conntrack cleanup runs.
func TestServingChangeIsAChange(t *testing.T) {
	svcs := []*v1.Service{service("ns", "web", "198.19.0.1", iTPLocal)}
	before := build(t, v4Config(), svcs, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.2", node: thisNode.Name}, ep{ip: "198.18.65.2", node: "other"})})
	after := build(t, v4Config(), svcs, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.2", node: thisNode.Name})})
	ch := ruleset.Diff(before, after)
	if len(ch.Changed) != 1 {
		t.Errorf("Diff = %+v, want the Service changed", ch)
	}
}
