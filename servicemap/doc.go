// Package servicemap turns v1.Service objects into ServicePorts: one per
// Service port and IP family, holding exactly what a Service proxy needs
// (cluster IP, node port, external and load-balancer IPs, source ranges,
// traffic policies, trafficDistribution, session affinity and health-check
// node port) as net/netip values.
//
// FromService converts one Service. It skips, with a reason, what kube-proxy
// does not proxy (ExternalName and headless Services, Services with no
// cluster IP of the family, Services meant for another proxy) and skips, with
// a svcproxy.Warning, what it cannot use (an unparsable cluster IP, a port
// out of range, an unknown protocol, an invalid name). A bad externalIP or
// load-balancer IP is dropped with a warning and the rest of the Service is
// kept; a bad loadBalancerSourceRange skips the whole Service, so that a
// typo never opens a firewall.
//
// Tracker follows a stream of Service adds, updates and deletes in any order
// and hands out immutable Snapshots together with the ServicePorts that were
// added, changed or removed since the previous Snapshot.
//
// The package is pure: no I/O, no clock, no randomness, no logging.
//
// # Limitations
//
//   - It reads v1.Service objects only; it does not validate them as the API
//     server does, beyond what a proxy needs to be safe (addresses, ports,
//     protocols, names).
//   - ServiceCIDRs, and whether a cluster IP was allocated from them, are not
//     its concern: a cluster IP is taken as given.
//   - A Tracker is for one IP family; a dual-stack proxy keeps one per
//     family, and sees the warnings of a Service once per family
//     (state.State keeps both and reports each warning once).
package servicemap
