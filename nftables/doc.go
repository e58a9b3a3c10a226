// Package nftables renders a ruleset.Ruleset as nftables rules, in
// kube-proxy's nftables-mode layout (that of kube-proxy 1.37), and applies
// them through sigs.k8s.io/knftables.
//
// # Layout
//
// One table per IP family (kube-proxy's "kube-proxy" in families ip and ip6
// by default; Options.Table picks another) holds:
//
//   - base chains filter-prerouting-pre-dnat and filter-output-pre-dnat at
//     priority dstnat-10 (the source-range firewall, which must see the
//     load-balancer addresses), filter-input, filter-forward and
//     filter-output at priority filter (the checks for ports without
//     endpoints and for unknown cluster-IP ports, after DNAT, as kube-proxy
//     1.34 and later has them), nat-prerouting and nat-output at dstnat,
//     nat-postrouting at srcnat;
//   - the verdict maps service-ips (address . protocol . port) and
//     service-nodeports (protocol . port), which the services chain looks up
//     to "goto" a Service port's chain; no-endpoint-services and
//     no-endpoint-nodeports, which reject (goto reject-chain) or drop new
//     connections to ports without endpoints; firewall-ips, which sends
//     load-balancer traffic through a port's source-range firewall;
//   - the sets cluster-ips (traffic to other ports of a cluster IP is
//     rejected; traffic to a cluster IP from outside the cluster CIDRs, or
//     all of it with Config.MasqueradeAll, is marked for masquerade by one
//     rule at the head of the services chain), hairpin-connections (address
//     . address . protocol . port of every endpoint on this node that a
//     Service port spreads traffic over) and, when Config.NodePortAddresses
//     is set, nodeport-ips;
//   - per Service port the chains service-HASH-ns/name/proto/port, which
//     DNAT to the cluster targets ("dnat to ADDR:PORT" for one, "dnat ip
//     addr . port to numgen random mod N map { … }" for more), local-… (the
//     same for the node-local targets), external-… (NodePort, externalIP
//     and load-balancer traffic: masquerade, or with
//     externalTrafficPolicy Local keep the client address and short-circuit
//     traffic from pods and from the node to the cluster targets),
//     firewall-… (loadBalancerSourceRanges); for ClientIP affinity only, the
//     policy chains go to per-endpoint chains
//     endpoint-HASH-ns/name/proto/port__IP/port (affinity update, DNAT),
//     with per-endpoint affinity-… sets (flags dynamic,timeout);
//   - masquerading in nat-postrouting: "masquerade fully-random" of what
//     carries the masquerade mark ("mark set mark or MARK", inline where
//     traffic is to be masqueraded), and of the DNATed connections in
//     hairpin-connections: an endpoint on this node that reaches itself
//     through a Service. (kube-proxy's iptables mode masquerades every
//     endpoint's own traffic; its nftables mode, and this layout, do not
//     masquerade a pod on another node that this node sends back to
//     itself.)
//
// The names and hashes are kube-proxy's (see ServiceChainBase and
// EndpointChainBase), so `nft list table ip kube-proxy` reads the same.
// What traffic goes where is the Ruleset's decision (Service.Internal and
// Service.External); this package only renders it. NodePorts are not served
// on 127.0.0.0/8 (nor ::1) unless Config.LocalhostNodePorts asks for it
// (IPv4 only).
//
// # The flat layout
//
// Package nftables/flat is a second layout of the same rules (table
// svcproxy-flat), for scale: per Service port state only in sets and maps.
// The two packages share the typed model of a table, the netlink encoder
// and the executors' mechanics (nftables/internal/...), not each other's
// code: a proxy picks one package's Executor.
//
// # Rendering
//
// Render, RenderNew and RenderChanges are pure: they append operations to
// knftables.Transactions and do nothing else. Render writes the whole table
// (RenderNew a new table, in chunks; Script gives a dry run's nft script);
// RenderChanges writes only what differs between two Rulesets — the map and
// set elements, chains and affinity sets of the changed Service ports.
// Chains that are no longer used are flushed at once and deleted by a later
// transaction (Result.Stale), because kernels before 6.2 report a chain
// busy for a moment after the last map element pointing at it is deleted.
//
// When two Service ports claim the same frontend (address, protocol and
// port, or node port), its owner (ruleset.Ruleset.Owner) gets it and the
// others are reported in Result.Warnings: the transaction never fails
// because of what Services contain.
//
// # Executor
//
// Executor wraps a knftables.Interface: a full sync (create the table, flush
// and write everything, flush what is no longer used) the first time, after
// any failure and when the Ruleset's Config changes, and otherwise an
// incremental one from the last Ruleset applied. A full sync into a table
// that does not exist yet is applied in chunks (RenderNew). Open checks that
// nft is 1.0.1 or newer and the kernel MinKernel or newer. Cleanup deletes
// the table in both families.
//
// Every nft invocation reads the table's chains and sets first, so through
// nft even a one-element incremental sync costs time in proportion to the
// table. With ExecutorConfig.Netlink the Executor sends incremental
// transactions to the kernel itself, over a netlink socket, encoded as nft
// encodes the same statements (nftables/internal/nftnl), and lists the
// table's names over it too. A full sync then writes the table's fixed
// objects with nft and its Service ports over netlink, in chunks, and an
// incremental sync of more Service ports than ExecutorConfig.ChangeChunk
// goes in chunks too: the kernel's time to commit one transaction grows
// faster than the transaction. Any change outside what the encoder knows
// (SyncDetails.NotNetlink) goes through nft.
//
// An Executor is an engine.Backend: package engine runs the sync loop
// around it. Chains flushed by a sync are deleted by a later one, which
// svcproxy.SyncResult.NextSync asks for. With ExecutorConfig.NetNS the
// Executor writes the table of another network namespace, while the
// process stays in its own.
//
// # Invariants
//
//   - Determinism: the same Rulesets, Options and arguments give the same
//     operations in the same order, whatever order the objects arrived in.
//   - Incremental equals full: a table that held old and had RenderChanges'
//     operations applied holds what Render of new writes, plus the stale
//     chains (flushed, empty) that wait to be deleted.
//   - Cost of a change: the operations RenderChanges writes depend on the
//     changed Service ports alone, not on how many others the table holds;
//     so does its time (times log n) when new was made from old by
//     ruleset.Builder.Update.
//   - No half-served port: in a table that exists and serves, every
//     transaction of a full or incremental sync leaves every Service port
//     as it was or as it is to be, with all of its chains, sets and
//     elements (ports that share an element change in one transaction).
//     Only a table that did not exist before serves, between the chunks of
//     its first sync, just the Service ports written so far.
//   - Sessions survive full syncs: the affinity sets are added, never
//     flushed, by a full sync of a table that exists.
//   - Same kernel state either way: a table written over netlink lists
//     (`nft list table`) exactly as if nft had written it
//     (TestNetlinkMatchesNFT).
//   - Ownership: the Executor touches only its own table, in its own
//     family (Cleanup: in both families); never another table.
//
// # Limitations
//
// What the package does not do:
//
//   - Decide. Which endpoints serve, what is masqueraded, rejected or
//     dropped: all of it comes from the Ruleset.
//   - Notice changes others make to its table. Incremental syncs write
//     from the last Ruleset applied, without reading the table back; a
//     table changed behind the Executor's back is repaired by the next
//     full sync (after a failed transaction, or RequestFullSync).
//   - Use one "inet" table for both families: one table per IP family,
//     one Executor per family.
//   - Serve NodePorts on ::1, nor on 127.0.0.0/8 unless
//     Config.LocalhostNodePorts asks for it.
//   - Clean up conntrack entries (package conntrack does), run a sync loop
//     or serve metrics (package engine does), serve health checks (package
//     healthcheck does), or log: every outcome is in the returned Result,
//     SyncResult or error.
//   - Share a table: two Executors must not write the same table at once.
//     (One Executor's methods may be called from several goroutines; they
//     run one at a time.)
//   - Work with nft older than 1.0.1 or a kernel older than MinKernel.
package nftables
