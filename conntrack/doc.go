// Package conntrack keeps the kernel's connection tracking table from
// working against a Service proxy: it removes the entries that still send
// UDP clients to endpoints a Service no longer has, sizes the table and its
// timeouts as kube-proxy does, and reports how full it is and whether it is
// losing packets.
//
// # Stale entries
//
// A UDP "connection" is a conntrack entry that lives as long as the client
// keeps sending. Its DNAT decision was taken for its first packet; a client
// with a fixed source port (a DNS resolver) keeps reaching a pod that is gone
// for as long as it keeps asking, and never sees the Service's new endpoints.
// After each sync in which a UDP Service port changed (NeedsCleanup, or
// endpoints.Changes.ConntrackCleanup), a proxy computes StaleFilters from
// the new ruleset.Ruleset and hands them to a Cleaner:
//
//   - StaleFilters (pure) gives, for every frontend of every UDP Service port
//     — cluster IP, external IPs and load-balancer IPs at the Service port,
//     and the node port at any address — a Filter: entries to that frontend
//     whose reply source (the DNAT target) is not one of the port's serving
//     endpoints are stale. A port with no serving endpoint has all its
//     entries removed. With
//     Options.Previous, frontends that disappeared (a removed Service, a
//     removed external IP, a changed node port) get a filter that removes
//     all their entries, as kube-proxy does for removed UDP Service IPs.
//     TCP is never touched; SCTP only with Options.SCTP.
//   - Filter.Matches decides one Flow; a Matcher decides many, in constant
//     time each.
//   - NetlinkCleaner (executor) lists the table of one family once through
//     ctnetlink and deletes the selected entries, reporting how many; in
//     the network namespace that CleanerConfig.NetNS names, the same as
//     the executors' NetNS, or the process's own.
//
// The endpoints that keep an entry alive are ruleset.Service.Serving: every
// serving endpoint of the port, ready or terminating, on any node, as in
// kube-proxy. A terminating pod that still serves keeps its UDP flows until
// it goes away, so that it can finish its work; new flows go to ready pods.
//
// # Sizing
//
// Sizing.Settings (pure) turns kube-proxy's conntrack configuration into
// sysctl values — nf_conntrack_max = max(MaxPerCore × CPUs, Min), the hash
// size at least max/4, the TCP established and close-wait timeouts, UDP
// timeouts only when set — and SysctlWriter (executor) writes those that
// differ and reports what it changed. On Linux 6.18 nf_conntrack_max and
// nf_conntrack_buckets are global and read-only outside the initial network
// namespace; the timeouts are per network namespace.
//
// # Health
//
// ReadSample reads the entry count, the maximum and the per-CPU counters of
// /proc/net/stat/nf_conntrack; ParseStat parses the latter and Assess (both
// pure) turns two samples into a fill ratio, counter growth and a Level:
// warning from 70% full, critical from 90% and whenever insert_failed or
// drop grew — packets were lost.
//
// # Limitations
//
//   - TCP entries are never removed: a TCP connection to a removed endpoint
//     fails on its own (reset or timeout), as under kube-proxy.
//   - The cleanup needs the previous Ruleset (Options.Previous) to catch a
//     Service removed before its EndpointSlice; endpoints.Changes alone does
//     not show that case.
//   - Table sizes are global to the host on Linux: outside the initial
//     network namespace only the timeouts can be set.
package conntrack
