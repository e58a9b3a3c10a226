package nftables

import (
	"cmp"
	"net/netip"
	"strconv"
	"strings"

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
)

// elements calls yield with each element that s puts in the maps and sets,
// with the kind of the frontend it is for, in a fixed order: the routes and
// the ExternalTraffic of s, translated. s puts an element in the table only
// when it owns that frontend (see owns).
func (r *renderer) elements(s *ruleset.Service, yield func(elemKey, verdict, ruleset.FrontendKind)) {
	proto := s.Name.Protocol
	yield(elemKey{in: inClusterIPs, addr: s.ClusterIP}, verdictNone, ruleset.KindClusterAddress)
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

// addElement adds the element of k that c claims; an opRecorder also
// records its key and verdict as typed values, which the netlink path
// encodes.
func (r *renderer) addElement(tx txWriter, k elemKey, c claim) {
	v, isMap := elementVerdict(c)
	e := r.elementKey(k)
	if isMap {
		e.Value = []string{v.String()}
	}
	if c.verdict == verdictReject || c.verdict == verdictDrop {
		// "namespace/name:port" may reach 143 bytes; nft refuses comments
		// over 128, and with them the whole transaction.
		name := c.owner.Name.String()
		e.Comment = ptr(name[:min(len(name), knftables.CommentLengthMax)])
	}
	if rec, ok := tx.(*opRecorder); ok {
		rec.ops = append(rec.ops, op{verb: opAdd, obj: e, elem: &typedElement{key: k, verdict: v}})
		return
	}
	tx.Add(e)
}

// deleteElement deletes the element of k; an opRecorder also records its
// key as a typed value.
func (r *renderer) deleteElement(tx txWriter, k elemKey) {
	e := r.elementKey(k)
	if rec, ok := tx.(*opRecorder); ok {
		rec.ops = append(rec.ops, op{verb: opDelete, obj: e, elem: &typedElement{key: k}})
		return
	}
	tx.Delete(e)
}

// elementVerdict is the verdict of the map element that c claims; false
// for a set element.
func elementVerdict(c claim) (model.Verdict, bool) {
	base := ServiceChainBase(c.owner.Name)
	switch c.verdict {
	case verdictCluster:
		return model.Goto(prefixService + base), true
	case verdictLocal:
		return model.Goto(prefixLocal + base), true
	case verdictExternal:
		return model.Goto(prefixExternal + base), true
	case verdictFirewall:
		return model.Goto(prefixFirewall + base), true
	case verdictReject:
		return model.Goto(chainReject), true
	case verdictDrop:
		return model.Drop, true
	}
	return model.Verdict{}, false
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
