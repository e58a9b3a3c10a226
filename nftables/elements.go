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

type container uint8

const (
	cClusterIPs container = iota
	cServiceIPs
	cServiceNodePorts
	cNoEndpointServices
	cNoEndpointNodePorts
	cFirewallIPs
)

var containerNames = [...]string{
	cClusterIPs:          setClusterIPs,
	cServiceIPs:          mapServiceIPs,
	cServiceNodePorts:    mapServiceNodePorts,
	cNoEndpointServices:  mapNoEndpointServices,
	cNoEndpointNodePorts: mapNoEndpointNodePorts,
	cFirewallIPs:         mapFirewallIPs,
}

// elemKey is the key of one element in one map or set.
type elemKey struct {
	c     container
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
	return cmp.Or(cmp.Compare(k.c, o.c), k.addr.Compare(o.addr), cmp.Compare(k.proto, o.proto), cmp.Compare(k.port, o.port))
}

// verdict is the value of a map element, relative to its owner.
type verdict uint8

const (
	vNone verdict = iota // a set element
	vCluster
	vLocal
	vExternal
	vFirewall
	vReject
	vDrop
)

// elements calls yield with each element that s puts in the maps and sets,
// in a fixed order.
func (r *renderer) elements(s *ruleset.Service, yield func(elemKey, verdict)) {
	proto := s.Name.Protocol
	yield(elemKey{c: cClusterIPs, addr: s.ClusterIP}, vNone)
	internal := elemKey{addr: s.ClusterIP, proto: proto, port: s.Port}
	switch {
	case s.Internal == ruleset.RouteCluster && len(s.ClusterTargets) > 0:
		internal.c = cServiceIPs
		yield(internal, vCluster)
	case s.Internal == ruleset.RouteLocal && len(s.LocalTargets) > 0:
		internal.c = cServiceIPs
		yield(internal, vLocal)
	case s.Internal == ruleset.RouteReject:
		internal.c = cNoEndpointServices
		yield(internal, vReject)
	default:
		// RouteDrop, or (never from ruleset.Builder) a route without
		// targets: drop rather than point at a missing chain.
		internal.c = cNoEndpointServices
		yield(internal, vDrop)
	}
	if s.External == ruleset.RouteNone {
		return
	}
	ext := r.usesExternalChain(s)
	noEndpoints := vNone
	switch s.External {
	case ruleset.RouteReject:
		noEndpoints = vReject
	case ruleset.RouteDrop:
		noEndpoints = vDrop
	}
	frontend := func(ip netip.Addr, lb bool) {
		k := elemKey{addr: ip, proto: proto, port: s.Port}
		if ext {
			k.c = cServiceIPs
			yield(k, vExternal)
		}
		if lb && s.UsesFirewall() {
			k.c = cFirewallIPs
			yield(k, vFirewall)
		}
		if noEndpoints != vNone {
			k.c = cNoEndpointServices
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
			k.c = cServiceNodePorts
			yield(k, vExternal)
		}
		if noEndpoints != vNone {
			k.c = cNoEndpointNodePorts
			yield(k, noEndpoints)
		}
	}
}

// element renders a claimed element for an add.
func (r *renderer) element(k elemKey, c claim) *knftables.Element {
	e := r.elementKey(k)
	base := ServiceChainBase(c.owner.Name)
	switch c.v {
	case vCluster:
		e.Value = []string{"goto " + prefixService + base}
	case vLocal:
		e.Value = []string{"goto " + prefixLocal + base}
	case vExternal:
		e.Value = []string{"goto " + prefixExternal + base}
	case vFirewall:
		e.Value = []string{"goto " + prefixFirewall + base}
	case vReject:
		e.Value = []string{"goto " + chainReject}
	case vDrop:
		e.Value = []string{"drop"}
	}
	if c.v == vReject || c.v == vDrop {
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
	name := containerNames[k.c]
	if k.c == cClusterIPs {
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
