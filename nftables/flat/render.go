package flat

import "github.com/svcproxy/svcproxy"

// DefaultTable is the name of the flat layout's table when Options.Table
// is empty: another name than kube-proxy's (nftables.DefaultTable), whose
// scripts expect kube-proxy's chains in a table of that name.
const DefaultTable = "svcproxy-flat"

// Options are the settings of a rendering that the Ruleset does not hold.
type Options struct {
	// Table is the name of the table; "" means DefaultTable. As for
	// nftables.Options.Table, a name must be an nft identifier that needs
	// no quoting: a letter or '_', then letters, digits and '_', '-', '.'
	// or '/', shorter than knftables.NameLengthMax; NewExecutor refuses
	// any other.
	Table string
}

// Result reports what a rendering does besides reaching the desired state.
type Result struct {
	// Warnings name the Service ports that are not (fully) rendered: a
	// name that is unsafe in a comment, a frontend (address, protocol and
	// port) that another Service port already uses, ClientIP affinity that
	// the layout cannot render. For RenderChanges they cover only the
	// changed Service ports.
	Warnings []svcproxy.Warning
}
