package endpoints_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

// event is an Update of es, or a Delete of ns/name when es is nil.
type event struct {
	es       *discovery.EndpointSlice
	ns, name string
	// warns is what the one warning of an update says, if it warns.
	warns string
}

func upd(es *discovery.EndpointSlice) event { return event{es: es} }

// updWarns is an update that warns once, saying warns.
func updWarns(es *discovery.EndpointSlice, warns string) event { return event{es: es, warns: warns} }
func del(ns, name string) event                                { return event{ns: ns, name: name} }

// apply feeds evs to tr, failing t on a warning the event does not expect.
func apply(t *testing.T, tr *endpoints.Tracker, evs ...event) {
	t.Helper()
	for _, ev := range evs {
		if ev.es != nil {
			_, ws := tr.Update(ev.es)
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

func udp(mods ...func(*discovery.EndpointSlice)) *discovery.EndpointSlice {
	return slice(append([]func(*discovery.EndpointSlice){
		forService("dns"), sliceName("dns-1"), slicePorts(epPort("dns", 53, v1.ProtocolUDP)),
	}, mods...)...)
}

func sctp(mods ...func(*discovery.EndpointSlice)) *discovery.EndpointSlice {
	return slice(append([]func(*discovery.EndpointSlice){
		forService("sig"), sliceName("sig-1"), slicePorts(epPort("sig", 3868, v1.ProtocolSCTP)),
	}, mods...)...)
}

var (
	dnsUDP = pn("ns", "dns", "dns", v1.ProtocolUDP)
	sigSC  = pn("ns", "sig", "sig", v1.ProtocolSCTP)
)

func TestTrackerChanges(t *testing.T) {
	two := eps(ep("10.0.0.1", nil, nil, nil), ep("10.0.0.2", nil, nil, nil))
	one := eps(ep("10.0.0.1", nil, nil, nil))
	secondTerminating := eps(ep("10.0.0.1", nil, nil, nil), ep("10.0.0.2", no, yes, yes))
	secondGone := eps(ep("10.0.0.1", nil, nil, nil), ep("10.0.0.2", no, no, yes))
	secondNotReady := eps(ep("10.0.0.1", nil, nil, nil), ep("10.0.0.2", no, yes, nil))
	for _, tc := range []struct {
		name        string
		before      []event
		events      []event
		wantPending int
		want        endpoints.Changes
		// wantEndpoints are the endpoints of these ports afterwards.
		wantEndpoints map[servicemap.PortName][]endpoints.Endpoint
	}{{
		name:        "add slices of two Services, Changed sorted",
		events:      []event{upd(slice()), upd(udp())},
		wantPending: 2,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP, webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.1", 8080)},
			dnsUDP:  {want("10.0.0.1", 53)},
		},
	}, {
		name:        "second slice of a Service is merged",
		before:      []event{upd(slice())},
		events:      []event{upd(slice(sliceName("web-2"), eps(ep("10.0.0.2", nil, nil, nil))))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.1", 8080), want("10.0.0.2", 8080)},
		},
	}, {
		name: "a port listed twice serves both numbers, sorted by address and port",
		events: []event{updWarns(slice(
			slicePorts(epPort("http", 9090, v1.ProtocolTCP), epPort("http", 8080, v1.ProtocolTCP)),
			eps(ep("10.0.0.2", nil, nil, nil), ep("10.0.0.1", nil, nil, yes), ep("10.0.0.1", nil, nil, nil)),
		), "listed twice")},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.1", 8080), want("10.0.0.1", 9090), want("10.0.0.2", 8080), want("10.0.0.2", 9090)},
		},
	}, {
		name:        "removing one of two slices",
		before:      []event{upd(slice()), upd(slice(sliceName("web-2"), eps(ep("10.0.0.2", nil, nil, nil))))},
		events:      []event{del("ns", "web-1")},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.2", 8080)},
		},
	}, {
		name:   "slice moved to another Service by its label",
		before: []event{upd(slice())},
		events: []event{upd(slice(forService("api")))},
		// Both Services changed.
		wantPending: 2,
		want:        endpoints.Changes{Changed: []servicemap.PortName{pn("ns", "api", "http", v1.ProtocolTCP), webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP:                                 nil,
			pn("ns", "api", "http", v1.ProtocolTCP): {want("10.0.0.1", 8080)},
		},
	}, {
		name:        "slice moved away while another slice stays",
		before:      []event{upd(slice()), upd(slice(sliceName("web-2"), eps(ep("10.0.0.2", nil, nil, nil))))},
		events:      []event{upd(slice(sliceName("web-2"), forService("api"), eps(ep("10.0.0.2", nil, nil, nil))))},
		wantPending: 2,
		want:        endpoints.Changes{Changed: []servicemap.PortName{pn("ns", "api", "http", v1.ProtocolTCP), webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP:                                 {want("10.0.0.1", 8080)},
			pn("ns", "api", "http", v1.ProtocolTCP): {want("10.0.0.2", 8080)},
		},
	}, {
		name:        "identical update",
		before:      []event{upd(slice())},
		events:      []event{upd(slice())},
		wantPending: 0,
		want:        endpoints.Changes{},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.1", 8080)},
		},
	}, {
		name:        "the same endpoints split differently over slices",
		before:      []event{upd(slice(two))},
		events:      []event{upd(slice(one)), upd(slice(sliceName("web-2"), eps(ep("10.0.0.2", nil, nil, nil))))},
		wantPending: 0,
		want:        endpoints.Changes{},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.1", 8080), want("10.0.0.2", 8080)},
		},
	}, {
		name:        "delete of an unknown slice",
		before:      []event{upd(slice())},
		events:      []event{del("ns", "nope"), del("other", "web-1")},
		wantPending: 0,
		want:        endpoints.Changes{},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: {want("10.0.0.1", 8080)},
		},
	}, {
		name:        "update making the slice unused removes its endpoints",
		before:      []event{upd(slice())},
		events:      []event{upd(slice(func(es *discovery.EndpointSlice) { es.Labels[servicemap.LabelServiceProxyName] = "x" }))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: nil,
		},
	}, {
		name:        "update making the slice malformed removes its endpoints",
		before:      []event{upd(slice())},
		events:      []event{updWarns(slice(func(es *discovery.EndpointSlice) { delete(es.Labels, discovery.LabelServiceName) }), "no kubernetes.io/service-name label")},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP: nil,
		},
	}, {
		name:        "a port renamed",
		before:      []event{upd(slice())},
		events:      []event{upd(slice(slicePorts(epPort("web", 8080, v1.ProtocolTCP))))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP, pn("ns", "web", "web", v1.ProtocolTCP)}},
		wantEndpoints: map[servicemap.PortName][]endpoints.Endpoint{
			webHTTP:                                nil,
			pn("ns", "web", "web", v1.ProtocolTCP): {want("10.0.0.1", 8080)},
		},
	}, {
		name:        "hint change is a change",
		before:      []event{upd(slice())},
		events:      []event{upd(slice(eps(discovery.Endpoint{Addresses: []string{"10.0.0.1"}, Hints: &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z"}}}})))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
	}, {
		name:        "UDP: serving endpoint removed",
		before:      []event{upd(udp(two))},
		events:      []event{upd(udp(one))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}, ConntrackCleanup: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: serving endpoint becomes terminating but still serving",
		before:      []event{upd(udp(two))},
		events:      []event{upd(udp(secondTerminating))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: serving endpoint becomes not serving",
		before:      []event{upd(udp(two))},
		events:      []event{upd(udp(secondGone))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}, ConntrackCleanup: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: endpoint not ready but serving",
		before:      []event{upd(udp(two))},
		events:      []event{upd(udp(secondNotReady))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: endpoint added",
		before:      []event{upd(udp(one))},
		events:      []event{upd(udp(two))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: non-serving endpoint removed",
		before:      []event{upd(udp(secondGone))},
		events:      []event{upd(udp(one))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: non-serving endpoint comes back",
		before:      []event{upd(udp(secondGone))},
		events:      []event{upd(udp(two))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: target port changed",
		before:      []event{upd(udp())},
		events:      []event{upd(udp(slicePorts(epPort("dns", 5353, v1.ProtocolUDP))))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}, ConntrackCleanup: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: slice deleted",
		before:      []event{upd(udp(two)), upd(slice())},
		events:      []event{del("ns", "dns-1"), del("ns", "web-1")},
		wantPending: 2,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP, webHTTP}, ConntrackCleanup: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: slice moved to another Service",
		before:      []event{upd(udp())},
		events:      []event{upd(udp(forService("dns2")))},
		wantPending: 2,
		want: endpoints.Changes{
			Changed:          []servicemap.PortName{dnsUDP, pn("ns", "dns2", "dns", v1.ProtocolUDP)},
			ConntrackCleanup: []servicemap.PortName{dnsUDP},
		},
	}, {
		name:        "UDP: slice turned to the other family",
		before:      []event{upd(udp())},
		events:      []event{upd(udp(addrType(discovery.AddressTypeIPv6), eps(ep("fd00::1", nil, nil, nil))))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{dnsUDP}, ConntrackCleanup: []servicemap.PortName{dnsUDP}},
	}, {
		name:        "UDP: endpoint moves between slices of the Service",
		before:      []event{upd(udp(two))},
		events:      []event{upd(udp(one)), upd(udp(sliceName("dns-2"), eps(ep("10.0.0.2", nil, nil, nil))))},
		wantPending: 0,
		want:        endpoints.Changes{},
	}, {
		name:        "SCTP: serving endpoint removed",
		before:      []event{upd(sctp(two))},
		events:      []event{upd(sctp(one))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{sigSC}, ConntrackCleanup: []servicemap.PortName{sigSC}},
	}, {
		name:        "TCP: serving endpoint removed",
		before:      []event{upd(slice(two))},
		events:      []event{upd(slice(one))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
	}, {
		name:        "TCP: serving endpoint becomes not serving",
		before:      []event{upd(slice(two))},
		events:      []event{upd(slice(secondGone))},
		wantPending: 1,
		want:        endpoints.Changes{Changed: []servicemap.PortName{webHTTP}},
	}, {
		name: "mixed protocols on one slice: only the UDP port needs cleanup",
		before: []event{upd(slice(two, slicePorts(
			epPort("dns", 53, v1.ProtocolUDP), epPort("dns-tcp", 53, v1.ProtocolTCP))))},
		events: []event{upd(slice(one, slicePorts(
			epPort("dns", 53, v1.ProtocolUDP), epPort("dns-tcp", 53, v1.ProtocolTCP))))},
		wantPending: 1,
		want: endpoints.Changes{
			Changed:          []servicemap.PortName{pn("ns", "web", "dns", v1.ProtocolUDP), pn("ns", "web", "dns-tcp", v1.ProtocolTCP)},
			ConntrackCleanup: []servicemap.PortName{pn("ns", "web", "dns", v1.ProtocolUDP)},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
			apply(t, tr, tc.before...)
			tr.Snapshot()
			if p := tr.Pending(); p != 0 {
				t.Errorf("Pending after Snapshot = %d", p)
			}
			apply(t, tr, tc.events...)
			if p := tr.Pending(); p != tc.wantPending {
				t.Errorf("Pending = %d, want %d", p, tc.wantPending)
			}
			snap, ch := tr.Snapshot()
			if diff := cmp.Diff(tc.want, ch, cmpOpts); diff != "" {
				t.Errorf("Changes (-want +got):\n%s", diff)
			}
			for name, wantEPs := range tc.wantEndpoints {
				if diff := cmp.Diff(wantEPs, snap.Get(name), cmpOpts); diff != "" {
					t.Errorf("endpoints of %v (-want +got):\n%s", name, diff)
				}
			}
			if _, again := tr.Snapshot(); len(again.Changed)+len(again.ConntrackCleanup) != 0 {
				t.Errorf("second Snapshot reports %+v", again)
			}
		})
	}
}

func TestTrackerSnapshotImmutable(t *testing.T) {
	must := warnings.Must(t)
	tr := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for i := range 200 {
		must.Used(tr.Update(slice(forService(fmt.Sprintf("svc-%d", i)), sliceName(fmt.Sprintf("svc-%d-abc", i)),
			eps(ep(fmt.Sprintf("10.0.%d.%d", i/200, i%200+1), nil, nil, nil)))))
	}
	old, _ := tr.Snapshot()
	svc7 := pn("ns", "svc-7", "http", v1.ProtocolTCP)
	svc8 := pn("ns", "svc-8", "http", v1.ProtocolTCP)
	before7 := append([]endpoints.Endpoint(nil), old.Get(svc7)...)
	if len(before7) != 1 {
		t.Fatalf("svc-7 has %d endpoints", len(before7))
	}

	must.Used(tr.Update(slice(forService("svc-7"), sliceName("svc-7-abc"), eps(ep("10.9.9.9", no, no, yes)))))
	must.Used(tr.Update(slice(forService("svc-7"), sliceName("svc-7-def"), eps(ep("10.9.9.8", nil, nil, nil)))))
	tr.Delete("ns", "svc-8-abc")
	cur, ch := tr.Snapshot()
	if diff := cmp.Diff([]servicemap.PortName{svc7, svc8}, ch.Changed); diff != "" {
		t.Errorf("Changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before7, old.Get(svc7), cmpOpts); diff != "" {
		t.Errorf("old Snapshot changed (-before +after):\n%s", diff)
	}
	if len(old.Get(svc8)) != 1 || len(cur.Get(svc8)) != 0 {
		t.Errorf("svc-8: old %v, new %v", old.Get(svc8), cur.Get(svc8))
	}
	if diff := cmp.Diff([]endpoints.Endpoint{
		want("10.9.9.8", 8080),
		want("10.9.9.9", 8080, conds(false, false, true)),
	}, cur.Get(svc7), cmpOpts); diff != "" {
		t.Errorf("new svc-7 (-want +got):\n%s", diff)
	}
	if got := cur.Get(pn("ns", "nope", "http", v1.ProtocolTCP)); got != nil {
		t.Errorf("Get(unknown) = %v", got)
	}
	if got := cur.Get(pn("ns", "svc-7", "http", v1.ProtocolUDP)); got != nil {
		t.Errorf("Get(other protocol) = %v", got)
	}
}

func TestTrackerUpdateReturns(t *testing.T) {
	tr := endpoints.NewTracker(v1.IPv6Protocol, servicemap.Filter{})
	if skipped, w := tr.Update(nil); skipped == "" || w != nil {
		t.Errorf("Update(nil) = %q, %v", skipped, w)
	}
	if skipped, w := tr.Update(slice()); skipped == "" || len(w) != 0 {
		t.Errorf("Update(IPv4 slice) in IPv6 tracker = %q, %v; want skipped without warnings", skipped, w)
	}
	es := slice(addrType(discovery.AddressTypeIPv6), eps(ep("fd00::1", nil, nil, nil), ep("oops", nil, nil, nil)))
	skipped, w := tr.Update(es)
	if skipped != "" {
		t.Errorf("skipped = %q", skipped)
	}
	checkWarnings(t, es, w, []string{`"oops"`})
	snap, ch := tr.Snapshot()
	if diff := cmp.Diff(endpoints.Changes{Changed: []servicemap.PortName{webHTTP}}, ch, cmpOpts); diff != "" {
		t.Errorf("Changes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]endpoints.Endpoint{want("fd00::1", 8080)}, snap.Get(webHTTP), cmpOpts); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

func TestEndpointMethods(t *testing.T) {
	e := want("2001:db8::1", 443, func(e *endpoints.Endpoint) {
		e.ZoneHints = []string{"a", "c"}
		e.NodeHints = []string{"n1"}
	})
	if got := e.String(); got != "[2001:db8::1]:443" {
		t.Errorf("String = %q", got)
	}
	if got := want("10.0.0.1", 80); got.String() != "10.0.0.1:80" {
		t.Errorf("String = %q", got.String())
	}
	for zone, wantHas := range map[string]bool{"a": true, "b": false, "c": true, "": false} {
		if e.HasZoneHint(zone) != wantHas {
			t.Errorf("HasZoneHint(%q) = %v", zone, !wantHas)
		}
	}
	if !e.HasNodeHint("n1") || e.HasNodeHint("n2") {
		t.Errorf("HasNodeHint wrong")
	}
	lo, hi := want("10.0.0.1", 80), want("10.0.0.1", 81)
	if lo.Compare(&hi) >= 0 || hi.Compare(&lo) <= 0 || lo.Compare(&lo) != 0 {
		t.Errorf("Compare does not order by port")
	}
	a, b := want("10.0.0.1", 90), want("10.0.0.2", 80)
	if a.Compare(&b) >= 0 {
		t.Errorf("Compare does not order by address first")
	}
	for name, mod := range map[string]func(*endpoints.Endpoint){
		"addr":        func(e *endpoints.Endpoint) { e.Addr = e.Addr.Next() },
		"port":        func(e *endpoints.Endpoint) { e.Port++ },
		"ready":       func(e *endpoints.Endpoint) { e.Ready = false },
		"serving":     func(e *endpoints.Endpoint) { e.Serving = false },
		"terminating": func(e *endpoints.Endpoint) { e.Terminating = true },
		"node":        func(e *endpoints.Endpoint) { e.NodeName = "n" },
		"zone":        func(e *endpoints.Endpoint) { e.Zone = "z" },
		"zoneHints":   func(e *endpoints.Endpoint) { e.ZoneHints = []string{"a"} },
		"nodeHints":   func(e *endpoints.Endpoint) { e.NodeHints = nil },
	} {
		o := e
		mod(&o)
		if e.Equal(&o) || o.Equal(&e) {
			t.Errorf("Equal ignores %s", name)
		}
	}
	same := e
	same.ZoneHints = []string{"a", "c"}
	if !e.Equal(&same) {
		t.Errorf("Equal(copy) = false")
	}
}
