package nftables

// Layout is the way a Ruleset is laid out in the table.
//
//   - LayoutKubeProxy (the default) is kube-proxy's: chains per Service
//     port and per endpoint, reached through verdict maps. Render,
//     RenderChanges and the Executor write it.
//   - LayoutFlat keeps per-Service state only in data sets and maps, under
//     a number of rules that depends on the endpoint counts in use, not on
//     the number of Services: a Service change is a few element changes.
//     RenderFlat and RenderFlatChanges write it (see flat.go).
type Layout uint8

const (
	LayoutKubeProxy Layout = iota
	LayoutFlat
)

// String is the layout's name as a flag takes it: "kube-proxy" or "flat".
func (l Layout) String() string {
	if l == LayoutFlat {
		return "flat"
	}
	return "kube-proxy"
}

// DefaultFlatTable is the name of the flat layout's table when
// Options.Table is empty: another name than kube-proxy's, whose scripts
// expect kube-proxy's chains in a table called DefaultTable.
const DefaultFlatTable = "svcproxy-flat"
