package nftables

import "fmt"

// The flat layout is a second way to lay a Ruleset out in the table, beside
// kube-proxy's (Render, RenderChanges and the Executor, the default): per
// Service port state only in data sets and maps, under a number of rules
// that depends on the endpoint counts in use, not on the number of
// Services, so that a Service change is a few element changes (see
// flat.go). It is opt-in: the Executor syncs it when Options.Layout is
// LayoutFlat, and its entry points are FlatFirstSync (a table that does not
// exist yet), FlatResync (a table that it holds), FlatScript and
// RenderFlat (the whole table),
// RenderFlatChanges (an incremental sync) and FlatNetlink (their elements
// over netlink).

// DefaultFlatTable is the name of the flat layout's table when
// Options.Table is empty: another name than kube-proxy's, whose scripts
// expect kube-proxy's chains in a table called DefaultTable.
const DefaultFlatTable = "svcproxy-flat"

// Layout is how the Executor lays a Ruleset out in its table.
type Layout uint8

const (
	// LayoutKubeProxy is kube-proxy's layout (Render, RenderChanges): a
	// chain per Service port and per endpoint, under kube-proxy's names,
	// in the table DefaultTable unless Options.Table says otherwise.
	LayoutKubeProxy Layout = iota
	// LayoutFlat is the flat layout (RenderFlat, RenderFlatChanges): per
	// Service port state only in sets and maps, in the table
	// DefaultFlatTable unless Options.Table says otherwise. The Executor
	// writes a table that does not exist yet, with ExecutorConfig.Netlink,
	// as its definitions in one nft transaction and then its other
	// elements over netlink in one transaction (in as few as the socket's
	// send buffer takes when it could not be raised; until the last, the
	// table serves only the Service ports whose elements are in). With
	// ExecutorConfig.Netlink a full sync of a loaded table (FlatResync)
	// rewrites its definitions in one nft transaction and then flushes and
	// refills its element sets in one netlink transaction; without a
	// socket, or when that fails (SyncResult.NotNetlink says why), a full
	// sync replaces the table whole in one nft transaction. An
	// incremental sync is one transaction: over
	// netlink when it changes elements only and the Executor has a socket,
	// through nft when it changes rules (an endpoint count appears in or
	// leaves a target group). The layout flushes no chains, so
	// SyncResult.NextSync is 0.
	LayoutFlat
)

// String is the layout's name as ParseLayout reads it: "kube-proxy" or
// "flat".
func (l Layout) String() string {
	switch l {
	case LayoutKubeProxy:
		return "kube-proxy"
	case LayoutFlat:
		return "flat"
	}
	return fmt.Sprintf("Layout(%d)", uint8(l))
}

// ParseLayout reads a layout's name, as Layout.String writes it.
func ParseLayout(s string) (Layout, error) {
	for _, l := range []Layout{LayoutKubeProxy, LayoutFlat} {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("nftables: unknown layout %q (kube-proxy or flat)", s)
}
