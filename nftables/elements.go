package nftables

import (
	"cmp"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
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
	// inHairpin holds an endpoint on this node (address, protocol, port)
	// that some Service port spreads traffic over: that the endpoint
	// reaches itself through a Service is masqueraded. Unlike the others,
	// its elements belong to no frontend, and many ports may need one.
	inHairpin
)

// containerNames are the names of the containers in the table.
var containerNames = [...]string{
	inClusterIPs:          setClusterIPs,
	inServiceIPs:          mapServiceIPs,
	inServiceNodePorts:    mapServiceNodePorts,
	inNoEndpointServices:  mapNoEndpointServices,
	inNoEndpointNodePorts: mapNoEndpointNodePorts,
	inFirewallIPs:         mapFirewallIPs,
	inHairpin:             setHairpin,
}

// elemKey is the key of one element in one map or set.
type elemKey struct {
	in    container
	addr  netip.Addr
	proto v1.Protocol
	port  uint16
}

// frontend is the destination of k: a Frontend without its kind, whose
// owner (ruleset.Ruleset.Owner) is the Service port that may put k in the
// table.
func (k elemKey) frontend() ruleset.Frontend {
	return ruleset.Frontend{Addr: k.addr, Protocol: k.proto, Port: k.port}
}

// destinationKeys are the keys that any Service port may put in the table
// for a frontend at f's destination: all the elements whose owner can change
// when the owner of f does.
func destinationKeys(f ruleset.Frontend) []elemKey {
	k := elemKey{addr: f.Addr, proto: f.Protocol, port: f.Port}
	var ins []container
	switch f.Kind {
	case ruleset.KindClusterAddress:
		ins = []container{inClusterIPs}
	case ruleset.KindNodePort:
		ins = []container{inServiceNodePorts, inNoEndpointNodePorts}
	default:
		ins = []container{inServiceIPs, inNoEndpointServices, inFirewallIPs}
	}
	keys := make([]elemKey, len(ins))
	for i, in := range ins {
		keys[i] = k
		keys[i].in = in
	}
	return keys
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
	// verdictHairpin is an element of the hairpin set: a need that any
	// number of Service ports share, not a claim of one.
	verdictHairpin
)

// elements calls yield with each element that s puts in the maps and sets,
// with the kind of the frontend it is for, in a fixed order: the routes and
// the ExternalTraffic of s, translated. s puts an element in the table only
// when it owns that frontend (see owns).
func (r *renderer) elements(s *ruleset.Service, yield func(elemKey, verdict, ruleset.FrontendKind)) {
	proto := s.Name.Protocol
	yield(elemKey{in: inClusterIPs, addr: s.ClusterIP}, verdictNone, ruleset.KindClusterAddress)
	for _, k := range hairpinKeys(s) {
		yield(k, verdictHairpin, ruleset.KindClusterAddress)
	}
	internal := elemKey{in: inServiceIPs, addr: s.ClusterIP, proto: proto, port: s.Port}
	switch s.Internal {
	case ruleset.RouteCluster:
		yield(internal, verdictCluster, ruleset.KindClusterIP)
	case ruleset.RouteLocal:
		yield(internal, verdictLocal, ruleset.KindClusterIP)
	default:
		internal.in = inNoEndpointServices
		yield(internal, routeVerdict(s.Internal), ruleset.KindClusterIP)
	}
	if s.External == ruleset.RouteNone {
		return
	}
	steered := s.ExternalTraffic.Steered
	noEndpoints := routeVerdict(s.External)
	frontend := func(ip netip.Addr, kind ruleset.FrontendKind) {
		k := elemKey{addr: ip, proto: proto, port: s.Port}
		if steered {
			k.in = inServiceIPs
			yield(k, verdictExternal, kind)
		}
		if kind == ruleset.KindLoadBalancerIP && s.UsesFirewall() {
			k.in = inFirewallIPs
			yield(k, verdictFirewall, kind)
		}
		if noEndpoints != verdictNone {
			k.in = inNoEndpointServices
			yield(k, noEndpoints, kind)
		}
	}
	for _, ip := range s.ExternalIPs {
		frontend(ip, ruleset.KindExternalIP)
	}
	for _, ip := range s.LoadBalancerIPs {
		frontend(ip, ruleset.KindLoadBalancerIP)
	}
	if s.NodePort != 0 {
		k := elemKey{proto: proto, port: s.NodePort}
		if steered {
			k.in = inServiceNodePorts
			yield(k, verdictExternal, ruleset.KindNodePort)
		}
		if noEndpoints != verdictNone {
			k.in = inNoEndpointNodePorts
			yield(k, noEndpoints, ruleset.KindNodePort)
		}
	}
}

// hairpinKeys are the hairpin set's elements that s needs: its targets
// that run on this node, each once.
func hairpinKeys(s *ruleset.Service) []elemKey {
	var keys []elemKey
	for _, ts := range [2][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
		for _, t := range ts {
			k := elemKey{in: inHairpin, addr: t.Endpoint.Addr(), proto: s.Name.Protocol, port: t.Endpoint.Port()}
			if t.Local && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// routeVerdict is the verdict of a route that goes to no chain:
// verdictReject, verdictDrop, or verdictNone for the others.
func routeVerdict(route ruleset.Route) verdict {
	switch route {
	case ruleset.RouteReject:
		return verdictReject
	case ruleset.RouteDrop:
		return verdictDrop
	}
	return verdictNone
}

// elementBox holds an element with its key and verdict: one allocation.
type elementBox struct {
	elem    model.Element
	key     [4]model.Datum
	verdict model.Verdict
}

// newElement is the element of k in its map or set, without a verdict.
func (r *renderer) newElement(k elemKey) *elementBox {
	b := &elementBox{}
	b.elem.Set = containerNames[k.in]
	switch {
	case k.in == inClusterIPs:
		b.key[0] = model.Addr(k.addr)
		b.elem.Key = b.key[:1]
	case k.in == inHairpin:
		b.key = [4]model.Datum{model.Addr(k.addr), model.Addr(k.addr), model.Proto(model.ProtoNumber(k.proto)), model.Port(k.port)}
		b.elem.Key = b.key[:]
	case k.addr.IsValid():
		b.key = [4]model.Datum{model.Addr(k.addr), model.Proto(model.ProtoNumber(k.proto)), model.Port(k.port)}
		b.elem.Key = b.key[:3]
	default:
		b.key[0], b.key[1] = model.Proto(model.ProtoNumber(k.proto)), model.Port(k.port)
		b.elem.Key = b.key[:2]
	}
	return b
}

// addElement adds the element of k that c claims.
func (r *renderer) addElement(tx txWriter, k elemKey, c claim) {
	b := r.newElement(k)
	if isMap(k.in) {
		b.verdict = elementVerdict(c)
		b.elem.Verdict = &b.verdict
	}
	if c.verdict == verdictReject || c.verdict == verdictDrop {
		// "namespace/name:port" may reach 143 bytes; nft refuses comments
		// over 128, and with them the whole transaction.
		name := c.owner.Name.String()
		b.elem.Comment = name[:min(len(name), knftables.CommentLengthMax)]
	}
	tx.write(elementOp(opAdd, &b.elem, isMap(k.in)))
}

// isMap reports whether a container is a verdict map (not a set).
func isMap(in container) bool { return in != inClusterIPs && in != inHairpin }

// deleteElement deletes the element of k.
func (r *renderer) deleteElement(tx txWriter, k elemKey) {
	tx.write(elementOp(opDelete, &r.newElement(k).elem, isMap(k.in)))
}

// elementVerdict is the verdict of the map element that c claims.
func elementVerdict(c claim) model.Verdict {
	var prefix string
	switch c.verdict {
	case verdictCluster:
		prefix = prefixService
	case verdictLocal:
		prefix = prefixLocal
	case verdictExternal:
		prefix = prefixExternal
	case verdictFirewall:
		prefix = prefixFirewall
	case verdictReject:
		return model.Goto(chainReject)
	default: // verdictDrop
		return model.Drop
	}
	return model.Goto(prefix + ServiceChainBase(c.owner.Name))
}
