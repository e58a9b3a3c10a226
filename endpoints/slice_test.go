package endpoints_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

const injection = "bad name\n-j ACCEPT"

func TestFromSlice(t *testing.T) {
	type ports = map[servicemap.PortName][]endpoints.Endpoint
	for _, tc := range []struct {
		name   string
		es     *discovery.EndpointSlice
		family v1.IPFamily // IPv4 when empty
		filter servicemap.Filter
		// want is nil when the slice is not used.
		want         ports
		wantSkipped  string
		wantWarnings []string
	}{{
		name: "one port, one endpoint, conditions unset mean ready and serving, not terminating",
		es:   slice(),
		want: ports{webHTTP: {want("10.0.0.1", 8080)}},
	}, {
		name: "explicit conditions",
		es: slice(eps(
			ep("10.0.0.1", yes, yes, no),
			ep("10.0.0.2", no, yes, yes),
			ep("10.0.0.3", no, no, yes),
			ep("10.0.0.4", no, nil, nil),
			ep("10.0.0.5", nil, no, nil),
			ep("10.0.0.6", nil, nil, yes),
		)),
		want: ports{webHTTP: {
			want("10.0.0.1", 8080),
			want("10.0.0.2", 8080, conds(false, true, true)),
			want("10.0.0.3", 8080, conds(false, false, true)),
			want("10.0.0.4", 8080, conds(false, true, false)),
			want("10.0.0.5", 8080, conds(true, false, false)),
			want("10.0.0.6", 8080, conds(true, true, true)),
		}},
	}, {
		name: "endpoints keep the slice's order",
		es:   slice(eps(ep("10.0.0.9", nil, nil, nil), ep("10.0.0.1", nil, nil, nil))),
		want: ports{webHTTP: {want("10.0.0.9", 8080), want("10.0.0.1", 8080)}},
	}, {
		name: "node, zone, hints sorted and deduplicated",
		es: slice(eps(func() discovery.Endpoint {
			e := onNode(ep("10.0.0.1", nil, nil, nil), "node-a", "zone-a")
			e.Hints = &discovery.EndpointHints{
				ForZones: []discovery.ForZone{{Name: "zone-b"}, {Name: "zone-a"}, {Name: "zone-b"}},
				ForNodes: []discovery.ForNode{{Name: "node-b"}, {Name: "node-a"}, {Name: "node-a"}},
			}
			return e
		}())),
		want: ports{webHTTP: {want("10.0.0.1", 8080, located("node-a", "zone-a"), func(e *endpoints.Endpoint) {
			e.ZoneHints = []string{"zone-a", "zone-b"}
			e.NodeHints = []string{"node-a", "node-b"}
		})}},
	}, {
		name: "every port gets every endpoint with its own number",
		es: slice(
			slicePorts(epPort("http", 8080, v1.ProtocolTCP), epPort("dns", 53, v1.ProtocolUDP), epPort("sig", 3868, v1.ProtocolSCTP)),
			eps(ep("10.0.0.1", nil, nil, nil), ep("10.0.0.2", no, nil, nil)),
		),
		want: ports{
			webHTTP:                                 {want("10.0.0.1", 8080), want("10.0.0.2", 8080, conds(false, true, false))},
			pn("ns", "web", "dns", v1.ProtocolUDP):  {want("10.0.0.1", 53), want("10.0.0.2", 53, conds(false, true, false))},
			pn("ns", "web", "sig", v1.ProtocolSCTP): {want("10.0.0.1", 3868), want("10.0.0.2", 3868, conds(false, true, false))},
		},
	}, {
		name: "same port name over two protocols is two ports",
		es:   slice(slicePorts(epPort("dns", 53, v1.ProtocolUDP), epPort("dns", 53, v1.ProtocolTCP))),
		want: ports{
			pn("ns", "web", "dns", v1.ProtocolUDP): {want("10.0.0.1", 53)},
			pn("ns", "web", "dns", v1.ProtocolTCP): {want("10.0.0.1", 53)},
		},
	}, {
		name: "unnamed port, protocol defaults to TCP",
		es:   slice(slicePorts(discovery.EndpointPort{Name: ptr(""), Port: ptr[int32](80)})),
		want: ports{pn("ns", "web", "", v1.ProtocolTCP): {want("10.0.0.1", 80)}},
	}, {
		name:         "port with no name is skipped, as kube-proxy skips it",
		es:           slice(slicePorts(discovery.EndpointPort{Port: ptr[int32](80), Protocol: ptr(v1.ProtocolTCP)}, epPort("http", 8080, v1.ProtocolTCP))),
		want:         ports{webHTTP: {want("10.0.0.1", 8080)}},
		wantWarnings: []string{"no name"},
	}, {
		name: "port names the API server accepts (RFC 1123 labels) are used",
		es:   slice(slicePorts(epPort("a-port-name-longer-than-15", 80, v1.ProtocolTCP), epPort("8080", 8080, v1.ProtocolTCP), epPort("a--b", 81, v1.ProtocolTCP))),
		want: ports{
			pn("ns", "web", "a-port-name-longer-than-15", v1.ProtocolTCP): {want("10.0.0.1", 80)},
			pn("ns", "web", "8080", v1.ProtocolTCP):                       {want("10.0.0.1", 8080)},
			pn("ns", "web", "a--b", v1.ProtocolTCP):                       {want("10.0.0.1", 81)},
		},
	}, {
		name: "a port listed twice with two numbers serves both, as kube-proxy does",
		es: slice(
			slicePorts(epPort("http", 8080, v1.ProtocolTCP), epPort("http", 9090, v1.ProtocolTCP), epPort("http", 8080, v1.ProtocolTCP)),
			eps(ep("10.0.0.2", nil, nil, nil), ep("10.0.0.1", no, nil, nil)),
		),
		want: ports{webHTTP: {
			want("10.0.0.2", 8080), want("10.0.0.1", 8080, conds(false, true, false)),
			want("10.0.0.2", 9090), want("10.0.0.1", 9090, conds(false, true, false)),
		}},
		wantWarnings: []string{"twice", "twice"},
	}, {
		name: "port without a number is ignored without a warning",
		es:   slice(slicePorts(discovery.EndpointPort{Name: ptr("all")}, epPort("http", 8080, v1.ProtocolTCP))),
		want: ports{webHTTP: {want("10.0.0.1", 8080)}},
	}, {
		name: "no ports at all",
		es:   slice(slicePorts()),
		want: ports{},
	}, {
		name: "no endpoints",
		es:   slice(eps()),
		want: ports{webHTTP: {}},
	}, {
		name: "the slice's own name does not matter, the service-name label does",
		es:   slice(sliceName("anything-xyz"), forService("api")),
		want: ports{pn("ns", "api", "http", v1.ProtocolTCP): {want("10.0.0.1", 8080)}},
	}, {
		name:   "IPv6 slice in the IPv6 tracker",
		es:     slice(addrType(discovery.AddressTypeIPv6), eps(ep("fd00::1", nil, nil, nil), ep("2001:db8::1", nil, nil, nil))),
		family: v1.IPv6Protocol,
		want:   ports{webHTTP: {want("fd00::1", 8080), want("2001:db8::1", 8080)}},
	}, {
		name:        "IPv6 slice in the IPv4 tracker",
		es:          slice(addrType(discovery.AddressTypeIPv6), eps(ep("fd00::1", nil, nil, nil))),
		wantSkipped: "IPv6",
	}, {
		name:        "IPv4 slice in the IPv6 tracker",
		es:          slice(),
		family:      v1.IPv6Protocol,
		wantSkipped: "IPv4",
	}, {
		name:        "FQDN slice",
		es:          slice(addrType(discovery.AddressTypeFQDN), eps(ep("db.example.com", nil, nil, nil))),
		wantSkipped: "FQDN",
	}, {
		name:         "unknown address type",
		es:           slice(addrType("IPv5")),
		wantSkipped:  "address type",
		wantWarnings: []string{`"IPv5"`},
	}, {
		name:        "proxy-name label, default filter",
		es:          slice(func(es *discovery.EndpointSlice) { es.Labels[servicemap.LabelServiceProxyName] = "x" }),
		wantSkipped: servicemap.LabelServiceProxyName,
	}, {
		name:   "proxy-name label matching the filter",
		es:     slice(func(es *discovery.EndpointSlice) { es.Labels[servicemap.LabelServiceProxyName] = "x" }),
		filter: servicemap.Filter{ProxyName: "x"},
		want:   ports{webHTTP: {want("10.0.0.1", 8080)}},
	}, {
		name:        "no proxy-name label, named filter",
		es:          slice(),
		filter:      servicemap.Filter{ProxyName: "x"},
		wantSkipped: servicemap.LabelServiceProxyName,
	}, {
		name:        "headless label",
		es:          slice(func(es *discovery.EndpointSlice) { es.Labels[servicemap.LabelHeadless] = "" }),
		wantSkipped: servicemap.LabelHeadless,
	}, {
		name:         "missing service-name label",
		es:           slice(func(es *discovery.EndpointSlice) { delete(es.Labels, discovery.LabelServiceName) }),
		wantSkipped:  discovery.LabelServiceName,
		wantWarnings: []string{discovery.LabelServiceName},
	}, {
		name:         "no labels at all",
		es:           slice(func(es *discovery.EndpointSlice) { es.Labels = nil }),
		wantSkipped:  discovery.LabelServiceName,
		wantWarnings: []string{discovery.LabelServiceName},
	}, {
		name:         "service-name label injection attempt",
		es:           slice(forService(injection)),
		wantSkipped:  discovery.LabelServiceName,
		wantWarnings: []string{`"bad name\n-j ACCEPT"`},
	}, {
		name:         "invalid namespace",
		es:           slice(func(es *discovery.EndpointSlice) { es.Namespace = "ns\n-A X" }),
		wantSkipped:  "namespace",
		wantWarnings: []string{`"ns\n-A X"`},
	}, {
		name:         "invalid slice name",
		es:           slice(sliceName(injection)),
		wantSkipped:  "name",
		wantWarnings: []string{`"bad name\n-j ACCEPT"`},
	}, {
		name: "invalid addresses are warned about and skipped",
		es: slice(eps(
			ep("10.0.0.300", nil, nil, nil),
			discovery.Endpoint{},
			ep("", nil, nil, nil),
			ep("0.0.0.0", nil, nil, nil),
			ep("224.0.0.1", nil, nil, nil),
			ep("127.0.0.1", nil, nil, nil),
			ep("169.254.169.254", nil, nil, nil),
			ep("10.0.0.1 -j ACCEPT", nil, nil, nil),
			ep("10.0.0.7", nil, nil, nil),
		)),
		want: ports{webHTTP: {want("10.0.0.7", 8080)}},
		wantWarnings: []string{
			`"10.0.0.300"`, "no address", `""`, `"0.0.0.0"`, `"224.0.0.1"`,
			`"127.0.0.1"`, `"169.254.169.254"`, `"10.0.0.1 -j ACCEPT"`,
		},
	}, {
		name: "odd addresses kube-proxy reads are used, with a warning",
		es: slice(eps(
			ep("::ffff:10.0.0.1", nil, nil, nil),
			ep("010.000.000.011", nil, nil, nil),
			ep("239.1.2.3", nil, nil, nil),
		)),
		want:         ports{webHTTP: {want("10.0.0.1", 8080), want("10.0.0.11", 8080), want("239.1.2.3", 8080)}},
		wantWarnings: []string{`"::ffff:10.0.0.1" read as 10.0.0.1`, `"010.000.000.011" read as 10.0.0.11`, "multicast address 239.1.2.3"},
	}, {
		name:   "invalid IPv6 addresses",
		family: v1.IPv6Protocol,
		es: slice(addrType(discovery.AddressTypeIPv6), eps(
			ep("fe80::1%eth0", nil, nil, nil),
			ep("fe80::1", nil, nil, nil),
			ep("::1", nil, nil, nil),
			ep("::", nil, nil, nil),
			ep("ff02::1", nil, nil, nil),
			ep("::ffff:10.0.0.1", nil, nil, nil),
			ep("fd00::7", nil, nil, nil),
			ep("ff05::1", nil, nil, nil),
		)),
		want:         ports{webHTTP: {want("fd00::7", 8080), want("ff05::1", 8080)}},
		wantWarnings: []string{`"fe80::1%eth0"`, `"fe80::1"`, `"::1"`, `"::"`, `"ff02::1"`, "read as 10.0.0.1", "10.0.0.1 is not IPv6", "multicast address ff05::1"},
	}, {
		name:         "address of the wrong family within the slice",
		es:           slice(eps(ep("fd00::1", nil, nil, nil), ep("10.0.0.2", nil, nil, nil))),
		want:         ports{webHTTP: {want("10.0.0.2", 8080)}},
		wantWarnings: []string{"fd00::1"},
	}, {
		name:         "address of the wrong family, IPv6 slice",
		family:       v1.IPv6Protocol,
		es:           slice(addrType(discovery.AddressTypeIPv6), eps(ep("10.0.0.2", nil, nil, nil), ep("fd00::1", nil, nil, nil))),
		want:         ports{webHTTP: {want("fd00::1", 8080)}},
		wantWarnings: []string{"10.0.0.2"},
	}, {
		name: "only the first address counts",
		es:   slice(eps(discovery.Endpoint{Addresses: []string{"10.0.0.1", "not-an-ip"}})),
		want: ports{webHTTP: {want("10.0.0.1", 8080)}},
	}, {
		name: "bad ports are warned about and skipped, good ones kept",
		es: slice(slicePorts(
			epPort("http", 8080, v1.ProtocolTCP),
			epPort("zero", 0, v1.ProtocolTCP),
			epPort("big", 65536, v1.ProtocolTCP),
			epPort("neg", -1, v1.ProtocolTCP),
			epPort(injection, 80, v1.ProtocolTCP),
			epPort("icmp", 80, "ICMP"),
			epPort("http", 9090, v1.ProtocolTCP),
		)),
		want: ports{webHTTP: {want("10.0.0.1", 8080), want("10.0.0.1", 9090)}},
		wantWarnings: []string{
			"port number 0", "port number 65536", "port number -1", `"bad name\n-j ACCEPT"`, `"ICMP"`, "twice",
		},
	}, {
		name: "port 65535 is fine",
		es:   slice(slicePorts(epPort("http", 65535, v1.ProtocolTCP))),
		want: ports{webHTTP: {want("10.0.0.1", 65535)}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			family := tc.family
			if family == "" {
				family = v1.IPv4Protocol
			}
			got, skipped, warnings := endpoints.FromSlice(tc.es, family, tc.filter)
			switch {
			case tc.wantSkipped == "" && skipped != "":
				t.Errorf("skipped = %q, want not skipped", skipped)
			case tc.wantSkipped != "" && !strings.Contains(skipped, tc.wantSkipped):
				t.Errorf("skipped = %q, want it to contain %q", skipped, tc.wantSkipped)
			}
			checkWarnings(t, tc.es, warnings, tc.wantWarnings)
			if tc.want == nil {
				if got != nil {
					t.Errorf("FromSlice = %+v, want nil", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("FromSlice = nil")
			}
			wantService := types.NamespacedName{Namespace: tc.es.Namespace, Name: tc.es.Labels[discovery.LabelServiceName]}
			if got.Service != wantService || got.Name != tc.es.Name {
				t.Errorf("Service, Name = %v, %q; want %v, %q", got.Service, got.Name, wantService, tc.es.Name)
			}
			if diff := cmp.Diff(tc.want, got.Ports, cmpOpts); diff != "" {
				t.Errorf("Ports (-want +got):\n%s", diff)
			}
		})
	}
	if s, skipped, w := endpoints.FromSlice(nil, v1.IPv4Protocol, servicemap.Filter{}); s != nil || skipped == "" || w != nil {
		t.Errorf("FromSlice(nil) = %v, %q, %v", s, skipped, w)
	}
}

func TestMerge(t *testing.T) {
	a := parse(t, slice(sliceName("web-a"), eps(ep("10.0.0.3", nil, nil, nil), ep("10.0.0.1", nil, nil, nil))))
	b := parse(t, slice(sliceName("web-b"), eps(ep("10.0.0.2", no, nil, nil)),
		slicePorts(epPort("http", 8080, v1.ProtocolTCP), epPort("admin", 9000, v1.ProtocolTCP))))
	c := parse(t, slice(sliceName("web-c"), eps(ep("10.0.0.1", nil, nil, nil)),
		slicePorts(epPort("http", 9090, v1.ProtocolTCP))))
	before := fmt.Sprint(a.Ports, b.Ports, c.Ports)
	got := endpoints.Merge([]*endpoints.Slice{c, b, a})
	wantPorts := map[servicemap.PortName][]endpoints.Endpoint{
		webHTTP: {
			want("10.0.0.1", 8080),
			want("10.0.0.1", 9090), // same address, other port: another endpoint
			want("10.0.0.2", 8080, conds(false, true, false)),
			want("10.0.0.3", 8080),
		},
		pn("ns", "web", "admin", v1.ProtocolTCP): {want("10.0.0.2", 9000, conds(false, true, false))},
	}
	if diff := cmp.Diff(wantPorts, got, cmpOpts); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
	if after := fmt.Sprint(a.Ports, b.Ports, c.Ports); after != before {
		t.Errorf("Merge modified its input:\n%s\n%s", before, after)
	}
	if got := endpoints.Merge(nil); len(got) != 0 {
		t.Errorf("Merge(nil) = %v", got)
	}
}

// TestMergeDuplicates checks which copy of an endpoint listed more than
// once wins: kube-proxy's rule (the last copy that is not terminating, or
// the first when all are) with the slices read in name order and each
// slice in its order, whatever order Merge and a Tracker get the slices
// in. Each copy of 10.0.0.1 is told apart by its node.
func TestMergeDuplicates(t *testing.T) {
	type copy struct {
		slice, node string
		cond        discovery.EndpointConditions
	}
	ready := discovery.EndpointConditions{Ready: yes, Serving: yes, Terminating: no}
	notReady := discovery.EndpointConditions{Ready: no, Serving: no, Terminating: no}
	terminating := discovery.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}
	for _, tc := range []struct {
		name   string
		copies []copy
		want   string // the node of the copy kept
	}{
		{"one slice: the last non-terminating copy, even not ready", []copy{{"web-a", "n1", ready}, {"web-a", "n2", notReady}}, "n2"},
		{"one slice: a terminating copy does not replace", []copy{{"web-a", "n1", notReady}, {"web-a", "n2", terminating}}, "n1"},
		{"one slice: a non-terminating copy replaces a terminating one", []copy{{"web-a", "n1", terminating}, {"web-a", "n2", notReady}}, "n2"},
		{"one slice: all terminating, the first", []copy{{"web-a", "n1", terminating}, {"web-a", "n2", terminating}}, "n1"},
		{"one slice: three copies", []copy{{"web-a", "n1", ready}, {"web-a", "n2", notReady}, {"web-a", "n3", terminating}}, "n2"},
		{"two slices: the one named last", []copy{{"web-a", "n1", ready}, {"web-b", "n2", notReady}}, "n2"},
		{"two slices: the non-terminating copy of the one named first", []copy{{"web-a", "n1", notReady}, {"web-b", "n2", terminating}}, "n1"},
		{"two slices, all terminating: the one named first", []copy{{"web-a", "n1", terminating}, {"web-b", "n2", terminating}}, "n1"},
		{"two slices: each slice in its order", []copy{{"web-a", "n1", terminating}, {"web-b", "n2", ready}, {"web-b", "n3", terminating}}, "n2"},
		{"two slices: both orders within", []copy{{"web-a", "n1", ready}, {"web-a", "n2", terminating}, {"web-b", "n3", terminating}, {"web-b", "n4", notReady}}, "n4"},
	} {
		bySlice := map[string][]discovery.Endpoint{}
		var names []string
		for i, c := range tc.copies {
			if _, ok := bySlice[c.slice]; !ok {
				names = append(names, c.slice)
				// Other addresses first, enough that sorting them is not an
				// insertion sort: the copies keep their order through the
				// Tracker's sort by address.
				for k := range 40 {
					bySlice[c.slice] = append(bySlice[c.slice], ep(fmt.Sprintf("10.0.1.%d", 40-k), nil, nil, nil))
				}
			}
			e := discovery.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: ptr(c.node), Conditions: c.cond}
			bySlice[c.slice] = append(bySlice[c.slice], e, ep(fmt.Sprintf("10.0.2.%d", i), nil, nil, nil))
		}
		for _, reversed := range []bool{false, true} {
			order := slices.Clone(names)
			if reversed {
				slices.Reverse(order)
			}
			var in []*endpoints.Slice
			tracker := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
			for _, name := range order {
				es := slice(sliceName(name), eps(bySlice[name]...))
				in = append(in, parse(t, es))
				tracker.Update(es)
			}
			snap, _ := tracker.Snapshot()
			for what, got := range map[string][]endpoints.Endpoint{"Merge": endpoints.Merge(in)[webHTTP], "Tracker": snap.Get(webHTTP)} {
				if len(got) != 41+len(tc.copies) || got[0].NodeName != tc.want {
					t.Errorf("%s, %s, slices %v: got %v, want the copy on %s", tc.name, what, order, got, tc.want)
				}
			}
		}
	}

	// Slices that share a name: still independent of the order.
	one := parse(t, slice(eps(
		onNode(ep("10.0.0.1", nil, nil, nil), "n1", "zone-b"),
		onNode(ep("10.0.0.1", nil, nil, nil), "n1", "zone-a"),
	)))
	other := parse(t, slice(eps(onNode(ep("10.0.0.1", nil, nil, nil), "n1", "zone-a"))))
	first := endpoints.Merge([]*endpoints.Slice{one, other})[webHTTP]
	second := endpoints.Merge([]*endpoints.Slice{other, one})[webHTTP]
	if len(first) != 1 {
		t.Fatalf("Merge kept %d copies of one endpoint", len(first))
	}
	if diff := cmp.Diff(first, second, cmpOpts); diff != "" {
		t.Errorf("Merge depends on the order of same-named slices (-first +second):\n%s", diff)
	}
}

// Endpoints from different slices share the bytes of equal node names and
// zones, however the objects hold them.
func TestFromSliceSharesNames(t *testing.T) {
	withNode := func(node, zone string) func(*discovery.EndpointSlice) {
		// Fresh copies of the strings, as a decoder makes them.
		node, zone = strings.Clone(node), strings.Clone(zone)
		return eps(discovery.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &node, Zone: &zone})
	}
	var parsed []endpoints.Endpoint
	for _, name := range []string{"web-1", "web-2"} {
		s, skipped, w := endpoints.FromSlice(slice(sliceName(name), withNode("node-a", "zone-a")), v1.IPv4Protocol, servicemap.Filter{})
		if s == nil || skipped != "" || len(w) > 0 {
			t.Fatalf("FromSlice(%s): %v, %q, %v", name, s, skipped, w)
		}
		for _, list := range s.Ports {
			parsed = append(parsed, list...)
		}
	}
	if len(parsed) != 2 {
		t.Fatalf("parsed %d endpoints, want 2", len(parsed))
	}
	a, b := parsed[0], parsed[1]
	if a.NodeName != "node-a" || a.Zone != "zone-a" {
		t.Errorf("NodeName, Zone = %q, %q", a.NodeName, a.Zone)
	}
	if unsafe.StringData(a.NodeName) != unsafe.StringData(b.NodeName) {
		t.Errorf("the two endpoints hold separate copies of node name %q", a.NodeName)
	}
	if unsafe.StringData(a.Zone) != unsafe.StringData(b.Zone) {
		t.Errorf("the two endpoints hold separate copies of zone %q", a.Zone)
	}
}
