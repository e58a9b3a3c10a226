//go:build linux

package differential

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"pgregory.net/rapid"
)

// state is a cluster state: the proxy's own Node's zone, and Services with
// their EndpointSlices. Objects are named for the state's index when
// applied, so that no name survives from one state to the next.
type state struct {
	zone     string // the own Node's topology zone; "" for none
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

// Address pools (see package netns for the ranges).
var (
	// endpoint k is pod 198.18.(64+k).2 / 2001:db8:18:(40+k)::2.
	endpointPool = 12
	// external and load-balancer IPs, outside the Service CIDRs.
	externalPool4 = netip.MustParseAddr("198.19.50.1")
	externalPool6 = netip.MustParseAddr("2001:db8:19:50::1")
	lbPool4       = netip.MustParseAddr("198.19.100.1")
	lbPool6       = netip.MustParseAddr("2001:db8:19:100::1")
	// specialLB4/6 are load-balancer IPs in special-purpose ranges, which
	// the API server accepts there (it checks an ingress IP's form only)
	// and kube-proxy serves: unspecified, loopback, link-local, link-local
	// multicast, multicast. They are outside the test ranges by nature,
	// and harmless: every rule lives in a test namespace's own tables.
	specialLB4 = []string{"0.0.0.0", "127.0.0.5", "127.0.5.7", "169.254.169.254", "224.0.0.5", "239.1.2.3"}
	specialLB6 = []string{"::", "::1", "fe80::5", "ff02::5", "ff05::5"}
	// specialServiceCIDRs are ServiceCIDRs in special-purpose ranges,
	// which the API server accepts (any well-formed CIDR), so that cluster
	// IPs in them reach the proxies: loopback (::/127, whose one address
	// handed out is ::1), link-local, link-local multicast, multicast.
	// They leave out 127.0.0.1, which the proxies' own servers listen on.
	specialServiceCIDRs = [][]string{{"127.0.5.0/28", "::/127"}, {"169.254.5.0/28", "fe80::5:0/112"},
		{"224.0.0.240/28", "ff02::5:0/112"}, {"239.5.0.0/28", "ff05::5:0/112"}}
	// sourceRanges are what loadBalancerSourceRanges are drawn from: the
	// first outside client, the pods, the node.
	sourceRanges = []string{"198.18.32.0/24", "198.18.64.0/18", "198.18.0.1/32", "2001:db8:18:20::/64", "2001:db8:18:40::/58", "2001:db8:18::1/128"}
	nodeNames    = []string{nodeName, "node-b", "node-c"}
	zones        = map[string]string{nodeName: "zone-a", "node-b": "zone-a", "node-c": "zone-b"}
)

// podAddr is pod k's address in a family.
func podAddr(k int, ipv6 bool) netip.Addr {
	if ipv6 {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x18, 0, byte(0x40 + k), 15: 2})
	}
	return netip.AddrFrom4([4]byte{198, 18, byte(64 + k), 2})
}

// nth is the address n after base.
func nth(base netip.Addr, n int) netip.Addr {
	for range n {
		base = base.Next()
	}
	return base
}

func ptr[T any](v T) *T { return &v }

// genState draws a state of up to 6 Services.
func genState(t *rapid.T) state {
	s := state{zone: rapid.SampledFrom([]string{"zone-a", "zone-b", ""}).Draw(t, "zone")}
	n := rapid.IntRange(1, 6).Draw(t, "services")
	for i := range n {
		svc, eps := genService(t, i)
		s.services = append(s.services, svc)
		s.slices = append(s.slices, eps...)
	}
	return s
}

// genService draws Service i (named "s<i>" until applied) and its
// EndpointSlices.
func genService(t *rapid.T, i int) (*v1.Service, []*discovery.EndpointSlice) {
	name := fmt.Sprintf("s%d", i)
	svc := &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}
	sp := &svc.Spec
	families := rapid.SampledFrom([][]v1.IPFamily{{v1.IPv4Protocol}, {v1.IPv6Protocol},
		{v1.IPv4Protocol, v1.IPv6Protocol}, {v1.IPv6Protocol, v1.IPv4Protocol}}).Draw(t, name+".families")
	sp.IPFamilies = families
	sp.IPFamilyPolicy = ptr(v1.IPFamilyPolicySingleStack)
	if len(families) == 2 {
		sp.IPFamilyPolicy = ptr(v1.IPFamilyPolicyRequireDualStack)
	}
	headless := rapid.IntRange(0, 14).Draw(t, name+".headless") == 0
	sp.Type = v1.ServiceTypeClusterIP
	if headless {
		sp.ClusterIP = v1.ClusterIPNone
	} else {
		sp.Type = rapid.SampledFrom([]v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer}).Draw(t, name+".type")
		// One single-stack Service in five has its cluster IP from a
		// ServiceCIDR in a special range (address i+1 of it, so that
		// the Services of a state do not collide, where the range
		// holds it).
		if len(families) == 1 && rapid.IntRange(0, 4).Draw(t, name+".specialClusterIP") == 0 {
			var cidrs []netip.Prefix
			for _, c := range specialServiceCIDRs {
				for _, p := range c {
					if q := netip.MustParsePrefix(p); q.Addr().Is6() == (families[0] == v1.IPv6Protocol) {
						cidrs = append(cidrs, q)
					}
				}
			}
			cidr := rapid.SampledFrom(cidrs).Draw(t, name+".specialServiceCIDR")
			if ip := nth(cidr.Addr(), i+1); cidr.Contains(ip) {
				sp.ClusterIP = ip.String()
				sp.ClusterIPs = []string{sp.ClusterIP}
			}
		}
	}

	nports := rapid.IntRange(1, 3).Draw(t, name+".ports")
	used := map[string]bool{}
	for j := range nports {
		proto := rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}).Draw(t, fmt.Sprintf("%s.p%d.protocol", name, j))
		port := rapid.SampledFrom([]int32{80, 443, 53, 8080}).Draw(t, fmt.Sprintf("%s.p%d.port", name, j))
		if used[fmt.Sprint(proto, port)] {
			continue
		}
		used[fmt.Sprint(proto, port)] = true
		// Port names are mostly short; now and then one that the API
		// server accepts but an IANA service name could not be (longer
		// than 15 characters, or digits only).
		portName := rapid.SampledFrom([]string{"p%d", "p%d", "p%d", "p%d", "p%d", "p%d", "a-long-port-name-%d", "900%d"}).Draw(t, fmt.Sprintf("%s.p%d.name", name, j))
		p := v1.ServicePort{Name: fmt.Sprintf(portName, j), Protocol: proto, Port: port, TargetPort: intstr.FromInt32(8000 + int32(j))}
		if rapid.Bool().Draw(t, fmt.Sprintf("%s.p%d.named", name, j)) {
			p.TargetPort = intstr.FromString(fmt.Sprintf("t%d", j))
		}
		sp.Ports = append(sp.Ports, p)
	}
	if len(sp.Ports) == 1 && rapid.Bool().Draw(t, name+".unnamed") {
		sp.Ports[0].Name = ""
	}

	if !headless {
		for k := range rapid.IntRange(0, 2).Draw(t, name+".externalIPs") {
			ipv6 := rapid.Bool().Draw(t, fmt.Sprintf("%s.ext%d.ipv6", name, k))
			base := externalPool4
			if ipv6 {
				base = externalPool6
			}
			ip := nth(base, rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("%s.ext%d", name, k))).String()
			if !slices.Contains(sp.ExternalIPs, ip) {
				sp.ExternalIPs = append(sp.ExternalIPs, ip)
			}
		}
	}
	if sp.Type == v1.ServiceTypeLoadBalancer {
		if rapid.IntRange(0, 3).Draw(t, name+".noLBNodePorts") == 0 {
			sp.AllocateLoadBalancerNodePorts = ptr(false)
		}
		for _, r := range sourceRanges {
			if rapid.IntRange(0, 3).Draw(t, name+".range "+r) == 0 {
				sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, r)
			}
		}
	}
	if sp.Type != v1.ServiceTypeClusterIP && rapid.IntRange(0, 2).Draw(t, name+".eTPLocal") == 0 {
		sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	if rapid.IntRange(0, 3).Draw(t, name+".iTPLocal") == 0 {
		sp.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
	}
	if !headless && rapid.IntRange(0, 3).Draw(t, name+".affinity") == 0 {
		sp.SessionAffinity = v1.ServiceAffinityClientIP
		if timeout := rapid.SampledFrom([]int32{0, 60, 86400}).Draw(t, name+".affinityTimeout"); timeout != 0 {
			sp.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
		}
	}
	if td := rapid.SampledFrom([]string{"", "", v1.ServiceTrafficDistributionPreferClose,
		v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode}).Draw(t, name+".trafficDistribution"); td != "" {
		sp.TrafficDistribution = &td
	}
	if sp.Type == v1.ServiceTypeLoadBalancer {
		for k := range rapid.IntRange(0, 2).Draw(t, name+".lbIPs") {
			ipv6 := rapid.Bool().Draw(t, fmt.Sprintf("%s.lb%d.ipv6", name, k))
			base := lbPool4
			if ipv6 {
				base = lbPool6
			}
			ing := v1.LoadBalancerIngress{IP: nth(base, rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("%s.lb%d", name, k))).String()}
			if rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("%s.lb%d.special", name, k)) == 0 {
				special := specialLB4
				if ipv6 {
					special = specialLB6
				}
				ing.IP = rapid.SampledFrom(special).Draw(t, fmt.Sprintf("%s.lb%d.specialIP", name, k))
			}
			if rapid.IntRange(0, 5).Draw(t, fmt.Sprintf("%s.lb%d.proxyMode", name, k)) == 0 {
				ing.IPMode = ptr(v1.LoadBalancerIPModeProxy)
			}
			if !slices.ContainsFunc(svc.Status.LoadBalancer.Ingress, func(o v1.LoadBalancerIngress) bool { return o.IP == ing.IP }) {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
			}
		}
	}

	var eps []*discovery.EndpointSlice
	for _, fam := range families {
		// One Service in ten lists an address twice (in one slice or two).
		used := map[int]bool{}
		if rapid.IntRange(0, 9).Draw(t, fmt.Sprintf("%s.%s.duplicates", name, fam)) == 0 {
			used = nil
		}
		// One Service family in five has hints as no controller writes
		// them, on every endpoint.
		odd := rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("%s.%s.oddHints", name, fam)) == 0
		for k := range rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("%s.%s.slices", name, fam)) {
			eps = append(eps, genSlice(t, svc, fam, fmt.Sprintf("%s-%s-%d", name, strings.ToLower(string(fam)), k), used, odd))
		}
		// Now and then a slice both proxies must ignore: one with no
		// service-name label, one labelled for the Service in another
		// namespace (its endpoints belong to a Service of that name
		// there).
		stray := fmt.Sprintf("%s-%s-stray", name, strings.ToLower(string(fam)))
		switch rapid.IntRange(0, 11).Draw(t, stray) {
		case 0:
			es := genSlice(t, svc, fam, stray, map[int]bool{}, false)
			delete(es.Labels, discovery.LabelServiceName)
			eps = append(eps, es)
		case 1:
			es := genSlice(t, svc, fam, stray, map[int]bool{}, false)
			es.Namespace = otherNamespace
			eps = append(eps, es)
		}
	}
	// One Service in ten has an FQDN slice, which both proxies ignore.
	if rapid.IntRange(0, 9).Draw(t, name+".fqdn") == 0 {
		es := genSlice(t, svc, v1.IPv4Protocol, name+"-fqdn", map[int]bool{}, false)
		es.AddressType = discovery.AddressTypeFQDN
		for k := range es.Endpoints {
			es.Endpoints[k].Addresses = []string{fmt.Sprintf("pod-%d.%s.example.test", k, name)}
		}
		eps = append(eps, es)
	}
	return svc, eps
}

// genSlice draws an EndpointSlice of svc in family fam. Its endpoints'
// addresses are not in used, and are added to it, unless used is nil.
// With oddHints every endpoint has hints as no controller writes them:
// for one or two zones of zone-a, zone-b and "" (the zone of a Node
// without a zone label), and for any nodes.
func genSlice(t *rapid.T, svc *v1.Service, fam v1.IPFamily, name string, used map[int]bool, oddHints bool) *discovery.EndpointSlice {
	ipv6 := fam == v1.IPv6Protocol
	es := &discovery.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			discovery.LabelServiceName: svc.Name, discovery.LabelManagedBy: "svcproxy-diff"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{},
	}
	if ipv6 {
		es.AddressType = discovery.AddressTypeIPv6
	}
	for j, p := range svc.Spec.Ports {
		if rapid.IntRange(0, 9).Draw(t, fmt.Sprintf("%s.port%d.missing", name, j)) == 0 {
			continue
		}
		port := discovery.EndpointPort{Name: ptr(p.Name), Protocol: ptr(p.Protocol), Port: ptr(8000 + int32(j))}
		// Now and then a port both proxies ignore: no number ("all
		// ports"), or 0.
		switch rapid.IntRange(0, 19).Draw(t, fmt.Sprintf("%s.port%d.number", name, j)) {
		case 0:
			port.Port = nil
		case 1:
			port.Port = ptr[int32](0)
		}
		es.Ports = append(es.Ports, port)
	}
	// Now and then a port no Service port names.
	if rapid.IntRange(0, 9).Draw(t, name+".extraPort") == 0 {
		es.Ports = append(es.Ports, discovery.EndpointPort{Name: ptr("extra"), Protocol: ptr(v1.ProtocolTCP), Port: ptr[int32](8002)})
	}
	for k := range rapid.IntRange(0, 4).Draw(t, name+".endpoints") {
		pod := rapid.IntRange(0, endpointPool-1).Draw(t, fmt.Sprintf("%s.ep%d", name, k))
		for used != nil && used[pod] { // at most 8 of 12 are used
			pod = (pod + 1) % endpointPool
		}
		if used != nil {
			used[pod] = true
		}
		ep := discovery.Endpoint{Addresses: []string{podAddr(pod, ipv6).String()}}
		// Now and then more addresses: the first is the endpoint's.
		if rapid.IntRange(0, 7).Draw(t, fmt.Sprintf("%s.ep%d.addresses", name, k)) == 0 {
			more := (pod + rapid.IntRange(1, endpointPool-1).Draw(t, fmt.Sprintf("%s.ep%d.address2", name, k))) % endpointPool
			ep.Addresses = append(ep.Addresses, podAddr(more, ipv6).String()) // a set: no address twice
		}
		if node := rapid.IntRange(-1, len(nodeNames)-1).Draw(t, fmt.Sprintf("%s.ep%d.node", name, k)); node >= 0 {
			ep.NodeName = ptr(nodeNames[node])
			if rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("%s.ep%d.nozone", name, k)) != 0 {
				ep.Zone = ptr(zones[nodeNames[node]])
			}
		}
		switch rapid.IntRange(0, 6).Draw(t, fmt.Sprintf("%s.ep%d.conditions", name, k)) {
		case 0, 1: // ready
			ep.Conditions = discovery.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
		case 2: // serving, terminating
			ep.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
		case 3: // not serving, terminating
			ep.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
		case 4: // not ready
			ep.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
		case 5: // each condition unset (ready, serving; not terminating) or either value
			cond := func(c string) *bool {
				switch rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("%s.ep%d.%s", name, k, c)) {
				case 0:
					return nil
				case 1:
					return ptr(false)
				}
				return ptr(true)
			}
			ep.Conditions = discovery.EndpointConditions{Ready: cond("ready"), Serving: cond("serving"), Terminating: cond("terminating")}
		}
		if oddHints {
			ep.Hints = &discovery.EndpointHints{}
			for _, z := range rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"zone-a", "zone-b", ""}), 1, 2, rapid.ID[string]).Draw(t, fmt.Sprintf("%s.ep%d.zoneHints", name, k)) {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: z})
			}
			for _, n := range nodeNames {
				if rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("%s.ep%d.nodeHint %s", name, k, n)) == 0 {
					ep.Hints.ForNodes = append(ep.Hints.ForNodes, discovery.ForNode{Name: n})
				}
			}
		} else if rapid.Bool().Draw(t, fmt.Sprintf("%s.ep%d.hints", name, k)) {
			ep.Hints = &discovery.EndpointHints{}
			if ep.Zone != nil {
				ep.Hints.ForZones = []discovery.ForZone{{Name: *ep.Zone}}
			}
			if ep.NodeName != nil && rapid.Bool().Draw(t, fmt.Sprintf("%s.ep%d.nodeHint", name, k)) {
				ep.Hints.ForNodes = []discovery.ForNode{{Name: *ep.NodeName}}
			}
		}
		es.Endpoints = append(es.Endpoints, ep)
	}
	return es
}

// named returns copies of s's objects named for state index i
// ("d<i>-s<n>…"), so that no name is reused from one state to the next.
func (s state) named(i int) state {
	prefix := fmt.Sprintf("d%d-", i)
	out := state{zone: s.zone}
	for _, svc := range s.services {
		svc = svc.DeepCopy()
		svc.Name = prefix + svc.Name
		out.services = append(out.services, svc)
	}
	for _, es := range s.slices {
		es = es.DeepCopy()
		es.Name = prefix + es.Name
		if svc, ok := es.Labels[discovery.LabelServiceName]; ok {
			es.Labels[discovery.LabelServiceName] = prefix + svc
		}
		out.slices = append(out.slices, es)
	}
	return out
}

// ownNode is the proxies' Node in zone (none when ""), with the node
// addresses.
func ownNode(zone string) *v1.Node {
	n := &v1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: nodeAddr4.String()},
			{Type: v1.NodeInternalIP, Address: nodeAddr6.String()},
		}},
	}
	if zone != "" {
		n.Labels[v1.LabelTopologyZone] = zone
	}
	return n
}
