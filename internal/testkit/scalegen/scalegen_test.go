package scalegen_test

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
)

func TestDeterministic(t *testing.T) {
	s := scalegen.Spec{Services: 300}
	a1, b1 := s.Objects()
	a2, b2 := s.Objects()
	if !reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(b1, b2) {
		t.Fatal("two calls gave different objects")
	}
}

func TestShape(t *testing.T) {
	for _, c := range []struct {
		spec     scalegen.Spec
		services netip.Prefix
	}{
		{scalegen.Spec{Services: 1000}, scalegen.ServiceCIDR},
		{scalegen.Spec{Services: 1000, IPv6: true}, scalegen.ServiceCIDR6},
	} {
		t.Run(string(c.spec.Family()), func(t *testing.T) { testShape(t, c.spec, c.services) })
	}
}

func testShape(t *testing.T, s scalegen.Spec, services netip.Prefix) {
	svcs, slices := s.Objects()
	count := map[string]int{}
	for i, svc := range svcs {
		if svc.Namespace != scalegen.Namespace(i) || svc.Name != scalegen.Name(i) {
			t.Fatalf("Service %d is %s/%s", i, svc.Namespace, svc.Name)
		}
		if i > 0 && !(svcs[i-1].Namespace+"/"+svcs[i-1].Name < svc.Namespace+"/"+svc.Name) {
			t.Fatalf("Service %d does not sort after Service %d", i, i-1)
		}
		count[string(svc.Spec.Type)]++
		if svc.Spec.Ports[0].Protocol == v1.ProtocolUDP {
			count["UDP"]++
		}
		if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
			count["eTP Local"]++
		}
		if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
			count["affinity"]++
		}
		if len(svc.Spec.LoadBalancerSourceRanges) > 0 {
			count["source ranges"]++
		}
		ip := netip.MustParseAddr(svc.Spec.ClusterIP)
		if !services.Contains(ip) || ip != s.ClusterIP(i) || svc.Spec.IPFamilies[0] != s.Family() {
			t.Errorf("Service %d: cluster IP %v, families %v", i, ip, svc.Spec.IPFamilies)
		}
		for _, ext := range append(svc.Spec.ExternalIPs, lbIPs(svc)...) {
			if a := netip.MustParseAddr(ext); !services.Contains(a) || a != s.ExternalIP(i) {
				t.Errorf("Service %d: external IP %v", i, a)
			}
		}
		seen := map[string]bool{}
		if string(slices[i].AddressType) != string(s.Family()) {
			t.Errorf("Service %d: slice of address type %s", i, slices[i].AddressType)
		}
		for _, ep := range slices[i].Endpoints {
			a := netip.MustParseAddr(ep.Addresses[0])
			if !s.ClusterCIDR().Contains(a) || seen[a.String()] {
				t.Errorf("Service %d: endpoint %v out of the pod network or repeated", i, a)
			}
			seen[a.String()] = true
		}
		if len(slices[i].Endpoints) != scalegen.DefaultEndpoints {
			t.Errorf("Service %d: %d endpoints", i, len(slices[i].Endpoints))
		}
	}
	want := map[string]int{
		"ClusterIP": 860, "NodePort": 110, "LoadBalancer": 30,
		"UDP": 100, "eTP Local": 30, "affinity": 20, "source ranges": 20,
	}
	if !reflect.DeepEqual(count, want) {
		t.Errorf("mix %v, want %v", count, want)
	}
}

func lbIPs(svc *v1.Service) []string {
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	return ips
}

// TestAddressRanges: an IPv6 cluster's cluster and external IPs stay
// inside ServiceCIDR6 and apart up to MaxServices6, and its pods inside
// ClusterCIDR6.
func TestAddressRanges(t *testing.T) {
	s := scalegen.Spec{Services: scalegen.MaxServices6, IPv6: true}
	last := scalegen.MaxServices6 - 1
	for _, a := range []netip.Addr{s.ClusterIP(0), s.ClusterIP(last), s.ExternalIP(0), s.ExternalIP(last)} {
		if !scalegen.ServiceCIDR6.Contains(a) {
			t.Errorf("%v outside %v", a, scalegen.ServiceCIDR6)
		}
	}
	if s.ClusterIP(last).Compare(s.ExternalIP(0)) >= 0 {
		t.Errorf("cluster IP %v not below external IP %v", s.ClusterIP(last), s.ExternalIP(0))
	}
	for _, v := range []int{0, 1, 2047} {
		for _, ep := range s.ChangedSlice(last, v).Endpoints {
			if a := netip.MustParseAddr(ep.Addresses[0]); !scalegen.ClusterCIDR6.Contains(a) {
				t.Errorf("version %d: endpoint %v outside %v", v, a, scalegen.ClusterCIDR6)
			}
		}
	}
}

// TestBuildsCleanly feeds the largest clusters the benchmarks use (IPv6:
// past IPv4's MaxServices) through the trackers (which panic on any
// warning) and builds them without warnings.
func TestBuildsCleanly(t *testing.T) {
	for _, c := range []struct {
		spec  scalegen.Spec
		short int
	}{
		{scalegen.Spec{Services: 30000}, 2000},
		{scalegen.Spec{Services: scalegen.MaxServices + 1000, IPv6: true}, 2000},
	} {
		if testing.Short() {
			c.spec.Services = c.short
		}
		t.Run(string(c.spec.Family()), func(t *testing.T) { testBuildsCleanly(t, c.spec) })
	}
}

func testBuildsCleanly(t *testing.T, s scalegen.Spec) {
	must := warnings.Must(t)
	n := s.Services
	ss, es := scaleworld.Snapshots(s)
	if ss.Len() != n {
		t.Fatalf("%d ServicePorts, want %d", ss.Len(), n)
	}
	b, err := ruleset.NewBuilder(scaleworld.ConfigFor(s))
	if err != nil {
		t.Fatal(err)
	}
	rs, warnings := b.Build(ss, es)
	if len(warnings) > 0 {
		t.Fatalf("warnings: %v", warnings[:min(5, len(warnings))])
	}
	routes := map[string]int{}
	targets := 0
	for _, svc := range rs.Services() {
		routes["internal "+svc.Internal.String()]++
		routes["external "+svc.External.String()]++
		targets += len(svc.ClusterTargets)
	}
	if len(rs.Services()) != n || targets < n*9 {
		t.Fatalf("%d Services, %d cluster targets", len(rs.Services()), targets)
	}
	for _, r := range []string{"internal " + ruleset.RouteLocal.String(), "internal " + ruleset.RouteDrop.String(),
		"external " + ruleset.RouteLocal.String(), "external " + ruleset.RouteDrop.String(), "external " + ruleset.RouteCluster.String()} {
		if routes[r] == 0 {
			t.Errorf("no Service with %s (%v)", r, routes)
		}
	}
	i := n / 2
	for _, v := range []int{1, 2} {
		a, c := s.Slice(i), s.ChangedSlice(i, v)
		diff := 0
		for j := range a.Endpoints {
			if a.Endpoints[j].Addresses[0] != c.Endpoints[j].Addresses[0] {
				diff++
			}
		}
		if diff != 1 {
			t.Errorf("version %d changes %d endpoints, want 1", v, diff)
		}
	}
	svcs, eps := scaleworld.Trackers(s)
	must.Used(eps.Update(s.ChangedSlice(i, 1)))
	ss2, _ := svcs.Snapshot()
	es2, _ := eps.Snapshot()
	rs2, ws := b.Build(ss2, es2)
	must.None(ws)
	ch := ruleset.Diff(rs, rs2)
	if len(ch.Changed) != 1 || ch.Changed[0] != s.PortName(i) || len(ch.Added)+len(ch.Removed) != 0 {
		t.Errorf("Diff after ChangedSlice(%d): %+v", i, ch)
	}
}

func TestProbe(t *testing.T) {
	pods := []netip.Addr{netip.MustParseAddr("198.18.64.2"), netip.MustParseAddr("198.18.65.2")}
	s := scalegen.Spec{Services: 150, ProbePods: pods}
	for _, i := range []int{0, 149} {
		fe, proto := s.Frontend(i)
		if fe != netip.AddrPortFrom(scalegen.ClusterIP(i), 80) || proto != v1.ProtocolTCP {
			t.Errorf("probe %d: %v %v", i, fe, proto)
		}
		sl := s.Slice(i)
		if len(sl.Endpoints) != 2 || sl.Endpoints[1].Addresses[0] != "198.18.65.2" || *sl.Endpoints[0].NodeName != scalegen.NodeName {
			t.Errorf("probe %d: %+v", i, sl.Endpoints)
		}
	}
	ss, es := scaleworld.Snapshots(s)
	b, _ := ruleset.NewBuilder(scaleworld.Config())
	rs, w := b.Build(ss, es)
	if len(w) > 0 {
		t.Fatal(w)
	}
	svc, ok := rs.Service(s.PortName(149))
	if !ok || len(svc.ClusterTargets) != 2 {
		t.Fatalf("probe Service %v %+v", ok, svc)
	}
}

func TestTooMany(t *testing.T) {
	for _, s := range []scalegen.Spec{{Services: scalegen.MaxServices + 1}, {Services: scalegen.MaxServices6 + 1, IPv6: true}} {
		t.Run(string(s.Family()), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic beyond %d Services", s.Max())
				}
			}()
			scaleworld.Trackers(s)
		})
	}
}

func TestWorld(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprint("incremental=", incremental), func(t *testing.T) { testWorld(t, incremental) })
	}
}

func testWorld(t *testing.T, incremental bool) {
	w := scaleworld.New(scalegen.Spec{Services: 500, ProbePods: []netip.Addr{netip.MustParseAddr("198.18.64.2")}})
	w.Incremental = incremental
	before := w.Ruleset
	after := w.ChangeEndpoints(250, 1)
	if ch := ruleset.Diff(before, after); len(ch.Changed) != 1 || len(ch.Added)+len(ch.Removed) != 0 {
		t.Errorf("ChangeEndpoints: %+v", ch)
	}
	added := w.AddService()
	if ch := ruleset.Diff(after, added); len(ch.Added) != 1 || ch.Added[0] != w.Spec.PortName(500) || w.Added != 1 || len(ch.Changed)+len(ch.Removed) != 0 {
		t.Errorf("AddService: %+v", ch)
	}
	if full := w.Build(); !ruleset.Diff(full, added).Empty() {
		t.Errorf("the Ruleset after the changes differs from Build's: %+v", ruleset.Diff(full, added))
	}
	removed := w.RemoveAdded()
	if ch := ruleset.Diff(added, removed); len(ch.Removed) != 1 || ch.Removed[0] != w.Spec.PortName(500) || w.Added != 0 || len(ch.Changed)+len(ch.Added) != 0 {
		t.Errorf("RemoveAdded: %+v", ch)
	}
	if !ruleset.Diff(after, removed).Empty() {
		t.Errorf("after RemoveAdded the Ruleset differs from the one before AddService: %+v", ruleset.Diff(after, removed))
	}
}
