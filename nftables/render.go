package nftables

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftexec"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Options are the settings of a rendering that the Ruleset does not hold.
// The zero value renders kube-proxy's table.
type Options struct {
	// Table is the name of the table; "" means DefaultTable. A proxy that
	// runs beside kube-proxy picks another name. A name must be an nft
	// identifier that needs no quoting: a letter or '_', then letters,
	// digits and '_', '-', '.' or '/', shorter than knftables.NameLengthMax;
	// the renderers and NewExecutor refuse any other.
	Table string
}

// Result reports what a rendered transaction does besides reaching the
// desired state.
type Result struct {
	// Stale are the chains that the transaction flushes because nothing
	// uses them any more. They must be deleted by a later transaction (pass
	// them to RenderChanges as deleteChains, a second or more later):
	// kernels before 6.2 release a chain only some time after the last map
	// element pointing at it is deleted, and report it busy until then.
	Stale []string
	// Deleted are the chains of RenderChanges' deleteChains that the
	// transaction deletes. The others are in use again, or were flushed
	// again by this transaction and are listed in Stale.
	Deleted []string
	// Warnings name the Service ports that are not (fully) rendered: a name
	// that is unsafe in a chain name, or a frontend (address, protocol and
	// port) that another Service port already uses. For RenderChanges they
	// cover only the changed Service ports.
	Warnings []svcproxy.Warning
}

// Family is the knftables family of an IP family: "ip" or "ip6".
func Family(f v1.IPFamily) knftables.Family { return nftexec.Family(f) }

// renderer holds what every rendering of one Ruleset Config needs.
type renderer struct {
	cfg   ruleset.Config
	opts  Options
	table string
	// tableRef is the table's family and name, which the knftables
	// objects of the operations name.
	tableRef  *model.Table
	addrType  []model.Type  // the family's address type, as a set key
	saddr     model.Field   // the family's source address
	daddr     model.Field   // the family's destination address
	podNets   []model.Datum // the cluster CIDRs
	localhost model.Datum   // the family's loopback network
	// scratch is where newRule prints a rule's text.
	scratch []byte
}

func newRenderer(cfg ruleset.Config, opts Options) (*renderer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nftables: ruleset config: %w", err)
	}
	r := &renderer{cfg: cfg, opts: opts, table: opts.Table}
	if r.table == "" {
		r.table = DefaultTable
	}
	if !nftexec.ValidTableName(r.table) {
		return nil, fmt.Errorf("nftables: invalid table name %q", r.table)
	}
	r.tableRef = tableRef(cfg.Family, r.table)
	r.addrType, r.localhost = []model.Type{model.TypeIPv4Addr}, model.Prefix(netip.MustParsePrefix("127.0.0.0/8"))
	r.saddr, r.daddr = model.IPSaddr, model.IPDaddr
	if cfg.Family == v1.IPv6Protocol {
		r.addrType, r.localhost = []model.Type{model.TypeIPv6Addr}, model.Addr(netip.IPv6Loopback())
		r.saddr, r.daddr = model.IP6Saddr, model.IP6Daddr
	}
	for _, p := range cfg.ClusterCIDRs {
		r.podNets = append(r.podNets, model.Network(p))
	}
	return r, nil
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// chainRef is the chain of that name, for a flush or a delete.
func chainRef(name string) *model.Chain { return &model.Chain{Name: name} }
