// Package topology decides, for one Service port on one node, which of the
// port's endpoints serve which traffic, the way kube-proxy does.
//
// [Categorize] splits a port's endpoints into those that receive
// cluster-wide traffic (a traffic policy of Cluster, and traffic that reaches
// an external address from inside the cluster; narrowed by topology hints),
// those that receive node-local traffic (a traffic policy of Local) and their
// union, and says whether the Service has
// any usable endpoint at all, so that a proxy can tell "no endpoints" (reject)
// from "no endpoints on this node" (drop external traffic, answer health checks
// with 503).
//
// The rules, each as kube-proxy applies them:
//
//   - Ready endpoints are used when there are any. Otherwise endpoints that are
//     serving and terminating are used, so that connections still drain to pods
//     that are shutting down. The fallback is made separately for cluster and
//     for node-local traffic.
//   - Cluster traffic honours topology hints: when every ready endpoint has a
//     node hint and one is hinted for this node, only endpoints hinted for this
//     node get cluster traffic (PreferSameNode); otherwise, when every ready
//     endpoint has a zone hint and one is hinted for this node's zone, only
//     endpoints hinted for this zone do (PreferSameZone, PreferClose, and
//     topology-aware routing). Otherwise hints are ignored.
//   - Hints never narrow node-local traffic, and the terminating fallback
//     ignores hints.
//
// [Select] makes the same decisions without copying the endpoints: its
// [Selection.Membership] says of each endpoint which lists it is in, and
// whether it is on the node, for a caller that builds lists of its own.
//
// Hints are written by the EndpointSlice controller. A proxy fed EndpointSlices
// that did not pass through the controller can compute them with [Hints].
//
// Everything here is pure: values in, values out, and the same input always
// gives the same output.
//
// # Limitations
//
//   - It decides for one port on one node, from the endpoints it is given: it
//     does not merge slices (package endpoints does) or build rules (package
//     ruleset does).
//   - Hints are only read for cluster traffic, as kube-proxy reads them.
//     [Hints] computes the hints of trafficDistribution only; the hints of
//     topology-aware routing (by zone capacity) are left to the controller.
package topology
