package ruleset_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

func TestDiff(t *testing.T) {
	web := service("ns", "web", "198.19.0.10")
	api := service("ns", "api", "198.19.0.11")
	db := service("ns", "db", "198.19.0.12")
	webSlice := endpointSlice("ns", "web", "web-1", a1, b1)
	apiSlice := endpointSlice("ns", "api", "api-1", b1)
	base := []*v1.Service{web, api, db}
	baseSlices := []*discovery.EndpointSlice{webSlice, apiSlice}

	type input struct {
		cfg    ruleset.Config
		svcs   []*v1.Service
		slices []*discovery.EndpointSlice
	}
	baseInput := input{v4Config(), base, baseSlices}
	tests := []struct {
		name     string
		old      *input // nil: Diff(nil, new)
		new      input
		want     ruleset.Changes
		wantNone bool // Empty() must be true
	}{{
		name: "nil old: everything added",
		new:  baseInput,
		want: ruleset.Changes{Added: []servicemap.PortName{webPort("ns", "api"), webPort("ns", "db"), webPort("ns", "web")}},
	}, {
		name: "nil old, empty new",
		new:  input{v4Config(), nil, nil},
		want: ruleset.Changes{}, wantNone: true,
	}, {
		name: "identical inputs built twice",
		old:  &baseInput,
		new:  baseInput,
		want: ruleset.Changes{}, wantNone: true,
	}, {
		name: "equal Configs with distinct slices",
		old:  &input{v4Config(func(c *ruleset.Config) { c.ClusterCIDRs = pfx("198.18.0.0/16") }), base, baseSlices},
		new:  input{v4Config(func(c *ruleset.Config) { c.ClusterCIDRs = pfx("198.18.0.0/16"); c.MasqueradeMark = 0x4000 }), base, baseSlices},
		want: ruleset.Changes{}, wantNone: true,
	}, {
		name: "Service added and removed",
		old:  &input{v4Config(), []*v1.Service{web, db}, baseSlices},
		new:  input{v4Config(), []*v1.Service{api, web}, baseSlices},
		want: ruleset.Changes{Added: []servicemap.PortName{webPort("ns", "api")}, Removed: []servicemap.PortName{webPort("ns", "db")}},
	}, {
		name: "endpoint added",
		old:  &baseInput,
		new:  input{v4Config(), base, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", a1, b1, b2), apiSlice}},
		want: ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "web")}},
	}, {
		name: "endpoint became terminating",
		old:  &baseInput,
		new:  input{v4Config(), base, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", a1, ep{ip: b1.ip, node: b1.node, state: "terminating"}), apiSlice}},
		want: ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "web")}},
	}, {
		name: "endpoint moved zone, no hints in use: same rules",
		old:  &baseInput,
		new:  input{v4Config(), base, []*discovery.EndpointSlice{webSlice, endpointSlice("ns", "api", "api-1", ep{ip: b1.ip, node: b1.node, zone: "z9"})}},
		want: ruleset.Changes{}, wantNone: true,
	}, {
		name: "endpoints gone: route changes to reject",
		old:  &baseInput,
		new:  input{v4Config(), base, []*discovery.EndpointSlice{apiSlice}},
		want: ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "web")}},
	}, {
		name: "Service spec changed",
		old:  &baseInput,
		new:  input{v4Config(), []*v1.Service{service("ns", "web", "198.19.0.10", nodePort), api, db}, baseSlices},
		want: ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "web")}},
	}, {
		name: "added, changed and removed at once, each sorted",
		old:  &input{v4Config(), []*v1.Service{web, db, service("a", "x", "198.19.0.20"), service("z", "x", "198.19.0.21")}, baseSlices},
		new: input{v4Config(), []*v1.Service{
			service("ns", "web", "198.19.0.10", eTPLocal, nodePort), api, service("ns", "db", "198.19.0.12", iTPLocal), service("b", "y", "198.19.0.22"),
		}, baseSlices},
		want: ruleset.Changes{
			Added:   []servicemap.PortName{webPort("b", "y"), webPort("ns", "api")},
			Changed: []servicemap.PortName{webPort("ns", "db"), webPort("ns", "web")},
			Removed: []servicemap.PortName{webPort("a", "x"), webPort("z", "x")},
		},
	}, {
		name: "Config changed: another node",
		old:  &baseInput,
		new:  input{v4Config(func(c *ruleset.Config) { c.Node.Name = "node-b" }), base, baseSlices},
		// The targets' Local flags change with the node.
		want: ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "api"), webPort("ns", "web")}, ConfigChanged: true},
	}, {
		name: "Config changed only",
		old:  &baseInput,
		new:  input{v4Config(func(c *ruleset.Config) { c.MasqueradeAll = true }), base, baseSlices},
		want: ruleset.Changes{ConfigChanged: true},
	}, {
		name: "Config changed: mark",
		old:  &baseInput,
		new:  input{v4Config(func(c *ruleset.Config) { c.MasqueradeMark = 1 }), base, baseSlices},
		want: ruleset.Changes{ConfigChanged: true},
	}, {
		name: "Config changed: cluster CIDRs",
		old:  &input{v4Config(func(c *ruleset.Config) { c.ClusterCIDRs = pfx("198.18.0.0/16") }), base, baseSlices},
		new:  input{v4Config(func(c *ruleset.Config) { c.ClusterCIDRs = pfx("198.18.0.0/15") }), base, baseSlices},
		want: ruleset.Changes{ConfigChanged: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old *ruleset.Ruleset
			if tt.old != nil {
				old = build(t, tt.old.cfg, tt.old.svcs, tt.old.slices)
			}
			new := build(t, tt.new.cfg, tt.new.svcs, tt.new.slices)
			got := ruleset.Diff(old, new)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
			if got.Empty() != tt.wantNone {
				t.Errorf("Empty() = %v, want %v", got.Empty(), tt.wantNone)
			}
		})
	}
}

func TestDiffSameRuleset(t *testing.T) {
	rs := build(t, v4Config(), []*v1.Service{service("ns", "web", "198.19.0.10")}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", a1)})
	if ch := ruleset.Diff(rs, rs); !ch.Empty() {
		t.Errorf("Diff(rs, rs) = %+v, want empty", ch)
	}
}

func TestChangesEmpty(t *testing.T) {
	n := []servicemap.PortName{webPort("ns", "web")}
	for _, tt := range []struct {
		ch   ruleset.Changes
		want bool
	}{
		{ruleset.Changes{}, true},
		{ruleset.Changes{Added: []servicemap.PortName{}}, true},
		{ruleset.Changes{Added: n}, false},
		{ruleset.Changes{Changed: n}, false},
		{ruleset.Changes{Removed: n}, false},
		{ruleset.Changes{ConfigChanged: true}, false},
	} {
		if got := tt.ch.Empty(); got != tt.want {
			t.Errorf("%+v.Empty() = %v, want %v", tt.ch, got, tt.want)
		}
	}
}
