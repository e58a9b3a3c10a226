package state_test

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
	"github.com/svcproxy/svcproxy/topology"
)

func TestNew(t *testing.T) {
	for _, tt := range []struct {
		families []v1.IPFamily
		want     []v1.IPFamily
		err      bool
	}{
		{families: []v1.IPFamily{v4}, want: []v1.IPFamily{v4}},
		{families: []v1.IPFamily{v6}, want: []v1.IPFamily{v6}},
		{families: []v1.IPFamily{v6, v4}, want: []v1.IPFamily{v4, v6}},
		{families: nil, err: true},
		{families: []v1.IPFamily{v4, v4}, err: true},
		{families: []v1.IPFamily{"IPv5"}, err: true},
	} {
		s, err := state.New(tt.families, "n1", servicemap.Filter{ProxyName: "x"})
		if (err != nil) != tt.err {
			t.Errorf("New(%v): error %v, want error %v", tt.families, err, tt.err)
			continue
		}
		if err != nil {
			continue
		}
		if diff := cmp.Diff(tt.want, s.Families()); diff != "" {
			t.Errorf("New(%v): Families (-want +got):\n%s", tt.families, diff)
		}
		if s.NodeName() != "n1" || s.Filter().ProxyName != "x" {
			t.Errorf("New(%v): node %q, filter %+v", tt.families, s.NodeName(), s.Filter())
		}
	}
}

// TestNewRefusesBadProxyName: a proxy name that no label can carry is an
// error of New, not of a later source.Watch.
func TestNewRefusesBadProxyName(t *testing.T) {
	if _, err := state.New([]v1.IPFamily{v4}, "n1", servicemap.Filter{ProxyName: "not a label value!"}); err == nil {
		t.Error("New with an invalid proxy name: no error")
	}
}

// TestWarningsOnce: a dual-stack object is converted once per family, and
// each of its warnings comes once; a warning that persists over later
// events of the object is not repeated, and comes again once it went away
// or the object was deleted.
func TestWarningsOnce(t *testing.T) {
	s := newState(t, dualStack...)
	badIP := `Service ns/web: invalid externalIP "bogus" dropped`
	badIP2 := `Service ns/web: invalid externalIP "bogus2" dropped`
	badSlice := `EndpointSlice ns/web-1: endpoint 1: invalid address "bogus": skipped`
	zoned := `Node n1: InternalIP address "fe80::1%eth0" has a zone: skipped`
	badCIDR := `ServiceCIDR c: CIDR "x" is not a prefix: skipped`
	noNode := `Node n1: no Node of this name among the objects: the node has no zone and no addresses`
	for _, step := range []struct {
		name  string
		event func() []svcproxy.Warning
		want  []string
	}{
		{"dual-stack Service", func() []svcproxy.Warning { return s.UpdateService(service("web", dualIPs, "bogus")) }, []string{badIP}},
		{"same again", func() []svcproxy.Warning { return s.UpdateService(service("web", dualIPs, "bogus")) }, nil},
		{"another bad IP", func() []svcproxy.Warning { return s.UpdateService(service("web", dualIPs, "bogus", "bogus2")) }, []string{badIP2}},
		{"fixed", func() []svcproxy.Warning { return s.UpdateService(service("web", dualIPs)) }, nil},
		{"broken again", func() []svcproxy.Warning { return s.UpdateService(service("web", dualIPs, "bogus")) }, []string{badIP}},
		{"deleted", func() []svcproxy.Warning { s.DeleteService("ns", "web"); return nil }, nil},
		{"back", func() []svcproxy.Warning { return s.UpdateService(service("web", dualIPs, "bogus")) }, []string{badIP}},
		{"replaced by the same", func() []svcproxy.Warning {
			return s.Replace(state.Objects{Services: []*v1.Service{service("web", dualIPs, "bogus")}})
		}, []string{noNode}},
		{"gone from a Replace", func() []svcproxy.Warning { return s.Replace(state.Objects{}) }, nil},
		{"back by Replace", func() []svcproxy.Warning {
			return s.Replace(state.Objects{Services: []*v1.Service{service("web", dualIPs, "bogus")}})
		}, []string{badIP}},
		{"slice", func() []svcproxy.Warning { return s.UpdateSlice(slice("web", "web-1", "198.18.1.1", "bogus")) }, []string{badSlice}},
		{"slice again", func() []svcproxy.Warning { return s.UpdateSlice(slice("web", "web-1", "198.18.1.1", "bogus")) }, nil},
		{"Node", func() []svcproxy.Warning { return s.UpdateNode(node("n1", "z", "fe80::1%eth0", "198.18.0.1")) }, []string{zoned}},
		{"Node again", func() []svcproxy.Warning { return s.UpdateNode(node("n1", "z", "fe80::1%eth0", "198.18.0.1")) }, nil},
		{"Node changed, same bad address", func() []svcproxy.Warning { return s.UpdateNode(node("n1", "z", "fe80::1%eth0")) }, nil},
		{"another Node", func() []svcproxy.Warning { return s.UpdateNode(node("n2", "z", "fe80::2%eth0")) }, nil},
		{"Node deleted", func() []svcproxy.Warning { s.DeleteNode("n1"); return nil }, nil},
		{"Node back", func() []svcproxy.Warning { return s.UpdateNode(node("n1", "z", "fe80::1%eth0")) }, []string{zoned}},
		{"ServiceCIDR", func() []svcproxy.Warning { return s.UpdateServiceCIDR(serviceCIDR("c", "198.19.0.0/16", "x")) }, []string{badCIDR}},
		{"ServiceCIDR again", func() []svcproxy.Warning { return s.UpdateServiceCIDR(serviceCIDR("c", "x")) }, nil},
		{"replaced with the Node", func() []svcproxy.Warning {
			return s.Replace(state.Objects{Nodes: []*v1.Node{node("n2", "z"), node("n1", "z", "198.18.0.1")}})
		}, nil},
		{"replaced with another Node only", func() []svcproxy.Warning {
			return s.Replace(state.Objects{Nodes: []*v1.Node{node("n2", "z")}})
		}, []string{noNode}},
	} {
		if diff := cmp.Diff(step.want, strings(step.event())); diff != "" {
			t.Errorf("%s: warnings (-want +got):\n%s", step.name, diff)
		}
	}
}

// TestSnapshot: each family's part holds the Services and endpoints of its
// family; the node, its addresses and the Service CIDRs are split by
// family; trigger times come in one Snapshot only.
func TestSnapshot(t *testing.T) {
	must := warnings.Must(t)
	s := newState(t, dualStack...)
	must.None(s.UpdateService(service("dual", dualIPs)))
	must.None(s.UpdateService(service("four", []string{"198.19.0.2"})))
	must.None(s.UpdateSlice(slice("dual", "dual-4", "198.18.1.1")))
	must.None(s.UpdateSlice(slice("dual", "dual-6", "2001:db8:18::1", "2001:db8:18::2")))
	es := slice("four", "four-1", "198.18.1.3")
	es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: "2026-12-01T10:00:00Z"}
	must.None(s.UpdateSlice(es))
	must.None(s.UpdateNode(node("n1", "z1", "2001:db8::1", "198.18.0.1")))
	must.None(s.UpdateServiceCIDR(serviceCIDR("a", "198.19.0.0/16", "2001:db8:19::/108")))
	must.None(s.UpdateServiceCIDR(serviceCIDR("b", "198.19.0.0/16", "198.20.0.0/16")))

	snap := s.Snapshot()
	type family struct {
		Family        v1.IPFamily
		Ports         []string
		Endpoints     map[string]int
		NodeAddresses []netip.Addr
		ServiceCIDRs  []netip.Prefix
	}
	var got []family
	for _, fam := range snap.Families() {
		f := family{Family: fam.IPFamily, Endpoints: map[string]int{}, NodeAddresses: fam.NodeAddresses, ServiceCIDRs: fam.ServiceCIDRs}
		for _, sp := range fam.Services.Ports() {
			f.Ports = append(f.Ports, sp.Name.String())
			f.Endpoints[sp.Name.String()] = len(fam.Endpoints.Get(sp.Name))
		}
		got = append(got, f)
	}
	want := []family{
		{v4, []string{"ns/dual:p", "ns/four:p"}, map[string]int{"ns/dual:p": 1, "ns/four:p": 1},
			[]netip.Addr{netip.MustParseAddr("198.18.0.1")}, []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16"), netip.MustParsePrefix("198.20.0.0/16")}},
		{v6, []string{"ns/dual:p"}, map[string]int{"ns/dual:p": 2},
			[]netip.Addr{netip.MustParseAddr("2001:db8::1")}, []netip.Prefix{netip.MustParsePrefix("2001:db8:19::/108")}},
	}
	if diff := cmp.Diff(want, got, addrOpts); diff != "" {
		t.Errorf("families (-want +got):\n%s", diff)
	}
	if want := (topology.Node{Name: "n1", Zone: "z1"}); snap.Node != want {
		t.Errorf("node %+v, want %+v", snap.Node, want)
	}
	wantAddrs := []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("198.18.0.1")}
	if diff := cmp.Diff(wantAddrs, snap.NodeAddresses, addrOpts); diff != "" {
		t.Errorf("node addresses (-want +got):\n%s", diff)
	}
	if len(snap.ServiceCIDRs) != 3 {
		t.Errorf("Service CIDRs %v, want three, each once", snap.ServiceCIDRs)
	}
	wantTimes := []time.Time{time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	if diff := cmp.Diff(wantTimes, snap.TriggerTimes); diff != "" {
		t.Errorf("trigger times (-want +got):\n%s", diff)
	}
	if _, ok := newState(t, v4).Snapshot().Family(v6); ok {
		t.Errorf("an IPv4 State has an IPv6 part")
	}

	again := s.Snapshot()
	if len(again.TriggerTimes) != 0 {
		t.Errorf("trigger times %v handed out twice", again.TriggerTimes)
	}
	s.DeleteNode("n1")
	s.DeleteServiceCIDR("a")
	gone := s.Snapshot()
	if gone.Node != (topology.Node{Name: "n1"}) || gone.NodeAddresses != nil || len(gone.ServiceCIDRs) != 2 {
		t.Errorf("after the Node and ServiceCIDR a were deleted: node %+v, addresses %v, Service CIDRs %v", gone.Node, gone.NodeAddresses, gone.ServiceCIDRs)
	}
	if fam, _ := snap.Family(v4); fam.Services.Len() != 2 {
		t.Errorf("an earlier Snapshot changed: %d IPv4 ports", fam.Services.Len())
	}
}

// TestReplace: Replace keeps what it is given and deletes everything else,
// also what single events added.
func TestReplace(t *testing.T) {
	must := warnings.Must(t)
	s := newState(t, v4)
	must.None(s.UpdateService(service("by-event", []string{"198.19.0.1"})))
	must.None(s.UpdateSlice(slice("by-event", "by-event-1", "198.18.1.1")))
	must.None(s.UpdateServiceCIDR(serviceCIDR("by-event", "198.19.0.0/16")))
	must.None(s.UpdateNode(node("n1", "z1", "198.18.0.1")))
	ws := s.Replace(state.Objects{
		Services:       []*v1.Service{service("kept", []string{"198.19.0.2"}), nil},
		EndpointSlices: []*discovery.EndpointSlice{slice("kept", "kept-1", "198.18.1.2"), nil},
		Nodes:          []*v1.Node{nil, node("n2", "z2", "198.18.0.2")},
		ServiceCIDRs:   []*networkingv1.ServiceCIDR{serviceCIDR("kept", "198.20.0.0/16"), nil},
	})
	warnings.Check(t, "Node", "", "n1", ws, []string{"no Node of this name among the objects"})
	snap := s.Snapshot()
	fam, _ := snap.Family(v4)
	var ports []string
	for _, sp := range fam.Services.Ports() {
		ports = append(ports, fmt.Sprintf("%s %d endpoints", sp.Name, len(fam.Endpoints.Get(sp.Name))))
	}
	if diff := cmp.Diff([]string{"ns/kept:p 1 endpoints"}, ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if got := fam.Endpoints.Get(servicemap.PortName{Namespace: "ns", Name: "by-event", Port: "p", Protocol: v1.ProtocolTCP}); len(got) != 0 {
		t.Errorf("endpoints of the replaced slice kept: %v", got)
	}
	if diff := cmp.Diff([]netip.Prefix{netip.MustParsePrefix("198.20.0.0/16")}, snap.ServiceCIDRs, addrOpts); diff != "" {
		t.Errorf("Service CIDRs (-want +got):\n%s", diff)
	}
	if snap.Node != (topology.Node{Name: "n1"}) || snap.NodeAddresses != nil {
		t.Errorf("the proxy's Node is not in the Replace, yet node %+v, addresses %v", snap.Node, snap.NodeAddresses)
	}
}

// TestPending counts the Services and endpoints changed since the last
// Snapshot.
func TestPending(t *testing.T) {
	must := warnings.Must(t)
	s := newState(t, dualStack...)
	must.None(s.UpdateService(service("a", dualIPs)))
	must.None(s.UpdateService(service("b", []string{"198.19.0.2"})))
	must.None(s.UpdateSlice(slice("a", "a-1", "198.18.1.1")))
	if svcs, eps := s.Pending(); svcs != 2 || eps != 1 {
		t.Errorf("Pending = %d, %d; want 2, 1", svcs, eps)
	}
	s.Snapshot()
	if svcs, eps := s.Pending(); svcs != 0 || eps != 0 {
		t.Errorf("after a Snapshot, Pending = %d, %d; want 0, 0", svcs, eps)
	}
}

// TestConcurrentUse: events and Snapshots from several goroutines (run
// with -race to check the locking).
func TestConcurrentUse(t *testing.T) {
	must := warnings.Must(t)
	s := newState(t, dualStack...)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				name := fmt.Sprintf("s%d-%d", g, i%5)
				must.None(s.UpdateService(service(name, dualIPs)))
				must.None(s.UpdateSlice(slice(name, name+"-1", "198.18.1.1")))
				must.None(s.UpdateNode(node("n1", fmt.Sprint("z", i), "198.18.0.1")))
				if i%3 == 0 {
					s.DeleteService("ns", name)
				}
				s.Snapshot()
				s.Pending()
			}
		}()
	}
	wg.Wait()
	fam, _ := s.Snapshot().Family(v6)
	if fam.Services.Len() != 4*3 { // of each goroutine's five names, two were last deleted (i = 45, 48)
		t.Errorf("%d IPv6 ports after the writers, want 12", fam.Services.Len())
	}
}

// TestZeroState: a nil or zero State records nothing, says so, and gives
// empty Snapshots, without panicking.
func TestZeroState(t *testing.T) {
	for _, s := range []*state.State{nil, {}} {
		if ws := s.UpdateService(service("web", dualIPs)); len(ws) != 1 {
			t.Errorf("UpdateService on %#v: warnings %v, want one", s, ws)
		}
		if ws := s.Replace(state.Objects{Services: []*v1.Service{service("web", dualIPs)}}); len(ws) != 1 {
			t.Errorf("Replace on %#v: warnings %v, want one", s, ws)
		}
		if snap := s.Snapshot(); len(snap.Families()) != 0 || s.Families() != nil {
			t.Errorf("%#v serves families", s)
		}
	}
}
