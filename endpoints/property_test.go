package endpoints_test

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	netutils "k8s.io/utils/net"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

// mostly draws from good, or now and then from bad or an arbitrary string.
// rapid favours the ends of a range, so those are kept for good values.
func mostly(good []string, bad ...string) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		switch rapid.IntRange(0, 15).Draw(t, "kind") {
		case 7:
			return rapid.String().Draw(t, "arbitrary")
		case 8:
			if len(bad) > 0 {
				return rapid.SampledFrom(bad).Draw(t, "bad")
			}
		}
		return rapid.SampledFrom(good).Draw(t, "good")
	})
}

func maybe[T any](t *rapid.T, label string, g *rapid.Generator[T]) *T {
	if rapid.IntRange(0, 4).Draw(t, label+"?") == 2 {
		return nil
	}
	v := g.Draw(t, label)
	return &v
}

var (
	badAddrs = []string{
		"", "0.0.0.0", "::", "127.0.0.1", "::1", "169.254.169.254", "fe80::1", "fe80::1%eth0", "::ffff:10.0.0.1",
		"224.0.0.1", "ff02::1", " 10.0.0.4 ", "10.0.0.256", "10.0.0.1 -j ACCEPT", "db.example.com",
		"10.0.0.9", "fd00::9", // right or wrong family, depending on the slice
	}
	genAddr = map[discovery.AddressType]*rapid.Generator[string]{
		discovery.AddressTypeIPv4: mostly([]string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, badAddrs...),
		discovery.AddressTypeIPv6: mostly([]string{"fd00::1", "fd00::2", "2001:db8::3"}, badAddrs...),
	}
	genPortName = mostly([]string{"", "http", "dns", "metrics"}, "HTTP", "a_b", "123", "bad name\n-j ACCEPT", "abcdefghijklmnop")
	genProtocol = rapid.Map(mostly([]string{"TCP", "UDP", "SCTP"}, "", "udp", "ICMP"), func(s string) v1.Protocol { return v1.Protocol(s) })
	genPortNum  = rapid.OneOf(
		rapid.SampledFrom([]int32{80, 53, 8080, 1, 65535, 65536, 0, -1}),
		rapid.Int32(),
		rapid.Int32Range(1, 65535),
	)
	genBool = rapid.Bool()
)

func genEndpoint(t *rapid.T, addressType discovery.AddressType) discovery.Endpoint {
	addrs, ok := genAddr[addressType]
	if !ok {
		addrs = mostly(badAddrs)
	}
	e := discovery.Endpoint{
		Addresses: rapid.SliceOfN(addrs, 0, 2).Draw(t, "addresses"),
		Conditions: discovery.EndpointConditions{
			Ready:       maybe(t, "ready", genBool),
			Serving:     maybe(t, "serving", genBool),
			Terminating: maybe(t, "terminating", genBool),
		},
		NodeName: maybe(t, "node", mostly([]string{"node-a", "node-b", ""})),
		Zone:     maybe(t, "zone", mostly([]string{"zone-a", "zone-b", ""})),
	}
	if rapid.Bool().Draw(t, "hints") {
		e.Hints = &discovery.EndpointHints{}
		for _, z := range rapid.SliceOfN(mostly([]string{"zone-a", "zone-b"}), 0, 3).Draw(t, "forZones") {
			e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
		}
		for _, n := range rapid.SliceOfN(mostly([]string{"node-a", "node-b"}), 0, 3).Draw(t, "forNodes") {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: n})
		}
	}
	return e
}

func genSlicePorts(t *rapid.T) []discovery.EndpointPort {
	var ports []discovery.EndpointPort
	for i, n := 0, rapid.SampledFrom([]int{1, 2, 3, 0}).Draw(t, "ports"); i < n; i++ {
		ports = append(ports, discovery.EndpointPort{
			Name:     maybe(t, "portName", genPortName),
			Protocol: maybe(t, "protocol", genProtocol),
			Port:     maybe(t, "port", genPortNum),
		})
	}
	return ports
}

// genSlice draws an EndpointSlice; namespaces, names and services come from
// the given pools (with an occasional malformed one).
func genSlice(t *rapid.T, namespaces, names, services []string) *discovery.EndpointSlice {
	return genSliceOf(t, discovery.AddressType(mostly([]string{"IPv4", "IPv6"}, "FQDN", "IPv5").Draw(t, "addressType")), namespaces, names, services)
}

func genSliceOf(t *rapid.T, addressType discovery.AddressType, namespaces, names, services []string) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: mostly(namespaces, "", "Bad_NS").Draw(t, "namespace"),
			Name:      mostly(names, "", "bad name\n-j ACCEPT").Draw(t, "name"),
			Labels:    map[string]string{},
		},
		AddressType: addressType,
		Ports:       genSlicePorts(t),
	}
	switch rapid.IntRange(0, 20).Draw(t, "labels") {
	case 7:
		// no service-name label
	case 8:
		es.Labels[discovery.LabelServiceName] = "bad name\n-j ACCEPT"
	case 9:
		es.Labels[servicemap.LabelServiceProxyName] = "x"
		es.Labels[discovery.LabelServiceName] = rapid.SampledFrom(services).Draw(t, "service")
	case 10:
		es.Labels[servicemap.LabelHeadless] = ""
		es.Labels[discovery.LabelServiceName] = rapid.SampledFrom(services).Draw(t, "service")
	default:
		es.Labels[discovery.LabelServiceName] = rapid.SampledFrom(services).Draw(t, "service")
	}
	for i, n := 0, rapid.IntRange(0, 5).Draw(t, "endpoints"); i < n; i++ {
		es.Endpoints = append(es.Endpoints, genEndpoint(t, es.AddressType))
	}
	return es
}

var (
	genFamily = rapid.SampledFrom([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol})
	genFilter = rapid.Custom(func(t *rapid.T) servicemap.Filter {
		return servicemap.Filter{ProxyName: rapid.SampledFrom([]string{"", "", "x"}).Draw(t, "proxyName")}
	})
)

// usable is the test's own idea of a usable endpoint address of family.
func usable(e *discovery.Endpoint, family v1.IPFamily) (netip.Addr, bool) {
	if len(e.Addresses) == 0 {
		return netip.Addr{}, false
	}
	// kube-proxy's reading (leading zeros, IPv4-mapped as IPv4), less
	// the addresses the API server always refuses.
	parsed := netutils.ParseIPSloppy(strings.TrimSpace(e.Addresses[0]))
	if parsed == nil {
		return netip.Addr{}, false
	}
	ip, _ := netip.AddrFromSlice(parsed)
	ip = ip.Unmap()
	if ip.IsUnspecified() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.Is4() != (family == v1.IPv4Protocol) {
		return netip.Addr{}, false
	}
	return ip, true
}

func sortedSet(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// expectEndpoint is what FromSlice should make of e (without its port).
func expectEndpoint(e *discovery.Endpoint, addr netip.Addr) endpoints.Endpoint {
	out := endpoints.Endpoint{
		Addr:        addr,
		Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
		Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
		Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
	}
	if e.NodeName != nil {
		out.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		out.Zone = *e.Zone
	}
	if e.Hints != nil {
		for _, z := range e.Hints.ForZones {
			out.ZoneHints = append(out.ZoneHints, z.Name)
		}
		for _, n := range e.Hints.ForNodes {
			out.NodeHints = append(out.NodeHints, n.Name)
		}
		out.ZoneHints, out.NodeHints = sortedSet(out.ZoneHints), sortedSet(out.NodeHints)
	}
	return out
}

func TestPropertyFromSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var es *discovery.EndpointSlice
		if rapid.IntRange(0, 50).Draw(t, "nil") < 50 {
			es = genSlice(t, []string{"ns", "kube-system"}, []string{"web-1", "web-2", "web.abc"}, []string{"web", "dns"})
		}
		family := genFamily.Draw(t, "family")
		filter := genFilter.Draw(t, "filter")
		orig := es.DeepCopy()

		got, skipped, warnings := endpoints.FromSlice(es, family, filter)

		if diff := cmp.Diff(orig, es); diff != "" {
			t.Fatalf("FromSlice modified its input (-before +after):\n%s", diff)
		}
		again, skipped2, warnings2 := endpoints.FromSlice(es, family, filter)
		if diff := cmp.Diff(got, again, cmpOpts); diff != "" || skipped != skipped2 || !slices.Equal(warnings, warnings2) {
			t.Fatalf("FromSlice is not deterministic:\n%s", diff)
		}
		if (got == nil) != (skipped != "") {
			t.Fatalf("slice %v with skip reason %q", got, skipped)
		}
		if es == nil {
			return
		}
		for _, w := range warnings {
			if w.Kind != "EndpointSlice" || w.Namespace != es.Namespace || w.Name != es.Name {
				t.Fatalf("warning %+v does not name the slice", w)
			}
			if strings.ContainsAny(w.Reason, "\n\r") {
				t.Fatalf("warning reason %q holds a raw line break", w.Reason)
			}
		}
		if got == nil {
			deliberate := false
			if ok, why := filter.Selects(es.Labels); !ok {
				deliberate = skipped == why
			} else if skipped == "address type FQDN" ||
				(es.AddressType != discovery.AddressType(family) && skipped == "address type "+string(es.AddressType)) {
				deliberate = true
			}
			if !deliberate && len(warnings) == 0 {
				t.Fatalf("slice skipped (%q) without a warning", skipped)
			}
			return
		}
		if ok, _ := filter.Selects(es.Labels); !ok || string(es.AddressType) != string(family) {
			t.Fatalf("slice used despite filter or address type %q", es.AddressType)
		}
		wantService := types.NamespacedName{Namespace: es.Namespace, Name: es.Labels[discovery.LabelServiceName]}
		if got.Service != wantService || got.Name != es.Name ||
			len(validation.IsDNS1123Label(got.Service.Namespace)) > 0 || len(validation.IsDNS1123Label(got.Service.Name)) > 0 {
			t.Fatalf("slice of %v named %q", got.Service, got.Name)
		}

		// The endpoints every port should have, in slice order.
		var wantEPs []endpoints.Endpoint
		for i := range es.Endpoints {
			if addr, ok := usable(&es.Endpoints[i], family); ok {
				wantEPs = append(wantEPs, expectEndpoint(&es.Endpoints[i], addr))
			}
		}
		numbered := 0
		for _, p := range es.Ports {
			if p.Port != nil {
				numbered++
			}
		}
		if dropped := len(es.Endpoints) - len(wantEPs) + numbered - len(got.Ports); dropped > len(warnings) {
			t.Fatalf("%d endpoints and ports dropped with %d warnings", dropped, len(warnings))
		}
		for name, list := range got.Ports {
			if name.Namespace != got.Service.Namespace || name.Name != got.Service.Name {
				t.Fatalf("port %v of slice for %v", name, got.Service)
			}
			if name.Port != "" && len(validation.IsDNS1123Label(name.Port)) > 0 {
				t.Fatalf("invalid port name in %v", name)
			}
			if !slices.Contains([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}, name.Protocol) {
				t.Fatalf("protocol %q", name.Protocol)
			}
			// A port listed twice has the endpoints once per number, in
			// the order of the numbers' first listing.
			var numbers []int32
			for _, p := range es.Ports {
				if p.Name != nil && *p.Name == name.Port && p.Port != nil && *p.Port >= 1 && *p.Port <= 65535 &&
					(p.Protocol == nil && name.Protocol == v1.ProtocolTCP || p.Protocol != nil && *p.Protocol == name.Protocol) &&
					!slices.Contains(numbers, *p.Port) {
					numbers = append(numbers, *p.Port)
				}
			}
			if len(list) != len(wantEPs)*len(numbers) {
				t.Fatalf("port %v has %d endpoints, want %d for each of %v", name, len(list), len(wantEPs), numbers)
			}
			for i, e := range list {
				if int32(e.Port) != numbers[i/len(wantEPs)] {
					t.Fatalf("port %v: endpoint %d port %d, want one of %v in order", name, i, e.Port, numbers)
				}
				w := wantEPs[i%len(wantEPs)]
				w.Port = e.Port
				if diff := cmp.Diff(w, e, cmpOpts); diff != "" {
					t.Fatalf("port %v endpoint %d (-want +got):\n%s", name, i, diff)
				}
			}
		}
	})
}

// genParsedSlices draws parsed slices of one Service, with slice names
// from a small pool so that names repeat.
func genParsedSlices(t *rapid.T, family v1.IPFamily) []*endpoints.Slice {
	var out []*endpoints.Slice
	for i, n := 0, rapid.IntRange(0, 5).Draw(t, "slices"); i < n; i++ {
		es := genSliceOf(t, discovery.AddressType(family), []string{"ns"}, []string{"web-1", "web-2", "web-3"}, []string{"web"})
		es.Namespace, es.Labels = "ns", map[string]string{discovery.LabelServiceName: "web"}
		if s, _, _ := endpoints.FromSlice(es, family, servicemap.Filter{}); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func TestPropertyMergePermutation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily.Draw(t, "family")
		in := genParsedSlices(t, family)
		merged := endpoints.Merge(in)
		perm := rapid.Permutation(in).Draw(t, "permutation")
		if diff := cmp.Diff(merged, endpoints.Merge(perm), cmpOpts); diff != "" {
			t.Fatalf("Merge depends on the order of slices (-original +permuted):\n%s", diff)
		}
		// Sorted, unique, and exactly the address-ports of the inputs.
		for name, list := range merged {
			seen := map[netip.AddrPort]bool{}
			for _, s := range in {
				for _, e := range s.Ports[name] {
					seen[e.AddrPort()] = true
				}
			}
			for i, e := range list {
				if i > 0 && list[i-1].Compare(&e) >= 0 {
					t.Fatalf("%v: endpoints not sorted and unique: %v", name, list)
				}
				if !seen[e.AddrPort()] {
					t.Fatalf("%v: %v comes from no slice", name, e)
				}
				delete(seen, e.AddrPort())
			}
			if len(seen) > 0 {
				t.Fatalf("%v: %v lost in the merge", name, seen)
			}
		}
	})
}

type sliceModel map[types.NamespacedName]*endpoints.Slice

// merged is what the model says the endpoints of each Service are.
func (m sliceModel) merged() map[types.NamespacedName]map[servicemap.PortName][]endpoints.Endpoint {
	byService := map[types.NamespacedName][]*endpoints.Slice{}
	for _, s := range m {
		byService[s.Service] = append(byService[s.Service], s)
	}
	out := map[types.NamespacedName]map[servicemap.PortName][]endpoints.Endpoint{}
	for svc, list := range byService {
		out[svc] = endpoints.Merge(list)
	}
	return out
}

func sameList(a, b []endpoints.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y endpoints.Endpoint) bool { return x.Equal(&y) })
}

// expectChanges derives Changes from two model states.
func expectChanges(before, after map[types.NamespacedName]map[servicemap.PortName][]endpoints.Endpoint) (endpoints.Changes, int) {
	var ch endpoints.Changes
	pending := 0
	services := map[types.NamespacedName]bool{}
	for k := range before {
		services[k] = true
	}
	for k := range after {
		services[k] = true
	}
	for svc := range services {
		names := map[servicemap.PortName]bool{}
		for n := range before[svc] {
			names[n] = true
		}
		for n := range after[svc] {
			names[n] = true
		}
		changed := false
		for name := range names {
			b, a := before[svc][name], after[svc][name]
			if sameList(b, a) {
				continue
			}
			changed = true
			ch.Changed = append(ch.Changed, name)
			if name.Protocol == v1.ProtocolTCP {
				continue
			}
			for _, old := range b {
				if !old.Serving {
					continue
				}
				i := slices.IndexFunc(a, func(e endpoints.Endpoint) bool { return e.AddrPort() == old.AddrPort() })
				if i < 0 || !a[i].Serving {
					ch.ConntrackCleanup = append(ch.ConntrackCleanup, name)
					break
				}
			}
		}
		if changed {
			pending++
		}
	}
	slices.SortFunc(ch.Changed, servicemap.PortName.Compare)
	slices.SortFunc(ch.ConntrackCleanup, servicemap.PortName.Compare)
	return ch, pending
}

// TestPropertyTracker drives a Tracker with random slice updates, deletes
// and Snapshots and checks each Snapshot (each port's endpoints, and its
// Serving against them), its Changes and Pending against a model; at the
// end a fresh Tracker fed each slice's final state in any order must give
// the same endpoints.
func TestPropertyTracker(t *testing.T) {
	namespaces := []string{"ns", "kube-system"}
	names := []string{"s1", "s2", "s3", "s4"}
	services := []string{"web", "dns", "api"}
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily.Draw(t, "family")
		filter := genFilter.Draw(t, "filter")
		tr := endpoints.NewTracker(family, filter)
		final := map[types.NamespacedName]*discovery.EndpointSlice{}
		model := sliceModel{}
		last := model.merged()
		allNames := map[servicemap.PortName]bool{}
		for step, n := 0, rapid.IntRange(1, 40).Draw(t, "steps"); step < n; step++ {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1, 2:
				es := genSlice(t, namespaces, names, services)
				if rapid.IntRange(0, 3).Draw(t, "ofFamily") > 0 {
					es = genSliceOf(t, discovery.AddressType(family), namespaces, names, services)
				}
				key := types.NamespacedName{Namespace: es.Namespace, Name: es.Name}
				skipped, got := tr.Update(es)
				final[key] = es
				s, wantSkipped, want := endpoints.FromSlice(es, family, filter)
				if skipped != wantSkipped || !slices.Equal(got, want) {
					t.Fatalf("Update = %q, %v; FromSlice says %q, %v", skipped, got, wantSkipped, want)
				}
				if s != nil {
					model[key] = s
					for name := range s.Ports {
						allNames[name] = true
					}
				} else {
					delete(model, key)
				}
			case 3:
				key := types.NamespacedName{
					Namespace: rapid.SampledFrom(namespaces).Draw(t, "delNS"),
					Name:      rapid.SampledFrom(names).Draw(t, "delName"),
				}
				tr.Delete(key.Namespace, key.Name)
				final[key] = nil
				delete(model, key)
			default:
				cur := model.merged()
				wantCh, wantPending := expectChanges(last, cur)
				if got := tr.Pending(); got != wantPending {
					t.Fatalf("Pending = %d, want %d", got, wantPending)
				}
				snap, ch := tr.Snapshot()
				if diff := cmp.Diff(wantCh, ch, cmpOpts); diff != "" {
					t.Fatalf("Changes (-want +got):\n%s", diff)
				}
				for name := range allNames {
					svc := types.NamespacedName{Namespace: name.Namespace, Name: name.Name}
					if diff := cmp.Diff(cur[svc][name], snap.Get(name), cmpOpts); diff != "" {
						t.Fatalf("endpoints of %v (-want +got):\n%s", name, diff)
					}
					checkPort(t, name, snap.Port(name))
				}
				checkPortsOf(t, snap, allNames, namespaces, services)
				last = cur
			}
		}
		snap, _ := tr.Snapshot()

		fresh := endpoints.NewTracker(family, filter)
		keys := slices.SortedFunc(maps.Keys(final), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		for _, key := range rapid.Permutation(keys).Draw(t, "order") {
			if final[key] != nil {
				_, _ = fresh.Update(final[key]) // its warnings were checked when it was first fed
			}
		}
		freshSnap, _ := fresh.Snapshot()
		for name := range allNames {
			if diff := cmp.Diff(freshSnap.Get(name), snap.Get(name), cmpOpts); diff != "" {
				t.Fatalf("endpoints of %v depend on history (-fresh +tracked):\n%s", name, diff)
			}
		}
	})
}

// checkPort fails t when port, what a Snapshot holds for the Service port
// name, has other Serving addresses than its Endpoints that are serving or
// ready, in their order, or when a slice has room beyond its length; when
// it says all are ready and unhinted and they are not (or the other way
// round), or that none runs on a node one runs on; or when PortOf of the
// endpoints of a port it holds says otherwise.
func checkPort(t *rapid.T, name servicemap.PortName, port endpoints.Port) {
	var want []netip.AddrPort
	readyUnhinted := len(port.Endpoints) > 0
	for _, ep := range port.Endpoints {
		if ep.Serving || ep.Ready {
			want = append(want, ep.AddrPort())
		}
		readyUnhinted = readyUnhinted && ep.Ready && len(ep.ZoneHints) == 0 && len(ep.NodeHints) == 0
		if ep.NodeName != "" && !port.MaybeOnNode(ep.NodeName) {
			t.Fatalf("%v says none of its endpoints runs on %q; %v does", name, ep.NodeName, ep.String())
		}
	}
	if diff := cmp.Diff(want, port.Serving, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Fatalf("Serving of %v (-want +got):\n%s", name, diff)
	}
	if cap(port.Serving) != len(port.Serving) {
		t.Fatalf("Serving of %v has room beyond its length: appending to one port's would write into another's", name)
	}
	if port.AllReadyUnhinted() != readyUnhinted {
		t.Fatalf("%v: AllReadyUnhinted = %v, want %v", name, port.AllReadyUnhinted(), readyUnhinted)
	}
	if port.MaybeOnNode("") {
		t.Fatalf("%v says an endpoint may run on a node named \"\"", name)
	}
	if len(port.Endpoints) == 0 { // a port that the Snapshot does not hold
		return
	}
	of := endpoints.PortOf(port.Endpoints)
	if !slices.Equal(of.Serving, port.Serving) || of.AllReadyUnhinted() != port.AllReadyUnhinted() {
		t.Fatalf("%v: PortOf its endpoints differs from the Snapshot's Port", name)
	}
	for _, node := range []string{"node-a", "node-b", "node-c", "other"} {
		if of.MaybeOnNode(node) != port.MaybeOnNode(node) {
			t.Fatalf("%v: PortOf its endpoints says MaybeOnNode(%q) = %v, the Snapshot's Port %v", name, node, of.MaybeOnNode(node), port.MaybeOnNode(node))
		}
	}
}

// checkPortsOf checks that PortsOf yields, for a sorted list of port
// names (those of names, and of Services with and without endpoints in
// namespaces before, among and after those of the snapshot), each with
// its index and what Port gives for it, and stops when told to.
func checkPortsOf(t *rapid.T, snap endpoints.Snapshot, names map[servicemap.PortName]bool, namespaces, services []string) {
	var ports []*servicemap.ServicePort
	for name := range names {
		ports = append(ports, &servicemap.ServicePort{Name: name})
	}
	for _, ns := range append([]string{"a", "zz"}, namespaces...) {
		for _, svc := range append([]string{"aaa", "zzz"}, services...) {
			ports = append(ports, &servicemap.ServicePort{Name: servicemap.PortName{Namespace: ns, Name: svc, Protocol: v1.ProtocolTCP}})
		}
	}
	slices.SortFunc(ports, func(a, b *servicemap.ServicePort) int { return a.Name.Compare(b.Name) })
	ports = slices.CompactFunc(ports, func(a, b *servicemap.ServicePort) bool { return a.Name == b.Name })
	from := rapid.IntRange(0, len(ports)).Draw(t, "portsFrom")
	ports = ports[from:]
	next := 0
	for i, got := range snap.PortsOf(ports) {
		if i != next {
			t.Fatalf("PortsOf yielded index %d, want %d", i, next)
		}
		if want := snap.Port(ports[i].Name); !reflect.DeepEqual(got, want) {
			t.Fatalf("PortsOf: %v: %+v, Port gives %+v", ports[i].Name, got, want)
		}
		next++
	}
	if next != len(ports) {
		t.Fatalf("PortsOf yielded %d of %d ports", next, len(ports))
	}
	if len(ports) > 1 {
		stop := rapid.IntRange(1, len(ports)-1).Draw(t, "portsStop")
		calls := 0
		for range snap.PortsOf(ports) {
			calls++
			if calls == stop {
				break
			}
		}
		if calls != stop {
			t.Fatalf("PortsOf went on after a break at %d: %d calls", stop, calls)
		}
	}
}
