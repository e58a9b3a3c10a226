package endpoints

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"unique"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	netutils "k8s.io/utils/net"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Slice is one EndpointSlice, parsed and checked: the Service it belongs to
// and its endpoints per Service port.
type Slice struct {
	// Service is the namespace and name of the owning Service.
	Service types.NamespacedName
	// Name is the slice's own name.
	Name string
	// Ports maps each usable port of the slice to its usable endpoints, in
	// the slice's order.
	Ports map[servicemap.PortName][]Endpoint
}

// FromSlice parses an EndpointSlice of the given family. When the slice is
// deliberately not used (other address family, FQDN, not selected by filter)
// it returns nil and skipped says why. Malformed parts are reported as
// warnings: a malformed endpoint or port is skipped, and a slice that cannot
// be tied to a Service is skipped whole (then skipped is also set).
func FromSlice(es *discovery.EndpointSlice, family v1.IPFamily, filter servicemap.Filter) (slice *Slice, skipped string, warnings []svcproxy.Warning) {
	if es == nil {
		return nil, "nil EndpointSlice", nil
	}
	t, skipped, warnings := parse(es, family, filter, false)
	if t == nil {
		return nil, skipped, warnings
	}
	slice = &Slice{Service: types.NamespacedName{Namespace: es.Namespace, Name: t.service}, Name: t.name, Ports: make(map[servicemap.PortName][]Endpoint, len(t.ports))}
	for _, p := range t.ports {
		slice.Ports[p.name] = p.eps
	}
	return slice, skipped, warnings
}

// parse is FromSlice with the slice's ports in a list, for a non-nil es:
// each port's endpoints in the slice's order, or sorted by address and
// port when sorted is set (sorted once, before the copy for each port;
// copies of one address in the slice's order).
func parse(es *discovery.EndpointSlice, family v1.IPFamily, filter servicemap.Filter, sorted bool) (*tracked, string, []svcproxy.Warning) {
	p := parser{es: es, report: svcproxy.Reporter{Kind: "EndpointSlice", Namespace: es.Namespace, Name: es.Name}, sorted: sorted}
	t, skipped := p.parse(family, filter)
	return t, skipped, p.report.Warnings
}

type parser struct {
	es     *discovery.EndpointSlice
	report svcproxy.Reporter
	// sorted sorts the endpoints by address (parse).
	sorted bool
}

func (p *parser) parse(family v1.IPFamily, filter servicemap.Filter) (*tracked, string) {
	es := p.es
	if ok, why := filter.Selects(es.Labels); !ok {
		return nil, why
	}
	if errs := validation.IsDNS1123Label(es.Namespace); len(errs) > 0 {
		return nil, p.report.Skipf("invalid namespace %q: %s", es.Namespace, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(es.Name); len(errs) > 0 {
		return nil, p.report.Skipf("invalid name %q: %s", es.Name, errs[0])
	}
	service, labelled := es.Labels[discovery.LabelServiceName]
	if !labelled {
		return nil, p.report.Skipf("no %s label", discovery.LabelServiceName)
	}
	if errs := validation.IsDNS1123Label(service); len(errs) > 0 {
		return nil, p.report.Skipf("invalid %s label %q: %s", discovery.LabelServiceName, service, errs[0])
	}
	switch es.AddressType {
	case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6:
		if string(es.AddressType) != string(family) {
			return nil, "address type " + string(es.AddressType)
		}
	case discovery.AddressTypeFQDN:
		return nil, "address type FQDN"
	default:
		return nil, p.report.Skipf("unknown address type %q", es.AddressType)
	}

	slice := &tracked{service: service, name: es.Name}
	eps := p.endpoints(family)
	if p.sorted {
		// Every copy below has one port, so it is then sorted by address
		// and port. Stable: copies of one address keep the slice's order,
		// which decides the copy that Merge keeps.
		slices.SortStableFunc(eps, func(a, b Endpoint) int { return a.Compare(&b) })
	}
	for i := range es.Ports {
		name, number, ok := p.port(&es.Ports[i])
		if !ok {
			continue
		}
		name.Namespace, name.Name = es.Namespace, service
		withPort := make([]Endpoint, len(eps))
		for j, ep := range eps {
			ep.Port = number
			withPort[j] = ep
		}
		k := slices.IndexFunc(slice.ports, func(sp slicePort) bool { return sp.name == name })
		if k < 0 {
			slice.ports = append(slice.ports, slicePort{name, withPort})
			continue
		}
		// The API server refuses a port name listed twice; kube-proxy
		// serves the endpoints of every copy (a copy with a number already
		// listed adds nothing).
		p.report.Warnf("port %q/%s listed twice: the endpoints of every copy used, as kube-proxy uses them", name.Port, name.Protocol)
		sp := &slice.ports[k]
		if slices.ContainsFunc(sp.eps, func(e Endpoint) bool { return e.Port == number }) {
			continue
		}
		sp.eps = append(sp.eps, withPort...)
		if p.sorted {
			slices.SortStableFunc(sp.eps, func(a, b Endpoint) int { return a.Compare(&b) })
		}
	}
	return slice, ""
}

// port checks one slice port. A port without a number is ignored silently,
// as the API allows it ("all ports"); kube-proxy ignores it, and one
// numbered 0 (which this skips with a warning). A port without a name is skipped, as kube-proxy skips it (the
// API server sets ""); one without a protocol is TCP, the API's default
// (kube-proxy cannot read it).
func (p *parser) port(port *discovery.EndpointPort) (servicemap.PortName, uint16, bool) {
	var name servicemap.PortName
	if port.Name == nil {
		p.report.Warnf("port with no name: skipped, as kube-proxy skips it")
		return name, 0, false
	}
	name.Port = *port.Name
	name.Protocol = v1.ProtocolTCP
	if port.Protocol != nil {
		name.Protocol = *port.Protocol
	}
	switch name.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		p.report.Warnf("port %q: unknown protocol %q: port skipped", name.Port, name.Protocol)
		return name, 0, false
	}
	if name.Port != "" {
		// The API server's rule for EndpointSlice and Service port names.
		if errs := validation.IsDNS1123Label(name.Port); len(errs) > 0 {
			p.report.Warnf("invalid port name %q: %s: port skipped", name.Port, errs[0])
			return name, 0, false
		}
	}
	if port.Port == nil {
		return name, 0, false
	}
	if *port.Port < 1 || *port.Port > 65535 {
		p.report.Warnf("port %q: port number %d out of range: port skipped", name.Port, *port.Port)
		return name, 0, false
	}
	return name, uint16(*port.Port), true
}

// endpoints parses the slice's endpoints, without ports.
func (p *parser) endpoints(family v1.IPFamily) []Endpoint {
	eps := make([]Endpoint, 0, len(p.es.Endpoints))
	for i := range p.es.Endpoints {
		e := &p.es.Endpoints[i]
		if len(e.Addresses) == 0 {
			p.report.Warnf("endpoint %d has no address: skipped", i)
			continue
		}
		addr, ok := p.address(i, e.Addresses[0])
		if !ok {
			continue
		}
		if addr.Is4() != (family == v1.IPv4Protocol) {
			p.report.Warnf("endpoint %d: address %s is not %s: skipped", i, addr, family)
			continue
		}
		ep := Endpoint{
			Addr:        addr,
			Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
			Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
			Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
		}
		if e.NodeName != nil {
			ep.NodeName = intern(*e.NodeName)
		}
		if e.Zone != nil {
			ep.Zone = intern(*e.Zone)
		}
		if h := e.Hints; h != nil {
			for _, z := range h.ForZones {
				ep.ZoneHints = append(ep.ZoneHints, z.Name)
			}
			for _, n := range h.ForNodes {
				ep.NodeHints = append(ep.NodeHints, n.Name)
			}
			ep.ZoneHints = sortedSet(ep.ZoneHints)
			ep.NodeHints = sortedSet(ep.NodeHints)
		}
		eps = append(eps, ep)
	}
	return eps
}

// address parses an endpoint's address (endpoint i's first, the one
// kube-proxy uses) as kube-proxy reads it: IPv4 octets with leading zeros
// as decimal and an IPv4-mapped IPv6 address as IPv4 (the API server
// accepts both when its StrictIPCIDRValidation gate is off), both with a
// warning. The addresses the API server always refuses for endpoints
// (unspecified, loopback, link-local, link-local multicast) are skipped: a
// loopback or link-local backend would send Service traffic to the node's
// own daemons or to the metadata service. Other multicast addresses are
// used, as kube-proxy uses them, with a warning.
func (p *parser) address(i int, s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	addr, err := netip.ParseAddr(s)
	if err != nil || addr.Is4In6() {
		addr = netip.Addr{}
		if ip := netutils.ParseIPSloppy(s); ip != nil {
			if ip4 := ip.To4(); ip4 != nil {
				addr = netip.AddrFrom4([4]byte(ip4))
			} else {
				addr = netip.AddrFrom16([16]byte(ip))
			}
			p.report.Warnf("endpoint %d: address %q read as %s, as kube-proxy reads it", i, s, addr)
		}
	}
	if !addr.IsValid() || addr.Zone() != "" || addr.IsUnspecified() || addr.IsLoopback() ||
		addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() {
		p.report.Warnf("endpoint %d: invalid address %q: skipped", i, s)
		return netip.Addr{}, false
	}
	if addr.IsMulticast() {
		p.report.Warnf("endpoint %d: multicast address %s used, as kube-proxy uses it", i, addr)
	}
	return addr, true
}

// intern returns s, sharing its bytes with every other interned copy: the
// endpoints of a cluster name a few nodes and zones many times over, and
// comparing a name with the node's is then a read of one shared string.
func intern(s string) string { return unique.Make(s).Value() }

func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// Merge merges the parsed slices of one Service into the endpoints of each
// port, deduplicated and sorted. Of several copies of one address and port
// it keeps the one kube-proxy keeps when it reads the slices in the order
// of their names, each slice's endpoints in the slice's order: the last
// copy that is not terminating, or the first copy when all are (see
// pick). The result does not depend on the order of parsed; slices that
// share a name (which one Service's cannot) are told apart by their
// copies' fields.
func Merge(parsed []*Slice) map[servicemap.PortName][]Endpoint {
	copies := map[servicemap.PortName][]sourced{}
	for _, s := range parsed {
		if s == nil {
			continue
		}
		for name, eps := range s.Ports {
			copies[name] = appendSourced(copies[name], eps, s.Name)
		}
	}
	return dedupAll(copies)
}

// appendSourced appends the copies of eps, from the slice named slice, to
// dst, each with its index in eps.
func appendSourced(dst []sourced, eps []Endpoint, slice string) []sourced {
	for i, ep := range eps {
		dst = append(dst, sourced{ep, slice, i})
	}
	return dst
}

// dedupAll is dedup of each port's copies.
func dedupAll(copies map[servicemap.PortName][]sourced) map[servicemap.PortName][]Endpoint {
	merged := make(map[servicemap.PortName][]Endpoint, len(copies))
	for name, cs := range copies {
		merged[name] = dedup(cs)
	}
	return merged
}

// sourced is one copy of an endpoint, the name of the slice it came from
// and its index there (among copies of one address and port, the order of
// indexes is the slice's order).
type sourced struct {
	ep    Endpoint
	slice string
	index int
}

// dedup sorts the copies by address and port, then in the order kube-proxy
// reads them (slice name, then index), and keeps one copy of each address
// and port (pick). The order is total, so the result does not depend on
// the order the copies came in.
func dedup(cs []sourced) []Endpoint {
	slices.SortFunc(cs, func(a, b sourced) int {
		return cmp.Or(
			a.ep.Compare(&b.ep),
			strings.Compare(a.slice, b.slice),
			cmp.Compare(a.index, b.index),
			compareRest(&a.ep, &b.ep),
		)
	})
	out := make([]Endpoint, 0, len(cs))
	for i := 0; i < len(cs); {
		j := i + 1
		for j < len(cs) && cs[j].ep.AddrPort() == cs[i].ep.AddrPort() {
			j++
		}
		out = append(out, cs[i+pick(cs[i:j])].ep)
		i = j
	}
	return slices.Clip(out)
}

// pick returns the index of the copy of one address and port, among cs,
// that kube-proxy keeps when it reads them in their order: the last copy
// that is not terminating, or the first when all are (a pod that reuses
// the address of a terminating one wins over it; of several copies that
// are not terminating, the last read wins). kube-proxy reads the slices of
// a Service in the order of a Go map, so where copies in different slices
// differ, its choice varies between runs; Merge's fixed order is one of
// kube-proxy's orders.
func pick(cs []sourced) int {
	i := 0
	for j := range cs {
		if !cs[j].ep.Terminating {
			i = j
		}
	}
	return i
}

// compareRest orders copies that slice name and index cannot tell apart
// (slices that share a name) by their other fields.
func compareRest(a, b *Endpoint) int {
	return cmp.Or(
		cmp.Compare(boolInt(a.Terminating), boolInt(b.Terminating)),
		cmp.Compare(boolInt(a.Ready), boolInt(b.Ready)),
		cmp.Compare(boolInt(a.Serving), boolInt(b.Serving)),
		strings.Compare(a.NodeName, b.NodeName),
		strings.Compare(a.Zone, b.Zone),
		slices.Compare(a.ZoneHints, b.ZoneHints),
		slices.Compare(a.NodeHints, b.NodeHints),
	)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
