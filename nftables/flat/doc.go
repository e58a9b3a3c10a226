// Package flat renders a ruleset.Ruleset as nftables rules in the flat
// layout, and applies them through sigs.k8s.io/knftables and netlink: a
// second layout beside kube-proxy's (package nftables), for scale.
//
// # Layout
//
// One table per IP family (svcproxy-flat by default, DefaultTable; another
// name than kube-proxy's, whose scripts expect kube-proxy's chains in a
// table called "kube-proxy") holds per Service port state only in sets and
// maps, under rules whose number depends on the endpoint counts in use,
// not on the number of Services, so that a Service change is a few element
// changes. Per target group (cluster, external, shortcircuit, local and
// their node-port twins), endpoint count N and protocol there is a set of
// frontends and a map from frontend . index to endpoint, which one rule
// reads with "numgen random mod N": each target gets exactly 1/N of new
// flows. layout.go describes the table object by object. ClientIP
// session affinity is data too: a dynamic map per protocol that the packet
// path fills (affinity.go); an IPv6 port whose endpoints listen on
// different ports is served without it and named in a warning.
//
// What traffic goes where is the Ruleset's decision; this package only
// renders it, and the tracer (package trace) and its nftables evaluator
// (trace/nfttrace) check that the rendered table does what trace says.
//
// # Rendering
//
// Render (knftables operations), Script (one `nft -f` script that replaces
// the table), FirstSync (a table that does not exist yet: its definitions
// for nft and its elements for Netlink.Load) and Resync (a table that it
// holds) render the whole table; RenderChanges renders an incremental sync
// from the State they return, and reports in Changes.ElementsOnly whether
// Netlink.Apply can send it. All of them are pure. When two Service ports
// claim the same frontend, its owner (ruleset.Ruleset.Owner) gets it and
// the others are named in Result.Warnings.
//
// # Executor
//
// Executor syncs the layout: a full sync the first time, after a failure
// and when the Config changes, an incremental one otherwise;
// ExecutorConfig.Netlink says which part goes over netlink. It is an
// engine.Backend. The layout flushes no chains, so SyncResult.NextSync is
// always 0.
//
// # Netlink
//
// The elements go over netlink in messages that nftables/internal/nftnl
// writes, the encoder of kube-proxy's layout too, in the attributes that
// github.com/google/nftables gives them; the sets, chains and rules, which
// change only when an endpoint count appears or goes, are written with
// nft, which writes their typeof user data.
//
// # Invariants
//
//   - Determinism: the same Rulesets and Options give the same operations,
//     script and elements, whatever order the objects arrived in and
//     however the render is split over processors.
//   - Incremental equals full: a table that held old and had
//     RenderChanges' operations applied holds what Render of new writes.
//   - Sessions survive full syncs: the affinity maps are added, never
//     flushed, by a full sync of a table that exists (Resync). Only a
//     table written anew (Script, a first sync, or the fallback when its
//     resync fails) starts the clients' affinity entries afresh.
//   - Same kernel state either way: a table whose elements went over
//     netlink lists (`nft list table`) exactly as if nft had written them.
//   - Ownership: the Executor touches only its own table, in its own
//     family (Cleanup: in both families); never another table.
//
// # Limitations
//
// Like package nftables, it does not decide, notice changes others make
// to its table (CheckState and a full sync repair them), use one "inet"
// table for both families, clean up conntrack entries, run a sync loop or
// log; two Executors must not write the same table at once.
package flat
