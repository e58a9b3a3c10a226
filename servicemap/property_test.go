package servicemap_test

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Generators that mostly draw well-formed values, so that many Services
// convert, and now and then a malformed one or an arbitrary string.

// mostly draws from good, or one time in eight from bad or an arbitrary
// string.
func mostly(good []string, bad ...string) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		// rapid favours the ends of a range: keep them for good values.
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

var (
	badIPs = []string{"None", "", "0.0.0.0", "::", "127.0.0.1", "::1", "169.254.169.254", "fe80::1", "fe80::1%eth0",
		"::ffff:10.0.0.1", "224.0.0.1", "ff02::1", "239.1.2.3", "ff05::1", " 192.0.2.3 ", "10.0.0.256", "1.2.3.4 -j ACCEPT", "10.96.0.01"}
	genIP   = mostly([]string{"10.96.0.1", "10.96.0.2", "192.0.2.1", "192.0.2.2", "fd00::1", "fd00::2", "2001:db8::1"}, badIPs...)
	genCIDR = mostly([]string{"10.0.0.0/8", "10.1.2.3/8", "192.0.2.0/24", "0.0.0.0/0", "2001:db8::/32", "::/0", " 192.0.2.0/24"},
		"10.0.0.0/33", "10.0.0.1", "fd00::/129", "")
	genNamespace = mostly([]string{"ns", "kube-system", "a"}, "", "Bad_NS", "ns\n-A X", strings.Repeat("n", 64))
	genName      = mostly([]string{"web", "dns", "api", "b", "1abc"}, "", "web.example", "bad name\n-j ACCEPT", strings.Repeat("w", 64))
	genPortName  = mostly([]string{"", "http", "https", "dns", "metrics-9090"}, "HTTP", "a_b", "123", "bad name\n-j ACCEPT", "abcdefghijklmnop")
	genProtocol  = rapid.Map(mostly([]string{"", "TCP", "UDP", "SCTP"}, "udp", "ICMP"), func(s string) v1.Protocol { return v1.Protocol(s) })
	genPortNum   = rapid.OneOf(
		rapid.SampledFrom([]int32{80, 1, 53, 443, 65535, 65536, 0, -1, 30080, 32767}),
		rapid.Int32(),
		rapid.Int32Range(1, 65535),
		rapid.Int32Range(1, 65535),
		rapid.Int32Range(1, 65535),
	)
	genType = rapid.Map(mostly([]string{"", "ClusterIP", "NodePort", "LoadBalancer", "LoadBalancer"}, "ExternalName", "Weird"), func(s string) v1.ServiceType {
		return v1.ServiceType(s)
	})
)

func maybe[T any](t *rapid.T, label string, g *rapid.Generator[T]) *T {
	if rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	v := g.Draw(t, label)
	return &v
}

func genLabels(t *rapid.T) map[string]string {
	switch rapid.IntRange(0, 20).Draw(t, "labels") {
	case 7, 8:
		return map[string]string{servicemap.LabelServiceProxyName: mostly([]string{"x", "other", ""}).Draw(t, "proxy")}
	case 9:
		return map[string]string{servicemap.LabelHeadless: ""}
	case 10:
		return map[string]string{"app": "x"}
	}
	return nil
}

func genService(t *rapid.T) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{
		Namespace: genNamespace.Draw(t, "namespace"),
		Name:      genName.Draw(t, "name"),
		Labels:    genLabels(t),
	}}
	spec := &svc.Spec
	spec.Type = genType.Draw(t, "type")
	spec.ClusterIPs = rapid.OneOf(
		rapid.SampledFrom([][]string{{"10.96.0.1"}, {"fd00::1"}, {"10.96.0.1", "fd00::1"}, {"fd00::2", "10.96.0.2"}}),
		rapid.SliceOfN(genIP, 0, 3),
	).Draw(t, "clusterIPs")
	if rapid.Bool().Draw(t, "legacyClusterIP") {
		spec.ClusterIP = genIP.Draw(t, "clusterIP")
	}
	for i, n := 0, rapid.SampledFrom([]int{1, 2, 3, 4, 0}).Draw(t, "ports"); i < n; i++ {
		spec.Ports = append(spec.Ports, v1.ServicePort{
			Name:     genPortName.Draw(t, "portName"),
			Protocol: genProtocol.Draw(t, "protocol"),
			Port:     genPortNum.Draw(t, "port"),
			NodePort: genPortNum.Draw(t, "nodePort"),
		})
	}
	spec.ExternalIPs = rapid.SliceOfN(genIP, 0, 4).Draw(t, "externalIPs")
	if rapid.IntRange(0, 3).Draw(t, "hasSourceRanges") == 0 {
		spec.LoadBalancerSourceRanges = rapid.SliceOfN(genCIDR, 1, 3).Draw(t, "sourceRanges")
	}
	for i, n := 0, rapid.IntRange(0, 4).Draw(t, "ingress"); i < n; i++ {
		spec := v1.LoadBalancerIngress{IP: genIP.Draw(t, "ingressIP"), Hostname: mostly([]string{"", "lb.example.com"}).Draw(t, "hostname")}
		spec.IPMode = maybe(t, "ipMode", rapid.Map(mostly([]string{"VIP", "Proxy"}), func(s string) v1.LoadBalancerIPMode { return v1.LoadBalancerIPMode(s) }))
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, spec)
	}
	spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(mostly([]string{"", "Cluster", "Local"}, "Nearby").Draw(t, "eTP"))
	spec.InternalTrafficPolicy = maybe(t, "iTP", rapid.Map(mostly([]string{"Cluster", "Local"}, "Node"), func(s string) v1.ServiceInternalTrafficPolicy {
		return v1.ServiceInternalTrafficPolicy(s)
	}))
	spec.TrafficDistribution = maybe(t, "trafficDistribution", mostly([]string{"PreferClose", "PreferSameZone"}))
	spec.SessionAffinity = v1.ServiceAffinity(mostly([]string{"", "None", "ClientIP"}, "Cookie").Draw(t, "affinity"))
	switch rapid.IntRange(0, 3).Draw(t, "affinityConfig") {
	case 1:
		spec.SessionAffinityConfig = &v1.SessionAffinityConfig{}
	case 2:
		spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{}}
	case 3:
		spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{
			TimeoutSeconds: maybe(t, "timeout", rapid.OneOf(rapid.SampledFrom([]int32{60, 1, 86400, 86401, 0, -1}),
				rapid.Int32Range(1, 86400), rapid.Int32Range(1, 86400), rapid.Int32())),
		}}
	}
	spec.HealthCheckNodePort = rapid.OneOf(rapid.Just[int32](0), genPortNum).Draw(t, "healthCheckNodePort")
	return svc
}

var genFamily = rapid.SampledFrom([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol})

var genFilter = rapid.Custom(func(t *rapid.T) servicemap.Filter {
	return servicemap.Filter{ProxyName: rapid.SampledFrom([]string{"", "", "x"}).Draw(t, "proxyName")}
})

// okClusterIP is the test's own idea of a cluster IP a Service may have:
// any address the API server can allocate from a ServiceCIDR (loopback,
// link-local and multicast ones included, as kube-proxy serves them), but
// not the unspecified one (no range hands it out), a zoned or an
// IPv4-mapped one.
func okClusterIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() {
		return netip.Addr{}, false
	}
	return ip, true
}

// okExternalIP is the test's own idea of an externalIP a Service may use:
// what the API server accepts there (no unspecified, loopback, link-local
// unicast or link-local multicast address), spaces trimmed.
func okExternalIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
		return netip.Addr{}, false
	}
	return ip, true
}

// okLoadBalancerIP is the test's own idea of a load-balancer ingress IP a
// Service may use: any address the API server accepts there, spaces
// trimmed.
func okLoadBalancerIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || ip.Zone() != "" || ip.Is4In6() {
		return netip.Addr{}, false
	}
	return ip, true
}

func familyOf(ip netip.Addr) v1.IPFamily {
	if ip.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// deliberate reports whether skipped is one of the reasons for which a
// Service is left alone on purpose, without a warning.
func deliberate(svc *v1.Service, family v1.IPFamily, filter servicemap.Filter, skipped string) bool {
	if svc == nil {
		return true
	}
	if ok, why := filter.Selects(svc.Labels); !ok {
		return skipped == why
	}
	switch skipped {
	case "ExternalName Service", "headless Service", "no cluster IP", "no " + string(family) + " cluster IP":
		return true
	case "no usable ports":
		return len(svc.Spec.Ports) == 0
	}
	return false
}

func TestPropertyFromService(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var svc *v1.Service
		if rapid.IntRange(0, 50).Draw(t, "nil") < 50 {
			svc = genService(t)
		}
		family := genFamily.Draw(t, "family")
		filter := genFilter.Draw(t, "filter")
		orig := svc.DeepCopy()

		got, skipped, warnings := servicemap.FromService(svc, family, filter)

		if diff := cmp.Diff(orig, svc); diff != "" {
			t.Fatalf("FromService modified its input (-before +after):\n%s", diff)
		}
		again, skipped2, warnings2 := servicemap.FromService(svc, family, filter)
		if diff := cmp.Diff(got, again, cmpOpts); diff != "" || skipped != skipped2 || !slices.Equal(warnings, warnings2) {
			t.Fatalf("FromService is not deterministic:\n%s", diff)
		}
		if (len(got) == 0) != (skipped != "") {
			t.Fatalf("%d ports with skip reason %q", len(got), skipped)
		}
		if svc == nil {
			return
		}
		for _, w := range warnings {
			if w.Kind != "Service" || w.Namespace != svc.Namespace || w.Name != svc.Name {
				t.Fatalf("warning %+v does not name the Service", w)
			}
			if strings.ContainsAny(w.Reason, "\n\r") {
				t.Fatalf("warning reason %q holds a raw line break", w.Reason)
			}
		}
		if len(got) == 0 {
			if !deliberate(svc, family, filter, skipped) && len(warnings) == 0 {
				t.Fatalf("Service skipped (%q) without a warning", skipped)
			}
			return
		}
		if ok, _ := filter.Selects(svc.Labels); !ok {
			t.Fatalf("a Service the filter refuses gave ports")
		}
		if svc.Spec.Type == v1.ServiceTypeExternalName {
			t.Fatalf("ExternalName Service gave ports")
		}
		checkPorts(t, svc, family, got)

		// Every port of the spec is in the result or warned about.
		if dropped := len(svc.Spec.Ports) - len(got); dropped > len(warnings) {
			t.Fatalf("%d ports dropped with only %d warnings", dropped, len(warnings))
		}
		// Every externalIP and LB IP is in the result (if of the family)
		// or named in a warning (if unusable).
		lbIPs := []string{}
		if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				if ing.IP != "" && (ing.IPMode == nil || *ing.IPMode == v1.LoadBalancerIPModeVIP) {
					lbIPs = append(lbIPs, ing.IP)
				}
			}
		}
		for _, list := range []struct {
			in  []string
			out []netip.Addr
			ok  func(string) (netip.Addr, bool)
		}{{svc.Spec.ExternalIPs, got[0].ExternalIPs, okExternalIP}, {lbIPs, got[0].LoadBalancerIPs, okLoadBalancerIP}} {
			for _, s := range list.in {
				ip, ok := list.ok(s)
				switch {
				case !ok && !slices.ContainsFunc(warnings, func(w svcproxy.Warning) bool { return strings.Contains(w.Reason, strconv.Quote(s)) }):
					t.Fatalf("unusable address %q dropped without a warning naming it: %v", s, warnings)
				case ok && familyOf(ip) == family && !slices.Contains(list.out, ip):
					t.Fatalf("address %q missing from %v", s, list.out)
				}
			}
		}
	})
}

// checkPorts checks that every ServicePort is well formed.
func checkPorts(t *rapid.T, svc *v1.Service, family v1.IPFamily, got []servicemap.ServicePort) {
	for i, sp := range got {
		if i > 0 && got[i-1].Name.Compare(sp.Name) >= 0 {
			t.Fatalf("ports not sorted and unique: %v then %v", got[i-1].Name, sp.Name)
		}
		if sp.Name.Namespace != svc.Namespace || sp.Name.Name != svc.Name {
			t.Fatalf("port %v does not belong to %s/%s", sp.Name, svc.Namespace, svc.Name)
		}
		if len(validation.IsDNS1123Label(sp.Name.Namespace)) > 0 || len(validation.IsDNS1123Label(sp.Name.Name)) > 0 {
			t.Fatalf("port %v has an invalid namespace or name", sp.Name)
		}
		if sp.Name.Port != "" && len(validation.IsDNS1123Label(sp.Name.Port)) > 0 {
			t.Fatalf("port %v has an invalid port name", sp.Name)
		}
		if !slices.Contains([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}, sp.Name.Protocol) {
			t.Fatalf("port %v has protocol %q", sp.Name, sp.Name.Protocol)
		}
		if sp.Family != family || sp.Port < 1 {
			t.Fatalf("port %v: family %q port %d", sp.Name, sp.Family, sp.Port)
		}
		if _, ok := okClusterIP(sp.ClusterIP.String()); !ok || familyOf(sp.ClusterIP) != family {
			t.Fatalf("port %v: cluster IP %v", sp.Name, sp.ClusterIP)
		}
		for _, l := range []struct {
			ips []netip.Addr
			ok  func(string) (netip.Addr, bool)
		}{{sp.ExternalIPs, okExternalIP}, {sp.LoadBalancerIPs, okLoadBalancerIP}} {
			for j, ip := range l.ips {
				if _, ok := l.ok(ip.String()); !ok || familyOf(ip) != family || (j > 0 && l.ips[j-1].Compare(ip) >= 0) {
					t.Fatalf("port %v: bad address list %v", sp.Name, l.ips)
				}
			}
		}
		for j, p := range sp.LoadBalancerSourceRanges {
			if !p.IsValid() || p != p.Masked() || familyOf(p.Addr()) != family || (j > 0 && sp.LoadBalancerSourceRanges[j-1].Compare(p) >= 0) {
				t.Fatalf("port %v: bad source ranges %v", sp.Name, sp.LoadBalancerSourceRanges)
			}
		}
		externallyTyped := svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer
		if sp.NodePort != 0 && !externallyTyped {
			t.Fatalf("port %v: nodePort %d on a %q Service", sp.Name, sp.NodePort, svc.Spec.Type)
		}
		if len(sp.LoadBalancerIPs) > 0 && svc.Spec.Type != v1.ServiceTypeLoadBalancer {
			t.Fatalf("port %v: load-balancer IPs on a %q Service", sp.Name, svc.Spec.Type)
		}
		if sp.HealthCheckNodePort != 0 && (svc.Spec.Type != v1.ServiceTypeLoadBalancer || !sp.ExternalPolicyLocal) {
			t.Fatalf("port %v: healthCheckNodePort without LoadBalancer and eTP Local", sp.Name)
		}
		if sp.ExternalPolicyLocal && (svc.Spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal ||
			!(externallyTyped || len(svc.Spec.ExternalIPs) > 0)) {
			t.Fatalf("port %v: eTP Local on a Service that is not externally accessible", sp.Name)
		}
		if s := sp.Affinity.Seconds(); s < 0 || s > 86400 {
			t.Fatalf("port %v: affinity %v", sp.Name, sp.Affinity)
		}
	}
}

// model is what a fresh FromService gives for each Service key.
type model map[types.NamespacedName][]servicemap.ServicePort

func diffModels(before, after model) servicemap.Changes {
	var ch servicemap.Changes
	flat := func(m model) map[servicemap.PortName]servicemap.ServicePort {
		out := map[servicemap.PortName]servicemap.ServicePort{}
		for _, ports := range m {
			for _, sp := range ports {
				out[sp.Name] = sp
			}
		}
		return out
	}
	b, a := flat(before), flat(after)
	for name, sp := range a {
		old, ok := b[name]
		switch {
		case !ok:
			ch.Added = append(ch.Added, name)
		case !old.Equal(&sp):
			ch.Changed = append(ch.Changed, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			ch.Removed = append(ch.Removed, name)
		}
	}
	for _, l := range []*[]servicemap.PortName{&ch.Added, &ch.Changed, &ch.Removed} {
		slices.SortFunc(*l, servicemap.PortName.Compare)
	}
	return ch
}

func flatPorts(m model) []servicemap.ServicePort {
	var out []servicemap.ServicePort
	for _, ports := range m {
		out = append(out, ports...)
	}
	slices.SortFunc(out, func(a, b servicemap.ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}

// TestPropertyTracker drives a Tracker with random updates, deletes and
// Snapshots over a few Service names and checks every Snapshot and its
// Changes against a model; at the end it checks that a fresh Tracker fed
// only each Service's final state, in any order, gives the same Snapshot.
func TestPropertyTracker(t *testing.T) {
	genSmallService := rapid.Custom(func(t *rapid.T) *v1.Service {
		svc := genService(t)
		svc.Namespace = rapid.SampledFrom([]string{"ns", "kube-system", "Bad_NS"}).Draw(t, "ns")
		svc.Name = rapid.SampledFrom([]string{"a", "b", "c", "bad name"}).Draw(t, "nm")
		return svc
	})
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily.Draw(t, "family")
		filter := genFilter.Draw(t, "filter")
		tr := servicemap.NewTracker(family, filter)
		final := map[types.NamespacedName]*v1.Service{} // nil: deleted
		current, last := model{}, model{}
		for step, n := 0, rapid.IntRange(1, 40).Draw(t, "steps"); step < n; step++ {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1, 2:
				svc := genSmallService.Draw(t, "svc")
				key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
				skipped, got := tr.Update(svc)
				final[key] = svc
				ports, wantSkipped, want := servicemap.FromService(svc, family, filter)
				if skipped != wantSkipped || !slices.Equal(got, want) {
					t.Fatalf("Update = %q, %v; FromService says %q, %v", skipped, got, wantSkipped, want)
				}
				if len(ports) > 0 {
					current[key] = ports
				} else {
					delete(current, key)
				}
			case 3:
				key := types.NamespacedName{
					Namespace: rapid.SampledFrom([]string{"ns", "kube-system", "Bad_NS"}).Draw(t, "delNS"),
					Name:      rapid.SampledFrom([]string{"a", "b", "c", "bad name"}).Draw(t, "delName"),
				}
				tr.Delete(key.Namespace, key.Name)
				final[key] = nil
				delete(current, key)
			default:
				pending := 0
				for key := range union(current, last) {
					if serviceChanged(current, last, key) {
						pending++
					}
				}
				if got := tr.Pending(); got != pending {
					t.Fatalf("Pending = %d, want %d", got, pending)
				}
				snap, ch := tr.Snapshot()
				if diff := cmp.Diff(diffModels(last, current), ch); diff != "" {
					t.Fatalf("Changes (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(flatPorts(current), snap.Ports(), cmpOpts); diff != "" {
					t.Fatalf("Snapshot (-want +got):\n%s", diff)
				}
				if snap.Len() != len(snap.Ports()) {
					t.Fatalf("Len = %d with %d ports", snap.Len(), len(snap.Ports()))
				}
				var all []servicemap.ServicePort
				for sp := range snap.All() {
					all = append(all, *sp)
				}
				if diff := cmp.Diff(snap.Ports(), all, cmpOpts); diff != "" {
					t.Fatalf("All differs from Ports (-Ports +All):\n%s", diff)
				}
				last = maps.Clone(current)
			}
		}
		snap, _ := tr.Snapshot()

		fresh := servicemap.NewTracker(family, filter)
		var keys []types.NamespacedName
		for key, svc := range final {
			if svc != nil {
				keys = append(keys, key)
			}
		}
		slices.SortFunc(keys, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		for _, key := range rapid.Permutation(keys).Draw(t, "order") {
			_, _ = fresh.Update(final[key]) // its warnings were checked when it was first fed
		}
		freshSnap, _ := fresh.Snapshot()
		if diff := cmp.Diff(freshSnap.Ports(), snap.Ports(), cmpOpts); diff != "" {
			t.Fatalf("Snapshot depends on history (-fresh +tracked):\n%s", diff)
		}
		if freshSnap.Len() != snap.Len() {
			t.Fatalf("Len %d, fresh %d", snap.Len(), freshSnap.Len())
		}
	})
}

func union(a, b model) map[types.NamespacedName]struct{} {
	out := map[types.NamespacedName]struct{}{}
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// serviceChanged reports whether the Service key differs between the two
// models.
func serviceChanged(a, b model, key types.NamespacedName) bool {
	return !slices.EqualFunc(a[key], b[key], func(x, y servicemap.ServicePort) bool { return x.Equal(&y) })
}
