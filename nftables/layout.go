package nftables

// The flat layout is a second way to lay a Ruleset out in the table, beside
// kube-proxy's (Render, RenderChanges and the Executor, the default): per
// Service port state only in data sets and maps, under a number of rules
// that depends on the endpoint counts in use, not on the number of
// Services, so that a Service change is a few element changes (see
// flat.go). It is opt-in by its own entry points: FlatFirstSync (a table
// that does not exist yet), FlatScript and RenderFlat (the whole table),
// RenderFlatChanges (an incremental sync) and FlatNetlink (their elements
// over netlink).

// DefaultFlatTable is the name of the flat layout's table when
// Options.Table is empty: another name than kube-proxy's, whose scripts
// expect kube-proxy's chains in a table called DefaultTable.
const DefaultFlatTable = "svcproxy-flat"
