// Package ruleset computes the desired Service-proxy state of one IP family,
// independent of the kernel backend that will enforce it.
//
// A Builder, made once from a Config, turns a servicemap.Snapshot and an
// endpoints.Snapshot into a Ruleset: for each ServicePort its frontends
// (cluster IP, node port, external IPs, load-balancer IPs), where internal and
// external traffic goes (spread over the cluster or the node-local targets,
// rejected because the Service has no endpoints, or dropped because a Local
// policy has none on this node), the targets in a stable order with the
// probability that each is picked (1/(N−i) for the i-th of N, counting from
// 0, so that each is reached with probability 1/N), the source ranges of its
// load-balancer firewall and its ClientIP affinity. The iptables and nftables
// packages render a Ruleset; the conntrack package reads it.
//
// Diff compares two Rulesets and lists the ServicePorts whose state changed:
// the basis of partial syncs. ServicePortHash and EndpointHash give the
// stable hashes that kube-proxy's chain names are made of.
//
// The package is pure: the same snapshots and Config give an equal Ruleset
// whatever order the objects arrived in, with no I/O, clock, randomness or
// logging.
package ruleset
