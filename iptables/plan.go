package iptables

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

// plan is what is rendered for one ServicePort: the chains it uses (""
// when unused) and where each kind of traffic goes.
type plan struct {
	service  *ruleset.Service
	proto    string // "tcp", "udp" or "sctp"
	portName string // "ns/name:port", the base of every comment
	// rewrite says whether the render writes the plan's own chains: always
	// in a full render, for added and changed ServicePorts in a partial one.
	rewrite bool

	// The per-ServicePort chains: KUBE-SVC-, KUBE-SVL-, KUBE-EXT-,
	// KUBE-FW-.
	clusterChain, localChain, externalChain, firewallChain string
	// endpoints are the endpoints of service.Endpoints and of every
	// target, sorted, each once; endpointChainNames[i] is the chain of
	// endpoints[i] (see endpointChains).
	endpoints          []netip.AddrPort
	endpointChainNames []string
	names              Names

	// internalChain is the chain cluster-IP traffic jumps to; when it is
	// "", internalVerdict (REJECT or DROP) applies in filter instead.
	internalChain   string
	internalVerdict string
	// externalVerdict, when not "", rejects or drops traffic to external
	// addresses in filter (what the external chain does not short-circuit).
	externalVerdict string
}

// chains lists the nat chains of the plan in the order they are written.
func (p *plan) chains() []string {
	var cs []string
	for _, c := range []string{p.externalChain, p.firewallChain, p.clusterChain, p.localChain} {
		if c != "" {
			cs = append(cs, c)
		}
	}
	return append(cs, p.endpointChains()...)
}

// endpointChains returns the chains of p.endpoints, computed on first use:
// a partial render needs them only for the ServicePorts it writes.
func (p *plan) endpointChains() []string {
	if p.endpointChainNames == nil {
		p.endpointChainNames = make([]string, len(p.endpoints))
		for i, ep := range p.endpoints {
			p.endpointChainNames[i] = p.names.EndpointChain(p.service.Name, ep)
		}
	}
	return p.endpointChainNames
}

// endpointChainOf returns the chain of one of p.endpoints.
func (p *plan) endpointChainOf(endpoint netip.AddrPort) string {
	i, _ := slices.BinarySearchFunc(p.endpoints, endpoint, netip.AddrPort.Compare)
	return p.endpointChains()[i]
}

// plans returns the plans of services, leaving out those that cannot be
// rendered (an unknown protocol). No plan is marked for rewriting.
func (r *renderer) plans(services []*ruleset.Service) []plan {
	ps := make([]plan, 0, len(services))
	for _, s := range services {
		p := r.plan(s)
		if p.proto == "" {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// rewriteAll marks every plan for rewriting, as a full render does.
func rewriteAll(plans []plan) {
	for i := range plans {
		plans[i].rewrite = true
	}
}

// plan names the chains of s and says where each kind of traffic goes,
// from its routes and targets: a policy chain for each list of targets, the
// external (and firewall) chain when ExternalTraffic is Steered, a filter
// verdict for a route that rejects or drops.
func (r *renderer) plan(s *ruleset.Service) plan {
	p := plan{service: s, portName: s.Name.String(), names: r.names}
	p.proto = protoName(s.Name.Protocol)
	if p.proto == "" {
		return p // unknown protocol: not rendered (servicemap never gives one)
	}
	hash := servicePortHash(s.Name) // once for the four chains
	if len(s.ClusterTargets) > 0 {
		p.clusterChain = r.names.chain(kindSVC, hash)
	}
	if len(s.LocalTargets) > 0 {
		p.localChain = r.names.chain(kindSVL, hash)
	}
	switch s.Internal {
	case ruleset.RouteCluster:
		p.internalChain = p.clusterChain
	case ruleset.RouteLocal:
		p.internalChain = p.localChain
	default:
		p.internalVerdict = routeVerdict(s.Internal)
	}
	p.externalVerdict = routeVerdict(s.External)
	if s.ExternalTraffic.Steered {
		p.externalChain = r.names.chain(kindEXT, hash)
		if s.UsesFirewall() {
			p.firewallChain = r.names.chain(kindFW, hash)
		}
	}
	p.endpoints = allEndpoints(s)
	return p
}

// protoName is the iptables name of a Service protocol, "" for one it does
// not know.
func protoName(p v1.Protocol) string {
	switch p {
	case v1.ProtocolTCP:
		return "tcp"
	case v1.ProtocolUDP:
		return "udp"
	case v1.ProtocolSCTP:
		return "sctp"
	}
	return ""
}

// routeVerdict is the filter verdict of a route that goes to no chain:
// "REJECT", "DROP", or "" for the routes to chains.
func routeVerdict(route ruleset.Route) string {
	switch route {
	case ruleset.RouteReject:
		return "REJECT"
	case ruleset.RouteDrop:
		return "DROP"
	}
	return ""
}

// allEndpoints is the union of s.Endpoints and the targets' endpoints,
// sorted. s.Endpoints already holds every target's endpoint; the union only
// guards the invariant that each jump names a declared chain.
func allEndpoints(s *ruleset.Service) []netip.AddrPort {
	var eps []netip.AddrPort
	for i := range s.Endpoints {
		eps = append(eps, s.Endpoints[i].AddrPort())
	}
	for _, ts := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
		for _, t := range ts {
			eps = append(eps, t.Endpoint)
		}
	}
	slices.SortFunc(eps, netip.AddrPort.Compare)
	return slices.Compact(eps)
}
