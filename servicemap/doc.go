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
// Addresses follow what the API server accepts and kube-proxy then serves.
// Zoned and IPv4-mapped IPv6 addresses, and IPv4 octets with leading
// zeros, are refused everywhere (the API server refuses them under its
// default StrictIPCIDRValidation). A load-balancer ingress IP (of ipMode VIP
// or unset) may be any other address, unspecified, loopback, link-local and
// multicast ones included. A cluster IP may be any but the unspecified
// address (a ServiceCIDR may cover loopback, link-local or multicast
// ranges; none hands out its network address). An externalIP may not be
// unspecified, loopback, link-local or link-local multicast, as the API
// server refuses them there. Such addresses are served as kube-proxy
// serves them, each with a warning, since a loopback one also catches the
// node's own traffic to it; refused ones are dropped with a warning (a
// Service read from files can still carry them).
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
