package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Options are the settings of a rendering that the Ruleset does not hold.
// The zero value renders kube-proxy's table.
type Options struct {
	// Table is the name of the table; "" means DefaultTable. A proxy that
	// runs beside kube-proxy picks another name.
	Table string
	// Layout is the layout the Executor syncs; the zero value is
	// kube-proxy's. Render, RenderChanges, RenderNew and Script always
	// render kube-proxy's layout, RenderFlat and its kin the flat one.
	Layout Layout
}

// ErrFullSyncNeeded is returned by RenderChanges when it cannot compute the
// changes: there is no previous Ruleset, or the two Rulesets were built with
// different Configs. Render the whole table instead. It is
// svcproxy.ErrFullSyncNeeded, the value every backend uses.
var ErrFullSyncNeeded = svcproxy.ErrFullSyncNeeded

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
func Family(f v1.IPFamily) knftables.Family {
	if f == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// renderer holds what every rendering of one Ruleset Config needs.
type renderer struct {
	cfg       ruleset.Config
	opts      Options
	family    knftables.Family
	table     string
	ipX       string // "ip" or "ip6"
	addrType  string // "ipv4_addr" or "ipv6_addr"
	mark      string
	fromPods  string // matches traffic from the cluster CIDRs, or ""
	notPods   string // matches traffic from outside them, or ""
	localhost string // the family's loopback network
}

func newRenderer(cfg ruleset.Config, opts Options) (*renderer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nftables: ruleset config: %w", err)
	}
	r := &renderer{cfg: cfg, opts: opts, family: Family(cfg.Family), table: opts.Table}
	if r.table == "" {
		r.table = DefaultTable
	}
	if !validTableName(r.table) {
		return nil, fmt.Errorf("nftables: invalid table name %q", r.table)
	}
	is6 := cfg.Family == v1.IPv6Protocol
	r.ipX, r.addrType, r.localhost = "ip", "ipv4_addr", "127.0.0.0/8"
	if is6 {
		r.ipX, r.addrType, r.localhost = "ip6", "ipv6_addr", "::1"
	}
	r.mark = fmt.Sprintf("%#08x", cfg.Mark())
	if len(cfg.ClusterCIDRs) > 0 {
		set := prefixSet(cfg.ClusterCIDRs)
		r.fromPods = r.ipX + " saddr " + set
		r.notPods = r.ipX + " saddr != " + set
	}
	return r, nil
}

// validTableName accepts the nft identifiers that need no quoting.
func validTableName(s string) bool {
	if s == "" || len(s) > knftables.NameLengthMax-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
		if i == 0 && !letter {
			return false
		}
		if !letter && (c < '0' || c > '9') && c != '-' && c != '.' && c != '/' {
			return false
		}
	}
	return true
}

// prefixSet is one prefix, or an anonymous set of them.
func prefixSet(ps []netip.Prefix) string {
	if len(ps) == 1 {
		return ps[0].Masked().String()
	}
	strs := make([]string, len(ps))
	for i, p := range ps {
		strs[i] = p.Masked().String()
	}
	return "{ " + strings.Join(strs, " , ") + " }"
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func (r *renderer) chain(name string) *knftables.Chain {
	return &knftables.Chain{Family: r.family, Table: r.table, Name: name}
}

func (r *renderer) rule(chain, rule string, comment string) *knftables.Rule {
	ru := &knftables.Rule{Family: r.family, Table: r.table, Chain: chain, Rule: rule}
	if comment != "" {
		ru.Comment = &comment
	}
	return ru
}

func ptr[T any](v T) *T { return &v }
