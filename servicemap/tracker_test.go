package servicemap_test

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

func pn(ns, name, port string, proto v1.Protocol) servicemap.PortName {
	return servicemap.PortName{Namespace: ns, Name: name, Port: port, Protocol: proto}
}

// event is one call on a Tracker: an Update of svc, or a Delete of ns/name
// when svc is nil.
type event struct {
	svc      *v1.Service
	ns, name string
	// warns is what the one warning of an update says, if it warns.
	warns string
}

func upd(svc *v1.Service) event { return event{svc: svc} }

// updWarns is an update that warns once, saying warns.
func updWarns(svc *v1.Service, warns string) event { return event{svc: svc, warns: warns} }
func del(ns, name string) event                    { return event{ns: ns, name: name} }

// apply feeds evs to tr, failing t on a warning the event does not expect.
func apply(t *testing.T, tr *servicemap.Tracker, evs ...event) {
	t.Helper()
	for _, ev := range evs {
		if ev.svc != nil {
			_, ws := tr.Update(ev.svc)
			if ev.warns == "" {
				warnings.None(t, ws)
			} else if len(ws) != 1 || !strings.Contains(ws[0].Reason, ev.warns) {
				t.Fatalf("warnings %v, want one saying %q", ws, ev.warns)
			}
		} else {
			tr.Delete(ev.ns, ev.name)
		}
	}
}

func TestTrackerChanges(t *testing.T) {
	web := service()
	web2 := service(ports(
		v1.ServicePort{Name: "http", Port: 80},
		v1.ServicePort{Name: "https", Port: 443},
	))
	webMoved := service(ports(v1.ServicePort{Name: "http", Port: 8080}))
	dns := service(named("kube-system", "dns"), clusterIPs("10.96.0.53"), ports(
		v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
		v1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP},
	))
	other := service(named("a", "other"), clusterIPs("10.96.0.99"))
	elsewhere := service(labels(servicemap.LabelServiceProxyName, "someone-else"))
	webHTTP := pn("ns", "web", "http", v1.ProtocolTCP)
	webHTTPS := pn("ns", "web", "https", v1.ProtocolTCP)
	dnsUDP := pn("kube-system", "dns", "dns", v1.ProtocolUDP)
	dnsTCP := pn("kube-system", "dns", "dns-tcp", v1.ProtocolTCP)
	otherPort := pn("a", "other", "http", v1.ProtocolTCP)

	for _, tc := range []struct {
		name         string
		before       []event // applied, then a Snapshot taken
		events       []event
		wantPending  int
		want         servicemap.Changes
		wantPorts    []servicemap.PortName
		wantSnapshot int // Len
	}{{
		name:        "adds, Added sorted by PortName",
		events:      []event{upd(web2), upd(dns), upd(other)},
		wantPending: 3,
		want:        servicemap.Changes{Added: []servicemap.PortName{otherPort, dnsUDP, dnsTCP, webHTTP, webHTTPS}},
		wantPorts:   []servicemap.PortName{otherPort, dnsUDP, dnsTCP, webHTTP, webHTTPS},
	}, {
		name:        "update adding a port",
		before:      []event{upd(web), upd(dns)},
		events:      []event{upd(web2)},
		wantPending: 1,
		want:        servicemap.Changes{Added: []servicemap.PortName{webHTTPS}},
		wantPorts:   []servicemap.PortName{dnsUDP, dnsTCP, webHTTP, webHTTPS},
	}, {
		name:        "update removing a port",
		before:      []event{upd(web2)},
		events:      []event{upd(web)},
		wantPending: 1,
		want:        servicemap.Changes{Removed: []servicemap.PortName{webHTTPS}},
		wantPorts:   []servicemap.PortName{webHTTP},
	}, {
		name:        "update changing a port",
		before:      []event{upd(web2)},
		events:      []event{upd(webMoved)},
		wantPending: 1,
		want:        servicemap.Changes{Changed: []servicemap.PortName{webHTTP}, Removed: []servicemap.PortName{webHTTPS}},
		wantPorts:   []servicemap.PortName{webHTTP},
	}, {
		name:   "several updates of one Service count once and only the last state matters",
		before: []event{upd(web)},
		events: []event{upd(web2), upd(webMoved), upd(web2)},
		// web → web2: http unchanged, https added.
		wantPending: 1,
		want:        servicemap.Changes{Added: []servicemap.PortName{webHTTPS}},
		wantPorts:   []servicemap.PortName{webHTTP, webHTTPS},
	}, {
		name:        "update with an identical object",
		before:      []event{upd(web), upd(dns)},
		events:      []event{upd(service()), upd(dns)},
		wantPending: 0,
		want:        servicemap.Changes{},
		wantPorts:   []servicemap.PortName{dnsUDP, dnsTCP, webHTTP},
	}, {
		name:        "update and back again",
		before:      []event{upd(web)},
		events:      []event{upd(webMoved), upd(web)},
		wantPending: 0,
		want:        servicemap.Changes{},
		wantPorts:   []servicemap.PortName{webHTTP},
	}, {
		name:        "delete",
		before:      []event{upd(web2), upd(dns)},
		events:      []event{del("ns", "web")},
		wantPending: 1,
		want:        servicemap.Changes{Removed: []servicemap.PortName{webHTTP, webHTTPS}},
		wantPorts:   []servicemap.PortName{dnsUDP, dnsTCP},
	}, {
		name:        "delete of an unknown Service",
		before:      []event{upd(web)},
		events:      []event{del("ns", "nope"), del("nope", "web")},
		wantPending: 0,
		want:        servicemap.Changes{},
		wantPorts:   []servicemap.PortName{webHTTP},
	}, {
		name:        "delete twice",
		before:      []event{upd(web)},
		events:      []event{del("ns", "web"), del("ns", "web")},
		wantPending: 1,
		want:        servicemap.Changes{Removed: []servicemap.PortName{webHTTP}},
	}, {
		name:        "add then delete before a Snapshot",
		before:      []event{upd(dns)},
		events:      []event{upd(web), del("ns", "web")},
		wantPending: 0,
		want:        servicemap.Changes{},
		wantPorts:   []servicemap.PortName{dnsUDP, dnsTCP},
	}, {
		name:        "delete then re-add changed",
		before:      []event{upd(web2)},
		events:      []event{del("ns", "web"), upd(webMoved)},
		wantPending: 1,
		want:        servicemap.Changes{Changed: []servicemap.PortName{webHTTP}, Removed: []servicemap.PortName{webHTTPS}},
		wantPorts:   []servicemap.PortName{webHTTP},
	}, {
		name:        "update that makes the Service skipped removes its ports",
		before:      []event{upd(web2), upd(dns)},
		events:      []event{upd(elsewhere)},
		wantPending: 1,
		want:        servicemap.Changes{Removed: []servicemap.PortName{webHTTP, webHTTPS}},
		wantPorts:   []servicemap.PortName{dnsUDP, dnsTCP},
	}, {
		name:        "update that makes the Service malformed removes its ports",
		before:      []event{upd(web)},
		events:      []event{updWarns(service(clusterIPs("10.96.0.300")), `invalid cluster IP "10.96.0.300"`)},
		wantPending: 1,
		want:        servicemap.Changes{Removed: []servicemap.PortName{webHTTP}},
	}, {
		name:        "update that makes a skipped Service proxied adds its ports",
		before:      []event{upd(elsewhere)},
		events:      []event{upd(web)},
		wantPending: 1,
		want:        servicemap.Changes{Added: []servicemap.PortName{webHTTP}},
		wantPorts:   []servicemap.PortName{webHTTP},
	}, {
		name:        "a skipped Service that stays skipped",
		before:      []event{upd(elsewhere)},
		events:      []event{upd(service(ofType(v1.ServiceTypeExternalName)))},
		wantPending: 0,
		want:        servicemap.Changes{},
	}, {
		name:   "Service changing type from ClusterIP to NodePort",
		before: []event{upd(web)},
		events: []event{upd(service(ofType(v1.ServiceTypeNodePort),
			ports(v1.ServicePort{Name: "http", Port: 80, NodePort: 30080})))},
		wantPending: 1,
		want:        servicemap.Changes{Changed: []servicemap.PortName{webHTTP}},
		wantPorts:   []servicemap.PortName{webHTTP},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
			apply(t, tr, tc.before...)
			tr.Snapshot()
			if p := tr.Pending(); p != 0 {
				t.Errorf("Pending after Snapshot = %d, want 0", p)
			}
			apply(t, tr, tc.events...)
			if p := tr.Pending(); p != tc.wantPending {
				t.Errorf("Pending = %d, want %d", p, tc.wantPending)
			}
			snap, ch := tr.Snapshot()
			if diff := cmp.Diff(tc.want, ch); diff != "" {
				t.Errorf("Changes (-want +got):\n%s", diff)
			}
			if ch.Empty() != (len(ch.Added)+len(ch.Changed)+len(ch.Removed) == 0) {
				t.Errorf("Empty() = %v for %+v", ch.Empty(), ch)
			}
			if diff := cmp.Diff(tc.wantPorts, portNames(snap.Ports())); diff != "" {
				t.Errorf("Snapshot ports (-want +got):\n%s", diff)
			}
			if snap.Len() != len(tc.wantPorts) {
				t.Errorf("Len = %d, want %d", snap.Len(), len(tc.wantPorts))
			}
			if _, again := tr.Snapshot(); !again.Empty() {
				t.Errorf("second Snapshot reports changes %+v", again)
			}
		})
	}
}

func TestTrackerSnapshotGetAndService(t *testing.T) {
	must := warnings.Must(t)
	tr := servicemap.NewTracker(v1.IPv6Protocol, servicemap.Filter{})
	must.Used(tr.Update(service(clusterIPs("10.96.0.10", "fd00::10"), ports(
		v1.ServicePort{Name: "https", Port: 443},
		v1.ServicePort{Name: "http", Port: 80},
	))))
	must.Skipped(tr.Update(service(named("ns", "v4only"))))
	snap, ch := tr.Snapshot()
	want := []servicemap.ServicePort{
		port(func(sp *servicemap.ServicePort) { sp.Family, sp.ClusterIP = v1.IPv6Protocol, addrs("fd00::10")[0] }),
		port(func(sp *servicemap.ServicePort) {
			sp.Family, sp.ClusterIP = v1.IPv6Protocol, addrs("fd00::10")[0]
			sp.Name.Port, sp.Port = "https", 443
		}),
	}
	if diff := cmp.Diff(want, snap.Service("ns", "web"), cmpOpts); diff != "" {
		t.Errorf("Service (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, snap.Ports(), cmpOpts); diff != "" {
		t.Errorf("Ports (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(portNames(want), ch.Added); diff != "" {
		t.Errorf("Added (-want +got):\n%s", diff)
	}
	got, ok := snap.Get(want[1].Name)
	if !ok {
		t.Fatalf("Get(%v) found nothing", want[1].Name)
	}
	if diff := cmp.Diff(want[1], got, cmpOpts); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	for _, missing := range []servicemap.PortName{
		pn("ns", "web", "https", v1.ProtocolUDP),
		pn("ns", "web", "ftp", v1.ProtocolTCP),
		pn("ns", "v4only", "http", v1.ProtocolTCP),
		pn("other", "web", "http", v1.ProtocolTCP),
	} {
		if sp, ok := snap.Get(missing); ok {
			t.Errorf("Get(%v) = %+v, want nothing", missing, sp)
		}
	}
	if s := snap.Service("ns", "v4only"); s != nil {
		t.Errorf("Service(v4only) = %+v in the IPv6 tracker", s)
	}
}

func TestTrackerSnapshotImmutable(t *testing.T) {
	must := warnings.Must(t)
	tr := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	var all []*v1.Service
	for i := range 300 {
		svc := service(named("ns", "svc-"+strconv.Itoa(i)), clusterIPs("10.96.1."+strconv.Itoa(i%250)))
		all = append(all, svc)
		must.Used(tr.Update(svc))
	}
	old, _ := tr.Snapshot()
	oldPorts := old.Ports()
	if old.Len() != 300 || len(oldPorts) != 300 {
		t.Fatalf("Len = %d, Ports = %d, want 300", old.Len(), len(oldPorts))
	}

	// Change, delete and add after the Snapshot.
	must.Used(tr.Update(service(named("ns", "svc-1"), clusterIPs("10.96.1.1"), ports(v1.ServicePort{Name: "http", Port: 8080}))))
	tr.Delete("ns", "svc-2")
	must.Used(tr.Update(service(named("ns", "new"), clusterIPs("10.96.2.1"))))
	must.Skipped(tr.Update(service(named("ns", "svc-3"), labels(servicemap.LabelServiceProxyName, "x"))))
	cur, ch := tr.Snapshot()
	want := servicemap.Changes{
		Added:   []servicemap.PortName{pn("ns", "new", "http", v1.ProtocolTCP)},
		Changed: []servicemap.PortName{pn("ns", "svc-1", "http", v1.ProtocolTCP)},
		Removed: []servicemap.PortName{pn("ns", "svc-2", "http", v1.ProtocolTCP), pn("ns", "svc-3", "http", v1.ProtocolTCP)},
	}
	if diff := cmp.Diff(want, ch); diff != "" {
		t.Errorf("Changes (-want +got):\n%s", diff)
	}
	if cur.Len() != 299 {
		t.Errorf("new Len = %d, want 299", cur.Len())
	}

	if old.Len() != 300 {
		t.Errorf("old Snapshot Len changed to %d", old.Len())
	}
	if diff := cmp.Diff(oldPorts, old.Ports(), cmpOpts); diff != "" {
		t.Errorf("old Snapshot changed (-before +after):\n%s", diff)
	}
	if sp, ok := old.Get(pn("ns", "svc-1", "http", v1.ProtocolTCP)); !ok || sp.Port != 80 {
		t.Errorf("old Snapshot Get(svc-1) = %+v, %v; want port 80", sp, ok)
	}
	if _, ok := old.Get(pn("ns", "svc-2", "http", v1.ProtocolTCP)); !ok {
		t.Errorf("old Snapshot lost svc-2")
	}
	if _, ok := old.Get(pn("ns", "new", "http", v1.ProtocolTCP)); ok {
		t.Errorf("old Snapshot gained a later Service")
	}
	// Modifying a Service object after Update must not reach the tracker.
	all[10].Spec.Ports[0].Port = 9999
	if sp, _ := cur.Get(pn("ns", "svc-10", "http", v1.ProtocolTCP)); sp.Port != 80 {
		t.Errorf("Snapshot follows later edits of the Service object: port %d", sp.Port)
	}
}

// All yields every port in PortName order also when the Services are
// sorted in ranges on several goroutines: names that share their first 16
// bytes, or differ only after them, in namespaces likewise.
func TestSnapshotAllOrderOfMany(t *testing.T) {
	must := warnings.Must(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	tr := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	const n = 9000
	for i := range n {
		ns := fmt.Sprintf("team-%d-namespace-%d", i%7, (i*7919)%13)
		name := fmt.Sprintf("service-%03d-%d", (i*104729)%997, i)
		must.Used(tr.Update(service(named(ns, name))))
	}
	snap, _ := tr.Snapshot()
	var names []servicemap.PortName
	for sp := range snap.All() {
		names = append(names, sp.Name)
	}
	if len(names) != n {
		t.Fatalf("All yields %d ports, want %d", len(names), n)
	}
	for i := 1; i < n; i++ {
		if names[i-1].Compare(names[i]) >= 0 {
			t.Fatalf("All yields %v before %v", names[i-1], names[i])
		}
	}
}

// All yields the ports in PortName order, whatever the order the Services
// came in, and stops when the loop does.
func TestSnapshotAllOrderAndStop(t *testing.T) {
	must := warnings.Must(t)
	tr := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for _, name := range []string{"c", "a", "b"} {
		must.Used(tr.Update(service(named("ns", name))))
	}
	must.Used(tr.Update(service(named("kube-system", "dns"))))
	snap, _ := tr.Snapshot()
	var names []servicemap.PortName
	for sp := range snap.All() {
		names = append(names, sp.Name)
	}
	want := []servicemap.PortName{
		pn("kube-system", "dns", "http", v1.ProtocolTCP),
		pn("ns", "a", "http", v1.ProtocolTCP),
		pn("ns", "b", "http", v1.ProtocolTCP),
		pn("ns", "c", "http", v1.ProtocolTCP),
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("All (-want +got):\n%s", diff)
	}
	names = nil
	for sp := range snap.All() {
		names = append(names, sp.Name)
		if len(names) == 2 {
			break
		}
	}
	if diff := cmp.Diff(want[:2], names); diff != "" {
		t.Errorf("All after a break at 2 (-want +got):\n%s", diff)
	}
}

func TestTrackerFilterAndFamily(t *testing.T) {
	must := warnings.Must(t)
	mine := service(labels(servicemap.LabelServiceProxyName, "mine"))
	plain := service(named("ns", "plain"))
	v4 := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{ProxyName: "mine"})
	v6 := servicemap.NewTracker(v1.IPv6Protocol, servicemap.Filter{ProxyName: "mine"})
	dual := service(named("ns", "dual"), clusterIPs("fd00::1", "10.96.0.1"), labels(servicemap.LabelServiceProxyName, "mine"))
	for _, tr := range []*servicemap.Tracker{v4, v6} {
		skipped, warnings := tr.Update(plain)
		if skipped == "" || len(warnings) != 0 {
			t.Errorf("Update(unlabelled) = %q, %v; want skipped without warning", skipped, warnings)
		}
		must.Used(tr.Update(dual))
	}
	must.Used(v4.Update(mine))
	must.Skipped(v6.Update(mine)) // no IPv6 cluster IP
	s4, _ := v4.Snapshot()
	s6, _ := v6.Snapshot()
	if diff := cmp.Diff([]servicemap.PortName{pn("ns", "dual", "http", v1.ProtocolTCP), pn("ns", "web", "http", v1.ProtocolTCP)}, portNames(s4.Ports())); diff != "" {
		t.Errorf("IPv4 ports (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]servicemap.PortName{pn("ns", "dual", "http", v1.ProtocolTCP)}, portNames(s6.Ports())); diff != "" {
		t.Errorf("IPv6 ports (-want +got):\n%s", diff)
	}
	if sp, _ := s4.Get(pn("ns", "dual", "http", v1.ProtocolTCP)); sp.ClusterIP != addrs("10.96.0.1")[0] || sp.Family != v1.IPv4Protocol {
		t.Errorf("IPv4 dual-stack port = %+v", sp)
	}
	if sp, _ := s6.Get(pn("ns", "dual", "http", v1.ProtocolTCP)); sp.ClusterIP != addrs("fd00::1")[0] || sp.Family != v1.IPv6Protocol {
		t.Errorf("IPv6 dual-stack port = %+v", sp)
	}
}

func TestTrackerUpdateReturnsSkipAndWarnings(t *testing.T) {
	tr := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	if skipped, w := tr.Update(nil); skipped == "" || w != nil {
		t.Errorf("Update(nil) = %q, %v", skipped, w)
	}
	svc := service(func(s *v1.Service) { s.Spec.ExternalIPs = []string{"nope"} })
	skipped, w := tr.Update(svc)
	if skipped != "" {
		t.Errorf("skipped = %q", skipped)
	}
	checkWarnings(t, svc, w, []string{`"nope"`})
	if tr.Pending() != 1 {
		t.Errorf("Pending = %d, want 1", tr.Pending())
	}
}
