package state_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
	"github.com/svcproxy/svcproxy/topology"
)

var serviceOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b affinity.Policy) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

// testService is Service ns/name, dual-stack when it has two cluster IPs,
// with one TCP port 80 and the given externalIPs.
func testService(name string, clusterIPs []string, externalIPs ...string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{
			ClusterIP: clusterIPs[0], ClusterIPs: clusterIPs, ExternalIPs: externalIPs,
			Ports: []v1.ServicePort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
}

// testSlice is EndpointSlice ns/<service>-<family> with a ready endpoint
// on node n1 per address, all of the first one's family.
func testSlice(service string, addrs ...string) *discovery.EndpointSlice {
	port, portName, ready, node := int32(8080), "p", true, "n1"
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
	}
	if netip.MustParseAddr(addrs[0]).Is6() {
		es.AddressType = discovery.AddressTypeIPv6
	}
	// A lower-case name: "IPv4" is not valid in one.
	es.Name = service + map[discovery.AddressType]string{discovery.AddressTypeIPv4: "-ipv4", discovery.AddressTypeIPv6: "-ipv6"}[es.AddressType]
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{a}, NodeName: &node,
			Conditions: discovery.EndpointConditions{Ready: &ready}})
	}
	return es
}

var (
	webIPs  = []string{"198.19.0.1", "2001:db8:19::1"}
	dbIPs   = []string{"198.19.0.2", "2001:db8:19::2"}
	allowed = []netip.Prefix{netip.MustParsePrefix("198.19.2.0/24"), netip.MustParsePrefix("2001:db8:2::/64")}
)

// testConfig is a ConfigFunc whose Config the test changes: it gives
// *base with the Snapshot's node and node addresses, or *err.
func testConfig(base *ruleset.Config, err *error) state.ConfigFunc {
	return func(snap state.Snapshot, fam state.Family) (ruleset.Config, error) {
		cfg := *base
		cfg.Node, cfg.NodePortAddresses = snap.Node, fam.NodeAddresses
		var allowedOfFamily []netip.Prefix
		for _, p := range base.AllowedExternalIPs {
			if p.Addr().Is4() == (fam.IPFamily == v1.IPv4Protocol) {
				allowedOfFamily = append(allowedOfFamily, p)
			}
		}
		cfg.AllowedExternalIPs = allowedOfFamily
		return cfg, *err
	}
}

func newTestState(t *testing.T) *state.State {
	t.Helper()
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, "n1", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBuilderEqualsBuild: after every step, each family's Ruleset
// equals Build's from the same Snapshot and Config; a Service that did not
// change is the same *Service as in the previous sync (Update, not Build),
// unless the Config changed.
func TestBuilderEqualsBuild(t *testing.T) {
	must := warnings.Must(t)
	st := newTestState(t)
	base, cfgErr := ruleset.Config{}, error(nil)
	src := newBuilder(t, testConfig(&base, &cfgErr))
	var prev state.Built
	for _, step := range []struct {
		name   string
		change func()
		// shared: the Service ns/db keeps its *Service.
		shared bool
	}{
		{"first", func() {
			must.None(st.UpdateService(testService("web", webIPs)))
			must.None(st.UpdateService(testService("db", dbIPs)))
			must.None(st.UpdateSlice(testSlice("web", "198.18.64.1")))
		}, false},
		{"endpoints of web change", func() { must.None(st.UpdateSlice(testSlice("web", "198.18.64.1", "198.18.64.2"))) }, true},
		{"web gets IPv6 endpoints", func() { must.None(st.UpdateSlice(testSlice("web", "2001:db8:64::1"))) }, true},
		{"web is deleted", func() { st.DeleteService("ns", "web") }, true},
		{"nothing", func() {}, true},
		{"Config: masquerade all", func() { base.MasqueradeAll = true }, false},
		{"web comes back", func() { must.None(st.UpdateService(testService("web", webIPs))) }, true},
		{"the Node gets a zone and addresses: Config changes", func() {
			must.None(st.UpdateNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1.LabelTopologyZone: "z"}},
				Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "198.18.0.1"}}}}))
		}, false},
		{"db changes", func() { must.None(st.UpdateService(testService("db", dbIPs, "198.19.2.1", "2001:db8:2::1"))) }, false},
	} {
		step.change()
		snap := st.Snapshot()
		got, err := src.Build(snap)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		for _, fam := range snap.Families() {
			cfg, _ := testConfig(&base, &cfgErr)(snap, fam)
			cfg.Family = fam.IPFamily
			b, err := ruleset.NewBuilder(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, ws := b.Build(fam.Services, fam.Endpoints)
			warnings.None(t, ws)
			rs := got.Rulesets[fam.IPFamily]
			if diff := cmp.Diff(values(want.Services()), values(rs.Services()), serviceOpts); diff != "" {
				t.Errorf("%s, %s: Ruleset (-ruleset.Builder.Build +Builder):\n%s", step.name, fam.IPFamily, diff)
			}
			if ch := ruleset.Diff(want, rs); !ch.Empty() {
				t.Errorf("%s, %s: differs from Build: %+v", step.name, fam.IPFamily, ch)
			}
			if step.shared != (portOf(rs, "db") == portOf(prev.Rulesets[fam.IPFamily], "db")) {
				t.Errorf("%s, %s: ns/db shared with the previous sync: %v, want %v", step.name, fam.IPFamily, !step.shared, step.shared)
			}
		}
		prev = got
	}
}

// portOf is the Service ns/name:p of rs, nil when there is none.
func portOf(rs *ruleset.Ruleset, name string) *ruleset.Service {
	if rs == nil {
		return nil
	}
	s, _ := rs.Service(servicemap.PortName{Namespace: "ns", Name: name, Port: "p", Protocol: v1.ProtocolTCP})
	return s
}

// TestBuilderWarnings: a build warning is reported once while the
// Service and the Config keep giving it, and again once it went away and
// came back; a build that fails reports nothing.
func TestBuilderWarnings(t *testing.T) {
	must := warnings.Must(t)
	st := newTestState(t)
	base, cfgErr := ruleset.Config{RestrictExternalIPs: true, AllowedExternalIPs: allowed}, error(nil)
	src := newBuilder(t, testConfig(&base, &cfgErr))
	v4Bad := "Service ns/web: externalIP 198.19.1.1 is not allowed: not served"
	v6Bad := "Service ns/web: externalIP 2001:db8:1::1 is not allowed: not served"
	web := func(externalIPs ...string) func() {
		return func() { must.None(st.UpdateService(testService("web", webIPs, externalIPs...))) }
	}
	for _, step := range []struct {
		name   string
		change func()
		failed bool
		want   []string
	}{
		{"bad externalIPs of both families", web("198.19.1.1", "2001:db8:1::1"), false, []string{v4Bad, v6Bad}},
		{"nothing", func() {}, false, nil},
		{"web's endpoints change", func() { must.None(st.UpdateSlice(testSlice("web", "198.18.64.1"))) }, false, nil},
		{"another Service", func() { must.None(st.UpdateService(testService("db", dbIPs))) }, false, nil},
		{"web changes, its bad IPs stay", web("198.19.1.1", "2001:db8:1::1", "198.19.2.1"), false, nil},
		{"the Config changes, the bad IPs stay bad", func() { base.MasqueradeAll = true }, false, nil},
		{"the IPv6 one is fixed", web("198.19.1.1"), false, nil},
		{"the IPv6 one is back", web("198.19.1.1", "2001:db8:1::1"), false, []string{v6Bad}},
		{"the Config allows them", func() { base.RestrictExternalIPs = false }, false, nil},
		{"the Config restricts them again", func() { base.RestrictExternalIPs = true }, false, []string{v4Bad, v6Bad}},
		{"web is deleted", func() { st.DeleteService("ns", "web") }, false, nil},
		{"web is back, the Config fails", func() { web("198.19.1.1")(); cfgErr = errors.New("no Config") }, true, nil},
		{"the Config works again", func() { cfgErr = nil }, false, []string{v4Bad}},
	} {
		step.change()
		built, err := src.Build(st.Snapshot())
		if (err != nil) != step.failed {
			t.Fatalf("%s: error %v, want failure %v", step.name, err, step.failed)
		}
		got := strings(built.Warnings)
		if diff := cmp.Diff(step.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: warnings reported (-want +got):\n%s", step.name, diff)
		}
	}
}

// TestBuilderFailedBuild: a build that fails returns an error naming
// the family and builds nothing: the trigger times of its Snapshot go with
// the next build that succeeds, which is still an Update from the last
// success.
func TestBuilderFailedBuild(t *testing.T) {
	must := warnings.Must(t)
	st := newTestState(t)
	base, cfgErr := ruleset.Config{}, error(nil)
	src := newBuilder(t, testConfig(&base, &cfgErr))
	must.None(st.UpdateService(testService("db", dbIPs)))
	first, err := src.Build(st.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	es := testSlice("web", "198.18.64.1")
	es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339)}
	must.None(st.UpdateService(testService("web", webIPs)))
	must.None(st.UpdateSlice(es))
	cfgErr = errors.New("no Config")
	if _, err := src.Build(st.Snapshot()); err == nil || !errors.Is(err, cfgErr) {
		t.Fatalf("Build with a failing ConfigFunc: error %v, want one that wraps %v", err, cfgErr)
	} else if want := fmt.Sprintf("building the %s Ruleset: no Config", v1.IPv4Protocol); err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	cfgErr = nil
	for i, want := range [][]time.Time{{at}, nil} {
		d, err := src.Build(st.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, d.Triggers, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("build %d after the failure: Triggers (-want +got):\n%s", i+1, diff)
		}
		if portOf(d.Rulesets[v1.IPv4Protocol], "web") == nil {
			t.Errorf("build %d after the failure: no ns/web", i+1)
		}
		if portOf(d.Rulesets[v1.IPv4Protocol], "db") != portOf(first.Rulesets[v1.IPv4Protocol], "db") {
			t.Errorf("build %d after the failure: ns/db was rebuilt, want it shared with the last success", i+1)
		}
	}
}

func TestConfigFrom(t *testing.T) {
	must := warnings.Must(t)
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	prefixes := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	st := newTestState(t)
	must.None(st.UpdateNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1.LabelTopologyZone: "z"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "198.18.0.1"}, {Type: v1.NodeInternalIP, Address: "2001:db8::1"}}}}))
	must.None(st.UpdateServiceCIDR(&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "c"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"198.19.0.0/24", "2001:db8:19::/112"}}}))
	snap := st.Snapshot()
	dual := ruleset.Config{
		MasqueradeAll: true, RestrictExternalIPs: true, ComputeHints: true,
		ClusterCIDRs:       prefixes("198.18.64.0/18", "2001:db8:64::/64"),
		AllowedExternalIPs: prefixes("2001:db8:2::/64", "198.19.2.0/24"),
		NodePortAddresses:  addrs("2001:db8::2", "198.18.0.2"),
		ServiceCIDRs:       prefixes("198.19.0.0/24", "198.19.128.0/24", "2001:db8:19::/112"),
	}
	for _, tt := range []struct {
		name   string
		base   ruleset.Config
		family v1.IPFamily
		want   ruleset.Config
	}{
		{"IPv4 of a dual-stack base", dual, v1.IPv4Protocol, ruleset.Config{
			Family: v1.IPv4Protocol, Node: topology.Node{Name: "n1", Zone: "z"},
			MasqueradeAll: true, RestrictExternalIPs: true, ComputeHints: true,
			ClusterCIDRs: prefixes("198.18.64.0/18"), AllowedExternalIPs: prefixes("198.19.2.0/24"),
			NodePortAddresses: addrs("198.18.0.2"), ServiceCIDRs: prefixes("198.19.0.0/24", "198.19.128.0/24"),
		}},
		{"IPv6 of a dual-stack base", dual, v1.IPv6Protocol, ruleset.Config{
			Family: v1.IPv6Protocol, Node: topology.Node{Name: "n1", Zone: "z"},
			MasqueradeAll: true, RestrictExternalIPs: true, ComputeHints: true,
			ClusterCIDRs: prefixes("2001:db8:64::/64"), AllowedExternalIPs: prefixes("2001:db8:2::/64"),
			NodePortAddresses: addrs("2001:db8::2"), ServiceCIDRs: prefixes("2001:db8:19::/112"),
		}},
		{"no node port addresses: the Node's", ruleset.Config{}, v1.IPv6Protocol, ruleset.Config{
			Family: v1.IPv6Protocol, Node: topology.Node{Name: "n1", Zone: "z"},
			NodePortAddresses: addrs("2001:db8::1"), ServiceCIDRs: prefixes("2001:db8:19::/112"),
		}},
		{"node port addresses of the other family only: none", ruleset.Config{NodePortAddresses: addrs("198.18.0.2")}, v1.IPv6Protocol, ruleset.Config{
			Family: v1.IPv6Protocol, Node: topology.Node{Name: "n1", Zone: "z"}, ServiceCIDRs: prefixes("2001:db8:19::/112"),
		}},
	} {
		fam, _ := snap.Family(tt.family)
		config, err := state.ConfigFrom(tt.base)
		if err != nil {
			t.Fatalf("%s: ConfigFrom: %v", tt.name, err)
		}
		got, err := config(snap, fam)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, got, serviceOpts); diff != "" {
			t.Errorf("%s: Config (-want +got):\n%s", tt.name, diff)
		}
	}
	if diff := cmp.Diff(addrs("2001:db8::2", "198.18.0.2"), dual.NodePortAddresses, serviceOpts); diff != "" {
		t.Errorf("ConfigFrom changed its base (-before +after):\n%s", diff)
	}
}

func newBuilder(t *testing.T, config state.ConfigFunc) *state.Builder {
	t.Helper()
	b, err := state.NewBuilder(config)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigFromChecksBase: a base Config that no family's Config could
// be is refused at once, as a configuration error.
func TestConfigFromChecksBase(t *testing.T) {
	for _, base := range []ruleset.Config{
		{MasqueradeMark: 3},
		{ClusterCIDRs: []netip.Prefix{{}}},
		{NodePortAddresses: []netip.Addr{netip.MustParseAddr("fe80::1%eth0")}},
	} {
		if _, err := state.ConfigFrom(base); !errors.Is(err, ruleset.ErrConfig) {
			t.Errorf("ConfigFrom(%+v): error %v, want one that wraps ruleset.ErrConfig", base, err)
		}
	}
}

// TestBuilderNotMade: a nil or zero Builder, or one without a ConfigFunc,
// is an error, not a panic.
func TestBuilderNotMade(t *testing.T) {
	if _, err := state.NewBuilder(nil); err == nil {
		t.Error("NewBuilder(nil): no error")
	}
	for _, b := range []*state.Builder{nil, {}} {
		if _, err := b.Build(state.Snapshot{}); err == nil {
			t.Errorf("Build on %#v: no error", b)
		}
	}
}
