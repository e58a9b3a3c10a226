package nftables

import (
	"cmp"
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/ruleset"
)

// container is the map or set of the table an element belongs to.
type container uint8

const (
	inClusterIPs container = iota
	inServiceIPs
	inServiceNodePorts
	inNoEndpointServices
	inNoEndpointNodePorts
	inFirewallIPs
)

// containerNames are the names of the containers in the table.
var containerNames = [...]string{
	inClusterIPs:          setClusterIPs,
	inServiceIPs:          mapServiceIPs,
	inServiceNodePorts:    mapServiceNodePorts,
	inNoEndpointServices:  mapNoEndpointServices,
	inNoEndpointNodePorts: mapNoEndpointNodePorts,
	inFirewallIPs:         mapFirewallIPs,
}

// elemKey is the key of one element in one map or set.
type elemKey struct {
	in    container
	addr  netip.Addr
	proto v1.Protocol
	port  uint16
}

// frontend is the Frontend of the Service ports that may put k in the
// table: elements yields cluster-ips keys for the cluster IP as a whole
// (no protocol nor port), node-port keys without an address, the others
// for an address, protocol and port of the Service port, all of them among
// the port's ruleset.Service.Frontends.
func (k elemKey) frontend() ruleset.Frontend {
	return ruleset.Frontend{Addr: k.addr, Protocol: k.proto, Port: k.port}
}

// compare orders element keys: by container, address, protocol, port.
func (k elemKey) compare(o elemKey) int {
	return cmp.Or(cmp.Compare(k.in, o.in), k.addr.Compare(o.addr), cmp.Compare(k.proto, o.proto), cmp.Compare(k.port, o.port))
}

// verdict is the value of a map element, relative to its owner.
type verdict uint8

const (
	verdictNone verdict = iota // a set element
	verdictCluster
	verdictLocal
	verdictExternal
	verdictFirewall
	verdictReject
	verdictDrop
)

// elements calls yield with each element that s puts in the maps and sets,
// in a fixed order.
func (r *renderer) elements(s *ruleset.Service, yield func(elemKey, verdict)) {
	proto := s.Name.Protocol
	yield(elemKey{in: inClusterIPs, addr: s.ClusterIP}, verdictNone)
	internal := elemKey{addr: s.ClusterIP, proto: proto, port: s.Port}
	switch {
	case s.Internal == ruleset.RouteCluster && len(s.ClusterTargets) > 0:
		internal.in = inServiceIPs
		yield(internal, verdictCluster)
	case s.Internal == ruleset.RouteLocal && len(s.LocalTargets) > 0:
		internal.in = inServiceIPs
		yield(internal, verdictLocal)
	case s.Internal == ruleset.RouteReject:
		internal.in = inNoEndpointServices
		yield(internal, verdictReject)
	default:
		// RouteDrop, or (never from ruleset.Builder) a route without
		// targets: drop rather than point at a missing chain.
		internal.in = inNoEndpointServices
		yield(internal, verdictDrop)
	}
	if s.External == ruleset.RouteNone {
		return
	}
	ext := r.usesExternalChain(s)
	noEndpoints := verdictNone
	switch s.External {
	case ruleset.RouteReject:
		noEndpoints = verdictReject
	case ruleset.RouteDrop:
		noEndpoints = verdictDrop
	}
	frontend := func(ip netip.Addr, lb bool) {
		k := elemKey{addr: ip, proto: proto, port: s.Port}
		if ext {
			k.in = inServiceIPs
			yield(k, verdictExternal)
		}
		if lb && s.UsesFirewall() {
			k.in = inFirewallIPs
			yield(k, verdictFirewall)
		}
		if noEndpoints != verdictNone {
			k.in = inNoEndpointServices
			yield(k, noEndpoints)
		}
	}
	for _, ip := range s.ExternalIPs {
		frontend(ip, false)
	}
	for _, ip := range s.LoadBalancerIPs {
		frontend(ip, true)
	}
	if s.NodePort != 0 {
		k := elemKey{proto: proto, port: s.NodePort}
		if ext {
			k.in = inServiceNodePorts
			yield(k, verdictExternal)
		}
		if noEndpoints != verdictNone {
			k.in = inNoEndpointNodePorts
			yield(k, noEndpoints)
		}
	}
}

// element renders a claimed element for an add.
func (r *renderer) element(k elemKey, c claim) *knftables.Element {
	e := r.elementKey(k)
	base := ServiceChainBase(c.owner.Name)
	switch c.verdict {
	case verdictCluster:
		e.Value = []string{"goto " + prefixService + base}
	case verdictLocal:
		e.Value = []string{"goto " + prefixLocal + base}
	case verdictExternal:
		e.Value = []string{"goto " + prefixExternal + base}
	case verdictFirewall:
		e.Value = []string{"goto " + prefixFirewall + base}
	case verdictReject:
		e.Value = []string{"goto " + chainReject}
	case verdictDrop:
		e.Value = []string{"drop"}
	}
	if c.verdict == verdictReject || c.verdict == verdictDrop {
		// "namespace/name:port" may reach 143 bytes; nft refuses comments
		// over 128, and with them the whole transaction.
		name := c.owner.Name.String()
		e.Comment = ptr(name[:min(len(name), knftables.CommentLengthMax)])
	}
	return e
}

// elementKey renders an element with its key only, for a delete.
func (r *renderer) elementKey(k elemKey) *knftables.Element {
	e := &knftables.Element{Family: r.family, Table: r.table}
	name := containerNames[k.in]
	if k.in == inClusterIPs {
		e.Set = name
		e.Key = []string{k.addr.String()}
		return e
	}
	e.Map = name
	proto := strings.ToLower(string(k.proto))
	port := strconv.Itoa(int(k.port))
	if k.addr.IsValid() {
		e.Key = []string{k.addr.String(), proto, port}
	} else {
		e.Key = []string{proto, port}
	}
	return e
}
