package topology

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
)

// Hints returns eps with the topology hints the EndpointSlice controller
// writes for a Service with the given spec.trafficDistribution, so that a
// proxy fed EndpointSlices from elsewhere (files, another control plane)
// honours trafficDistribution through [Categorize].
//
// For PreferSameZone and PreferClose, every ready endpoint gets the zone hint
// of its own zone and no node hint. For PreferSameNode it also gets the node
// hint of its own node. Like the controller, Hints replaces whatever hints a
// ready endpoint had, so a ready endpoint without a zone (or without a node,
// for node hints) ends up without that kind of hint, and it leaves the hints of
// endpoints that are not ready as they are (they never affect Categorize).
//
// For any other value, "" included, Hints returns eps itself. (The controller
// would clear the hints then, unless the Service uses topology-aware routing,
// whose hints it computes differently; Hints cannot tell which applies and
// keeps the hints it was given.)
//
// Hints never modifies eps: it returns a new slice, whose endpoints share hint
// slices with eps where they are unchanged.
func Hints(trafficDistribution string, eps []endpoints.Endpoint) []endpoints.Endpoint {
	var nodeHints bool
	switch trafficDistribution {
	case v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone:
	case v1.ServiceTrafficDistributionPreferSameNode:
		nodeHints = true
	default:
		return eps
	}
	out := make([]endpoints.Endpoint, len(eps))
	for i, ep := range eps {
		if ep.Ready {
			ep.ZoneHints = nil
			if ep.Zone != "" {
				ep.ZoneHints = []string{ep.Zone}
			}
			ep.NodeHints = nil
			if nodeHints && ep.NodeName != "" {
				ep.NodeHints = []string{ep.NodeName}
			}
		}
		out[i] = ep
	}
	return out
}
