// Package iptables renders a ruleset.Ruleset as iptables-restore input with
// kube-proxy's iptables-mode structure, and applies it to the kernel.
//
// # Rendering (pure)
//
// Render writes the filter and nat tables for one IP family (iptables for
// IPv4, ip6tables for IPv6). The chains are kube-proxy's, so that operators'
// habits (iptables-save -t nat | grep ns/name) keep working:
//
//   - nat KUBE-SERVICES: one rule per cluster IP, external IP and
//     load-balancer IP with a "ns/name:port cluster IP" (external IP,
//     loadbalancer IP) comment, and last the jump to KUBE-NODEPORTS for
//     local destinations (or for each NodePort address);
//   - nat KUBE-NODEPORTS: node ports to each Service's KUBE-EXT- chain;
//   - per ServicePort: KUBE-SVC- (cluster targets), KUBE-SVL- (node-local
//     targets), KUBE-EXT- (external traffic: masquerade for
//     externalTrafficPolicy Cluster; for Local, pod and node traffic
//     short-circuited to KUBE-SVC-, the rest to KUBE-SVL-), KUBE-FW-
//     (load-balancer source ranges); per endpoint KUBE-SEP- (hairpin
//     masquerade and DNAT);
//   - targets picked with -m statistic --probability 1/(N−i) (target i of N) written
//     with ten decimals, the last unconditionally; ClientIP affinity with
//     -m recent checks before them and --set on the DNAT rule;
//   - nat KUBE-MARK-MASQ and KUBE-POSTROUTING (MASQUERADE --random-fully of
//     marked packets);
//   - filter KUBE-SERVICES and KUBE-EXTERNAL-SERVICES (REJECT when a Service
//     has no endpoint, DROP when a Local policy has none on this node),
//     KUBE-PROXY-FIREWALL (what the source ranges did not accept),
//     KUBE-NODEPORTS (health-check node ports), KUBE-FORWARD (which drops
//     packets conntrack finds INVALID, unless nf_conntrack_tcp_be_liberal
//     is set).
//
// Every rule that names a Service port carries a kube-proxy comment
// ("ns/name:port", "ns/name:port -> 198.18.1.2:8080", …) until the Ruleset
// lists more than 1,000 endpoints (Ruleset.ListedEndpoints: ready or not,
// each address and port of a proxied port once, in the Ruleset's family;
// kube-proxy's count and threshold). Then, as in kube-proxy's large-cluster
// mode, the rules whose number grows with the endpoints lose theirs: the
// two rules of each KUBE-SEP- chain, and the rules of KUBE-SVC- and
// KUBE-SVL- chains that jump to one (the spreading and ClientIP-affinity
// rules), which shortens a full restore input by about 30 % (at 10
// endpoints a Service); every other rule keeps its comment. Each render
// decides the mode from the Ruleset it renders, so a partial render writes
// the chains it rewrites in the new mode and leaves the others as they were
// written, as kube-proxy's partial syncs do, until the next full render.
//
// Some of kube-proxy's rules depend on the kernel, which a Kernel
// describes to RenderFor and RenderPartialFor: kube-proxy's two nfacct
// counters, where they exist, count the INVALID packets KUBE-FORWARD drops
// (ct_state_invalid_dropped_pkts) and the packets to node ports on
// 127.0.0.0/8 (localhost_nps_accepted_pkts, IPv4), and with
// nf_conntrack_tcp_be_liberal set there is no drop of INVALID packets.
// Render and RenderPartial render for the zero Kernel: no counters, the
// drop kept.
//
// The ruleset decides; the renderer only translates its decisions (Routes,
// ClusterIPMasquerade, ExternalTraffic, the owner of each frontend) into
// chains and verdicts. Names gives every chain name from one prefix ("KUBE" by
// default) so that a proxy can run beside kube-proxy. Nothing in a Service or
// EndpointSlice reaches the output except through address and number
// formatters, hashed chain names, and comments restricted to
// [A-Za-z0-9 ./:_-[]>;,] and cut to the kernel's 255 bytes.
//
// RenderPartial writes, for `iptables-restore --noflush`, only what changed
// since the previous Ruleset: the top-level chains in full, the chains of the
// added and changed ServicePorts (re-declared, which flushes them), and the
// chains that went away flushed and deleted (-X).
//
// # Full syncs and iptables-nft's quadratic --noflush
//
// The filter and nat tables hold other programs' chains, so a sync can never
// restore without --noflush: that would flush them. But iptables-nft 1.8.9
// restores with --noflush in time quadratic in the number of chains the input
// mentions: before any command runs it records every chain name in a sorted
// linked list (nft_cache_level_set, cache_chain_list_insert) to limit the
// cache it fetches from the kernel. A command without a chain sets
// "all chains" and skips that list. So each table of a full render starts
// with "-S", which lists the table on standard output and changes nothing:
// the cache is then fetched whole, once, in linear time. TestKernelScale
// measures both ways (BENCHMARKS.md has the figures and the command).
//
// The Executor reads that listing to find chains of ours that earlier
// processes left behind. A partial render adds the "-S" lines only when it
// re-declares so many chains that listing the whole table costs less, an
// estimate made from the input's size. iptables-legacy-restore accepts and
// ignores the trick.
//
// # Executor
//
// Executor applies a Ruleset with one `iptables-restore --noflush --counters
// -w` run per sync (ip6tables-restore for IPv6): full the first time, after
// any failure, after a Config change and on request, partial otherwise (and
// nothing at all when nothing changed). After a full sync it makes sure the
// jumps from the built-in chains exist (`iptables -C`, then -I), with
// kube-proxy's comments. A full sync also writes kube-proxy's empty canary
// chain (KUBE-PROXY-CANARY, Names.Canary) in filter, nat and mangle, as
// kube-proxy's iptables mode does (its monitor recreates them and watches
// for their deletion); Cleanup removes them.
//
// With ExecutorConfig.NFAcct, every full sync also creates kube-proxy's
// nfacct counters that are missing, over netlink (package-internal
// nfacct, in the Executor's namespace), and renders for those that exist;
// partial syncs and the state check follow what the last full sync
// rendered. Executor.Counter reads a counter (kube-proxy's
// kubeproxy_iptables_*_packets_total metrics); Executor.Stats counts the
// rules each sync left and wrote, and the failed restores (kube-proxy's
// kubeproxy_sync_proxy_rules_iptables_* metrics). ExecutorConfig.TCPBeLiberal
// leaves the drop of INVALID packets out.
//
// A partial sync builds on what the last full sync left, so it first
// checks, with one restore of `-C` lines that changes nothing, that the
// jumps from the built-in chains (which a flush of a table removes) and the
// fixed rules are still there; if one is missing, or if the
// partial restore itself fails (and the context is not done), the Executor
// runs a full sync in the same call and SyncDetails.Fallback says why. The check is one process whose
// input does not grow with the number of Services; its time grows with the
// tables (BENCHMARKS.md has what it costs).
//
// Cleanup removes the jumps and every chain the Names own, and nothing else.
// It flushes every such chain, then deletes them, with restores that each
// name a bounded number of chains, so that its time grows with the number
// of chains times that bound rather than with its square.
// Commands go through a Runner, which tests fake; ExecRunner runs them,
// optionally under a prefix such as `ip netns exec NAME`.
//
// # Invariants
//
//   - Render and RenderPartial are pure: equal inputs give identical bytes,
//     whatever order the objects behind the Ruleset arrived in.
//   - Every jump in a render names a chain declared in the same input, or a
//     top-level chain that every render declares.
//   - Restoring RenderPartial(old, new) over the state a sync of old left
//     gives the same tables as restoring Render(new), but for the comments
//     of the endpoint rules of chains it does not rewrite when old and new
//     differ in large-cluster mode (property-tested).
//   - The only chains written, flushed or deleted are those Names owns; the
//     only rules outside them are the jumps from the built-in chains (see
//     Executor). Cleanup removes exactly those and leaves everything else.
//   - Nothing a Service or EndpointSlice holds reaches the output as text of
//     its own (see Rendering).
//
// # Limitations
//
// What this package does not do:
//
//   - It sets and reads no sysctl: ExecutorConfig.TCPBeLiberal says
//     whether nf_conntrack_tcp_be_liberal is set (kube-proxy reads it at
//     start). LocalhostNodePorts (IPv4) also needs
//     net.ipv4.conf.all.route_localnet=1; with it, the filter KUBE-FIREWALL
//     chain (jumped to from INPUT and OUTPUT) drops non-translated packets
//     to 127.0.0.0/8 from elsewhere, as kube-proxy does. Forwarding
//     (net.ipv4.ip_forward) is the caller's too.
//   - It deletes no conntrack entries; package conntrack says which go stale.
//   - It writes only the filter and nat tables, and the canary chain in
//     mangle: none of kubelet's rules (KUBE-KUBELET-CANARY), nothing in
//     raw.
//   - It does not choose between iptables-nft and iptables-legacy: it runs
//     the iptables tools the Runner finds. The "-S" line only helps
//     iptables-nft.
//   - It does not watch the tables. A Sync with nothing to change runs
//     nothing, not even the state check, so a flush is noticed at the next
//     change. The state check sees flushed tables and missing jumps, and a
//     partial restore fails on a missing chain it jumps to, but neither looks
//     inside the chains of unchanged ServicePorts: one emptied or altered
//     from outside stays so until the next full sync. Periodic full syncs
//     (RequestFullSync), retries and rate limits are the caller's to
//     schedule: package engine does, as an Executor is an engine.Backend.
//   - A partial sync's input grows with the number of Services: the
//     top-level chains are rewritten whole, as kube-proxy does.
//   - One Executor serves one IP family.
package iptables
