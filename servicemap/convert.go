package servicemap

import (
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/affinity"
)

// FromService converts svc into its ServicePorts of the given family, sorted
// by PortName.
//
// When the Service is deliberately not proxied (ExternalName, headless, no
// cluster IP of the family, or not selected by filter) it returns no ports and
// skipped says why; this is not an error. Parts that are malformed are
// reported as warnings: a malformed port is skipped, a malformed external or
// load-balancer IP is dropped, and a malformed Service is skipped whole (then
// skipped is also set).
func FromService(svc *v1.Service, family v1.IPFamily, filter Filter) (ports []ServicePort, skipped string, warnings []svcproxy.Warning) {
	if svc == nil {
		return nil, "nil Service", nil
	}
	c := converter{svc: svc, family: family, report: svcproxy.Reporter{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}}
	ports, skipped = c.convert(filter)
	return ports, skipped, c.report.Warnings
}

type converter struct {
	svc    *v1.Service
	family v1.IPFamily
	report svcproxy.Reporter
}

func (c *converter) convert(filter Filter) ([]ServicePort, string) {
	svc := c.svc
	if ok, why := filter.Selects(svc.Labels); !ok {
		return nil, why
	}
	if errs := validation.IsDNS1123Label(svc.Namespace); len(errs) > 0 {
		return nil, c.report.Skipf("invalid namespace %q: %s", svc.Namespace, errs[0])
	}
	if errs := validation.IsDNS1123Label(svc.Name); len(errs) > 0 {
		return nil, c.report.Skipf("invalid name %q: %s", svc.Name, errs[0])
	}
	if c.family != v1.IPv4Protocol && c.family != v1.IPv6Protocol {
		return nil, c.report.Skipf("unknown IP family %q", c.family)
	}

	switch svc.Spec.Type {
	case v1.ServiceTypeExternalName:
		return nil, "ExternalName Service"
	case "", v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer:
	default:
		return nil, c.report.Skipf("unknown type %q", svc.Spec.Type)
	}

	clusterIP, skipped := c.clusterIP()
	if !clusterIP.IsValid() {
		return nil, skipped
	}

	policy, err := affinity.FromService(svc)
	if err != nil {
		return nil, c.report.Skipf("%v", err)
	}
	externalLocal, internalLocal, skipped := c.trafficPolicies()
	if skipped != "" {
		return nil, skipped
	}
	sourceRanges, skipped := c.sourceRanges()
	if skipped != "" {
		return nil, skipped
	}
	healthCheckNodePort, skipped := c.healthCheckNodePort(externalLocal)
	if skipped != "" {
		return nil, skipped
	}

	template := ServicePort{
		Family:                   c.family,
		ClusterIP:                clusterIP,
		ExternalIPs:              c.externalIPs(),
		LoadBalancerIPs:          c.loadBalancerIPs(),
		LoadBalancerSourceRanges: sourceRanges,
		ExternalPolicyLocal:      externalLocal,
		InternalPolicyLocal:      internalLocal,
		Affinity:                 policy,
		HealthCheckNodePort:      healthCheckNodePort,
	}
	if td := svc.Spec.TrafficDistribution; td != nil {
		template.TrafficDistribution = *td
	}

	ports := make([]ServicePort, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp, ok := c.port(&svc.Spec.Ports[i], template)
		if !ok {
			continue
		}
		// The API server refuses a port name listed twice; kube-proxy
		// keeps the last copy.
		if k := slices.IndexFunc(ports, func(p ServicePort) bool { return p.Name == sp.Name }); k >= 0 {
			c.report.Warnf("port %q/%s listed twice: the last copy used, as kube-proxy uses it", sp.Name.Port, sp.Name.Protocol)
			ports[k] = sp
			continue
		}
		ports = append(ports, sp)
	}
	if len(ports) == 0 {
		return nil, "no usable ports"
	}
	slices.SortFunc(ports, func(a, b ServicePort) int { return a.Name.Compare(b.Name) })
	return ports, ""
}

// clusterIP returns the Service's cluster IP of the family, or an invalid Addr
// and the reason the Service is skipped.
func (c *converter) clusterIP() (netip.Addr, string) {
	svc := c.svc
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if len(ips) == 0 {
		return netip.Addr{}, "no cluster IP"
	}
	if ips[0] == v1.ClusterIPNone {
		return netip.Addr{}, "headless Service"
	}
	var found netip.Addr
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil || !plainAddr(ip) || ip.IsUnspecified() {
			return netip.Addr{}, c.report.Skipf("invalid cluster IP %q", s)
		}
		if ipFamily(ip) == c.family && !found.IsValid() {
			found = ip
			c.warnSpecial("cluster IP", ip)
		}
	}
	if !found.IsValid() {
		return netip.Addr{}, "no " + string(c.family) + " cluster IP"
	}
	return found, ""
}

func (c *converter) trafficPolicies() (externalLocal, internalLocal bool, skipped string) {
	spec := &c.svc.Spec
	switch spec.ExternalTrafficPolicy {
	case "", v1.ServiceExternalTrafficPolicyCluster:
	case v1.ServiceExternalTrafficPolicyLocal:
		externalLocal = externallyAccessible(c.svc)
	default:
		return false, false, c.report.Skipf("unknown externalTrafficPolicy %q", spec.ExternalTrafficPolicy)
	}
	if itp := spec.InternalTrafficPolicy; itp != nil {
		switch *itp {
		case v1.ServiceInternalTrafficPolicyCluster:
		case v1.ServiceInternalTrafficPolicyLocal:
			internalLocal = true
		default:
			return false, false, c.report.Skipf("unknown internalTrafficPolicy %q", *itp)
		}
	}
	return externalLocal, internalLocal, ""
}

// externallyAccessible is true for the Service types whose traffic can come
// from outside the cluster, as the API defines it for externalTrafficPolicy.
func externallyAccessible(svc *v1.Service) bool {
	switch svc.Spec.Type {
	case v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer:
		return true
	case "", v1.ServiceTypeClusterIP:
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

func (c *converter) externalIPs() []netip.Addr {
	var ips []netip.Addr
	for _, s := range c.svc.Spec.ExternalIPs {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !plainAddr(ip) {
			c.report.Warnf("invalid externalIP %q dropped", s)
			continue
		}
		if !endpointAddr(ip) {
			c.report.Warnf("externalIP %q dropped: the API server refuses unspecified, loopback and link-local addresses there", s)
			continue
		}
		if ipFamily(ip) == c.family {
			ips = append(ips, ip)
			c.warnSpecial("externalIP", ip)
		}
	}
	return sortedAddrs(ips)
}

func (c *converter) loadBalancerIPs() []netip.Addr {
	if c.svc.Spec.Type != v1.ServiceTypeLoadBalancer {
		return nil
	}
	var ips []netip.Addr
	for _, ing := range c.svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // hostname-only ingress: nothing to serve locally
		}
		// Surrounding spaces are forgiven, as for externalIPs.
		ip, err := netip.ParseAddr(strings.TrimSpace(ing.IP))
		if err != nil || !plainAddr(ip) {
			c.report.Warnf("invalid load-balancer ingress IP %q dropped", ing.IP)
			continue
		}
		if ing.IPMode != nil && *ing.IPMode != v1.LoadBalancerIPModeVIP {
			// Proxy: the load balancer proxies, the IP is not a local
			// VIP. kube-proxy serves only ipMode VIP or unset, so an
			// unknown mode (which the API server refuses) is not
			// served either.
			if *ing.IPMode != v1.LoadBalancerIPModeProxy {
				c.report.Warnf("load-balancer ingress IP %s with unknown ipMode %q not served, as kube-proxy does not serve it", ip, *ing.IPMode)
			}
			continue
		}
		if ipFamily(ip) == c.family {
			ips = append(ips, ip)
			c.warnSpecial("load-balancer ingress IP", ip)
		}
	}
	return sortedAddrs(ips)
}

func (c *converter) sourceRanges() ([]netip.Prefix, string) {
	var prefixes []netip.Prefix
	for _, s := range c.svc.Spec.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return nil, c.report.Skipf("invalid loadBalancerSourceRange %q: Service skipped rather than served unfiltered", s)
		}
		if ipFamily(p.Addr()) == c.family {
			prefixes = append(prefixes, p.Masked())
		}
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int { return a.Compare(b) })
	return slices.Compact(prefixes), ""
}

func (c *converter) healthCheckNodePort(externalLocal bool) (uint16, string) {
	spec := &c.svc.Spec
	if spec.Type != v1.ServiceTypeLoadBalancer || !externalLocal || spec.HealthCheckNodePort == 0 {
		return 0, ""
	}
	if spec.HealthCheckNodePort < 0 || spec.HealthCheckNodePort > 65535 {
		return 0, c.report.Skipf("healthCheckNodePort %d out of range", spec.HealthCheckNodePort)
	}
	return uint16(spec.HealthCheckNodePort), ""
}

// port converts one Service port, or warns and reports false.
func (c *converter) port(p *v1.ServicePort, template ServicePort) (ServicePort, bool) {
	protocol := p.Protocol
	if protocol == "" {
		protocol = v1.ProtocolTCP
	}
	switch protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		c.report.Warnf("port %q: unknown protocol %q: port skipped", p.Name, p.Protocol)
		return ServicePort{}, false
	}
	if p.Name != "" {
		// The API server's rule for Service port names.
		if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
			c.report.Warnf("invalid port name %q: %s: port skipped", p.Name, errs[0])
			return ServicePort{}, false
		}
	}
	if p.Port < 1 || p.Port > 65535 {
		c.report.Warnf("port %q: port number %d out of range: port skipped", p.Name, p.Port)
		return ServicePort{}, false
	}
	if p.NodePort < 0 || p.NodePort > 65535 {
		c.report.Warnf("port %q: nodePort %d out of range: port skipped", p.Name, p.NodePort)
		return ServicePort{}, false
	}
	sp := template
	sp.Name = PortName{Namespace: c.svc.Namespace, Name: c.svc.Name, Port: p.Name, Protocol: protocol}
	sp.Port = uint16(p.Port)
	if c.svc.Spec.Type == v1.ServiceTypeNodePort || c.svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		sp.NodePort = uint16(p.NodePort)
	}
	return sp, true
}

// plainAddr reports whether ip is written in a form the API server accepts
// for Service addresses: without a zone and not IPv4-mapped IPv6 (its
// default StrictIPCIDRValidation refuses the latter, and leading zeros in
// IPv4 octets, which netip.ParseAddr refuses too).
func plainAddr(ip netip.Addr) bool {
	return ip.Zone() == "" && !ip.Is4In6()
}

// endpointAddr reports whether the API server accepts ip as an externalIP
// (its check for endpoint addresses): not unspecified, loopback, link-local
// unicast or link-local multicast. Other multicast addresses pass.
func endpointAddr(ip netip.Addr) bool {
	return !ip.IsUnspecified() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast()
}

// specialKind names the special-purpose range ip is in ("unspecified",
// "loopback", "link-local", "multicast"), or is "" for an ordinary address.
func specialKind(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	return ""
}

// warnSpecial warns that ip, a field's address of the converter's family
// in a special-purpose range, is served as kube-proxy serves it: its rules
// take such an address like any other (a loopback one also catches the
// node's own traffic to it).
func (c *converter) warnSpecial(field string, ip netip.Addr) {
	if kind := specialKind(ip); kind != "" {
		c.report.Warnf("%s %s %s served, as kube-proxy serves it", kind, field, ip)
	}
}

func ipFamily(ip netip.Addr) v1.IPFamily {
	if ip.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

func sortedAddrs(ips []netip.Addr) []netip.Addr {
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(ips)
}
