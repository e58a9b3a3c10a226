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
// 0, so that each is reached with probability 1/N, its Share), the source
// ranges of its load-balancer firewall and its ClientIP affinity, which
// traffic is masqueraded (ClusterIPMasquerade, ExternalTraffic) and which
// is short-circuited to the cluster targets; and, for a destination that
// several ports claim, which one owns it (Ruleset.Owner). Every decision
// is made there: Ruleset.Decide reads them for one flow, the whole answer
// for its client (source-range firewall, targets with their shares,
// masquerade, short-circuit, hairpin), with Ruleset.ClientOf for a client
// of each Origin (outside, a pod, the node); the iptables and nftables
// packages only translate them into rules. A data plane that
// picks targets itself, flow by flow, lists what it serves with
// Ruleset.ServedFrontends and picks with Ruleset.Choose (firewall, origin
// and ClientIP affinity included; Pick, for the shares alone). The
// conntrack package reads the Ruleset too. Ruleset.ListedEndpoints counts
// the endpoints the slices list, usable or not, as kube-proxy's iptables
// mode measures a cluster's size.
//
// Builder.Update makes the Ruleset of new snapshots from the previous one by
// rebuilding only the ServicePorts that differ between the snapshots the
// previous Ruleset was built from and the new ones, in time proportional to
// the change (times log n): the snapshots are persistent maps that share
// every unchanged entry, and a Ruleset is a persistent map that shares every
// unchanged Service with the one it was made from. The caller passes no list
// of changes, so none can be missed: Update always equals Build.
//
// Diff compares two Rulesets and lists the ServicePorts whose state changed:
// the basis of partial syncs. Between Rulesets made from one another by
// Update it takes time proportional to the change as well.
//
// The package is pure: the same snapshots and Config give an equal Ruleset
// whatever order the objects arrived in, with no I/O, clock, randomness or
// logging. Build, SharedDestinations and the Frontend index behind
// ServicesAt and Owns split a large cluster's Services over up to
// GOMAXPROCS goroutines, which have ended when they return; the result does
// not depend on how many.
//
// # Limitations
//
//   - One Ruleset is one IP family; a dual-stack proxy builds two.
//   - It states decisions, not rules: chain names, hashes and the layout of
//     rules belong to each backend.
//   - It reads what the trackers give it; it does not watch anything, and
//     a Builder holds no state between calls beyond its Config.
package ruleset
