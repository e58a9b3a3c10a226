package topology

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Node is the node a proxy runs on. An empty Name means the proxy does not
// know its node: no endpoint is then local and node hints are ignored. An
// empty Zone means the node has no zone label: only hints for the zone ""
// (which the API server accepts) then match it, as in kube-proxy.
type Node struct {
	Name string
	Zone string
}

// NodeFromObject returns the name of n and its topology.kubernetes.io/zone
// label. A nil n gives the zero Node.
func NodeFromObject(n *v1.Node) Node {
	if n == nil {
		return Node{}
	}
	return Node{Name: n.Name, Zone: n.Labels[v1.LabelTopologyZone]}
}

// Endpoints are the endpoints of one Service port as one node uses them. Each
// list keeps the order of the endpoints given to [Categorize]. The lists may
// share backing arrays with each other (never with the input) and must be
// treated as read-only.
type Endpoints struct {
	// Cluster are the endpoints for cluster-wide traffic. It is nil when the
	// port sends no traffic to cluster endpoints (see
	// servicemap.ServicePort.UsesClusterEndpoints) and non-nil, possibly
	// empty, when it does.
	Cluster []endpoints.Endpoint
	// Local are the endpoints on this node for node-local traffic. It is nil
	// when the port sends no traffic to local endpoints (see
	// servicemap.ServicePort.UsesLocalEndpoints) and non-nil, possibly empty,
	// when it does.
	Local []endpoints.Endpoint
	// AllReachable is Cluster ∪ Local, in input order: every endpoint this
	// node may send the port's traffic to, e.g. for conntrack cleanup or
	// hairpin masquerading. It is never nil.
	AllReachable []endpoints.Endpoint
	// HasAnyEndpoints reports whether the Service has a usable endpoint
	// anywhere in the cluster: one that is ready, or serving and
	// terminating. It can be true while Local (or even AllReachable) is
	// empty.
	HasAnyEndpoints bool
}

// Categorize returns which of eps serve sp's traffic on node, following
// kube-proxy's rules (see the package documentation).
//
// eps are the port's endpoints, as the endpoints package gives them: sorted,
// one per address and port. The Ready condition is authoritative: an endpoint
// that is ready is used even if it is not serving or is terminating, as happens
// with publishNotReadyAddresses. Endpoints whose NodeName equals node.Name are
// local; node.Name "" makes none local. A nil sp selects no endpoint.
//
// Categorize neither modifies nor retains eps.
func Categorize(sp *servicemap.ServicePort, eps []endpoints.Endpoint, node Node) Endpoints {
	sel := Select(sp, eps, node)
	var res Endpoints
	res.HasAnyEndpoints = sel.HasAnyEndpoints()
	if sel.usesCluster {
		res.Cluster = filter(eps, sel.Cluster)
	}
	if sel.usesLocal {
		res.Local = filter(eps, sel.Local)
	}
	switch {
	case !sel.usesLocal:
		res.AllReachable = res.Cluster
	case !sel.usesCluster:
		res.AllReachable = res.Local
	default:
		res.AllReachable = filter(eps, sel.Reachable)
		// Share storage when the union is one of the two lists, as it is
		// whenever hints are not in use and the local endpoints are ready.
		switch len(res.AllReachable) {
		case len(res.Cluster):
			res.AllReachable = res.Cluster
		case len(res.Local):
			res.AllReachable = res.Local
		}
	}
	return res
}

// Selection is what [Categorize] decides for one Service port on one node,
// without the lists: it says of each endpoint in which list it is. A caller
// that only needs that (to build lists of its own) copies no endpoint.
type Selection struct {
	node                   Node
	usesCluster, usesLocal bool
	// What Select learns in its pass over the endpoints, from which
	// Membership decides each endpoint's lists.
	mode                  mode
	anyReady              bool
	anyServingTerminating bool
	localReady            bool
}

// Select decides which of eps serve sp's traffic on node, as [Categorize]
// does, with the same requirements on its arguments, in one pass over eps.
// It neither modifies nor retains eps.
func Select(sp *servicemap.ServicePort, eps []endpoints.Endpoint, node Node) Selection {
	if sp == nil {
		return Selection{node: node}
	}
	sel := Selection{node: node, usesCluster: sp.UsesClusterEndpoints(), usesLocal: sp.UsesLocalEndpoints()}
	hints := newHintSummary()
	for i := range eps {
		ep := &eps[i]
		switch {
		case ep.Ready:
			sel.anyReady = true
			sel.localReady = sel.localReady || sel.onNode(ep)
			if sel.usesCluster && hints.open() {
				hints.add(ep, node)
			}
		case servingTerminating(ep):
			sel.anyServingTerminating = true
		}
	}
	sel.mode = hints.mode()
	return sel
}

// Membership is what a Selection says of one endpoint: the lists of
// [Categorize] it is in, and whether it is on the node.
type Membership uint8

const (
	// InCluster: the endpoint is in Categorize's Cluster list.
	InCluster Membership = 1 << iota
	// InLocal: the endpoint is in Categorize's Local list.
	InLocal
	// OnNode: the endpoint runs on the node (its NodeName is the node's
	// Name, which is not ""), whether or not it is in a list.
	OnNode
)

// Membership says in which of Categorize's lists ep, one of the endpoints
// given to Select, is, and whether it runs on the node. InCluster is set
// only when UsesCluster, InLocal only when UsesLocal, and InLocal implies
// OnNode.
func (s *Selection) Membership(ep *endpoints.Endpoint) Membership {
	if s == nil || ep == nil {
		return 0
	}
	var m Membership
	on := s.onNode(ep)
	if on {
		m = OnNode
	}
	if s.usesCluster && s.inCluster(ep) {
		m |= InCluster
	}
	if on && s.usesLocal && s.usableLocally(ep) {
		m |= InLocal
	}
	return m
}

// UsesCluster reports whether Categorize's Cluster list is non-nil: the
// port sends some traffic to cluster endpoints.
func (s *Selection) UsesCluster() bool {
	if s == nil {
		return false
	}
	return s.usesCluster
}

// UsesLocal reports whether Categorize's Local list is non-nil: the port
// sends some traffic to local endpoints only.
func (s *Selection) UsesLocal() bool {
	if s == nil {
		return false
	}
	return s.usesLocal
}

// HasAnyEndpoints is Categorize's HasAnyEndpoints.
func (s *Selection) HasAnyEndpoints() bool {
	if s == nil {
		return false
	}
	return s.anyReady || s.anyServingTerminating
}

// Cluster reports whether ep, one of the endpoints given to Select, is in
// Categorize's Cluster list.
func (s *Selection) Cluster(ep *endpoints.Endpoint) bool { return s.Membership(ep)&InCluster != 0 }

// Local reports whether ep, one of the endpoints given to Select, is in
// Categorize's Local list.
func (s *Selection) Local(ep *endpoints.Endpoint) bool { return s.Membership(ep)&InLocal != 0 }

// Reachable reports whether ep, one of the endpoints given to Select, is in
// Categorize's AllReachable list: in Cluster or in Local.
func (s *Selection) Reachable(ep *endpoints.Endpoint) bool {
	return s.Membership(ep)&(InCluster|InLocal) != 0
}

func (s *Selection) onNode(ep *endpoints.Endpoint) bool {
	return s.node.Name != "" && ep.NodeName == s.node.Name
}

// inCluster: ready endpoints the topology mode makes available, or, when no
// endpoint is ready anywhere, serving-terminating endpoints regardless of
// topology. The mode narrows to hinted endpoints only if one of them is
// ready, so the first case is never empty when some endpoint is ready.
func (s *Selection) inCluster(ep *endpoints.Endpoint) bool {
	if s.anyReady {
		return ep.Ready && s.mode.allows(ep, s.node)
	}
	return servingTerminating(ep)
}

// usableLocally: for an endpoint on the node, whether it is in Local:
// ready, or, when no endpoint on the node is ready, serving-terminating.
// Hints play no part.
func (s *Selection) usableLocally(ep *endpoints.Endpoint) bool {
	if s.localReady {
		return ep.Ready
	}
	return servingTerminating(ep)
}

func servingTerminating(ep *endpoints.Endpoint) bool {
	return ep.Serving && ep.Terminating
}

// mode is the topology mode cluster traffic uses on this node.
type mode uint8

const (
	modeNone     mode = iota // every ready endpoint
	modeSameZone             // ready endpoints hinted for this node's zone
	modeSameNode             // ready endpoints hinted for this node
)

func (m mode) allows(ep *endpoints.Endpoint, node Node) bool {
	switch m {
	case modeSameNode:
		return ep.HasNodeHint(node.Name)
	case modeSameZone:
		return ep.HasZoneHint(node.Zone)
	default:
		return true
	}
}

// hintSummary is what the hints of the ready endpoints (those of unready
// endpoints never matter) say about the topology mode.
type hintSummary struct {
	allNodeHints, forNode bool
	allZoneHints, forZone bool
}

func newHintSummary() hintSummary {
	return hintSummary{allNodeHints: true, allZoneHints: true}
}

// open reports whether the hints of another ready endpoint can still
// change the mode: once one ready endpoint had no node hint and one had no
// zone hint, the mode is none whatever the others have.
func (h *hintSummary) open() bool { return h.allNodeHints || h.allZoneHints }

// add takes in the hints of ep, a ready endpoint, for node.
func (h *hintSummary) add(ep *endpoints.Endpoint, node Node) {
	if len(ep.NodeHints) == 0 {
		h.allNodeHints = false
	} else if node.Name != "" && ep.HasNodeHint(node.Name) {
		h.forNode = true
	}
	if len(ep.ZoneHints) == 0 {
		h.allZoneHints = false
	} else if ep.HasZoneHint(node.Zone) {
		h.forZone = true
	}
}

// mode is the topology mode of the ready endpoints added. Node hints win
// when every ready endpoint has one and some endpoint is hinted for this
// node; otherwise zone hints, under the same two conditions for this
// node's zone; otherwise (and when no endpoint was added) no topology.
func (h *hintSummary) mode() mode {
	switch {
	case h.allNodeHints && h.forNode:
		return modeSameNode
	case h.allZoneHints && h.forZone:
		return modeSameZone
	default:
		return modeNone
	}
}

// filter returns the endpoints of eps that keep accepts, in order, in a new
// non-nil slice of exactly that length.
func filter(eps []endpoints.Endpoint, keep func(*endpoints.Endpoint) bool) []endpoints.Endpoint {
	n := 0
	for i := range eps {
		if keep(&eps[i]) {
			n++
		}
	}
	out := make([]endpoints.Endpoint, 0, n)
	for i := range eps {
		if keep(&eps[i]) {
			out = append(out, eps[i])
		}
	}
	return out
}
