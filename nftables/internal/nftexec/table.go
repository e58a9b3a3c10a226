package nftexec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/netnsrun"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// Config is what OpenTable needs: the executors' settings that are not a
// layout's.
type Config struct {
	// Family is the table's IP family.
	Family v1.IPFamily
	// Name is the table's name, which ValidTableName accepts.
	Name string
	// NewInterface returns the knftables.Interface for a family and table;
	// nil means Open.
	NewInterface func(family knftables.Family, table string) (knftables.Interface, error)
	// Netlink opens a netfilter netlink socket (Table.NL).
	Netlink bool
	// NetNS, when not "", is the path of the network namespace the table
	// is in; nft runs from a thread in it and the socket is opened in it.
	NetNS string
}

// Table is one nftables table of one family, as an executor reaches it:
// through nft (NFT) and, with Config.Netlink, a netlink socket (NL).
type Table struct {
	Family v1.IPFamily
	Name   string
	NFT    knftables.Interface
	// NL is the netlink socket of Config.Netlink, or nil.
	NL *nftnl.Conn

	// netns is the namespace of Config.NetNS, or nil.
	netns        *netnsrun.Namespace
	newInterface func(knftables.Family, string) (knftables.Interface, error)
	// written is the nftnl.Digest sum of each chain's rules as LearnRules
	// or DeepCheck read them.
	written map[string]uint64
}

// OpenTable opens the namespace of cfg.NetNS, the table's knftables
// interface and, with cfg.Netlink, its netlink socket. On failure it
// releases what it opened; the error of NewInterface is returned as it
// is, the others start "nftables: ".
func OpenTable(cfg Config) (*Table, error) {
	if cfg.Family != v1.IPv4Protocol && cfg.Family != v1.IPv6Protocol {
		return nil, fmt.Errorf("nftables: unknown IP family %q", cfg.Family)
	}
	if !ValidTableName(cfg.Name) {
		return nil, fmt.Errorf("nftables: invalid table name %q", cfg.Name)
	}
	if cfg.NewInterface == nil {
		cfg.NewInterface = Open
	}
	t := &Table{Family: cfg.Family, Name: cfg.Name, newInterface: cfg.NewInterface}
	if cfg.NetNS != "" {
		ns, err := netnsrun.Open(cfg.NetNS)
		if err != nil {
			return nil, fmt.Errorf("nftables: %w", err)
		}
		t.netns = ns
		t.newInterface = inNetNS(cfg.NewInterface, ns)
	}
	nft, err := t.newInterface(Family(cfg.Family), cfg.Name)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.NFT = nft
	if cfg.Netlink {
		err := t.InNamespace(func() error {
			var err error
			t.NL, err = nftnl.Dial()
			return err
		})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("nftables: %w", err)
		}
	}
	return t, nil
}

// InNamespace runs f from a thread in the table's network namespace, or
// from the calling one when Config.NetNS was "": to open another socket
// there.
func (t *Table) InNamespace(f func() error) error {
	if t.netns == nil {
		return f()
	}
	return t.netns.Do(f)
}

// Close closes the netlink socket and the namespace. The table stays as
// it is.
func (t *Table) Close() error {
	var errs []error
	if t.NL != nil {
		errs = append(errs, t.NL.Close())
		t.NL = nil
	}
	if t.netns != nil {
		errs = append(errs, t.netns.Close())
		t.netns = nil
	}
	return errors.Join(errs...)
}

// nlFamily is the table's family as nftnl names it.
func (t *Table) nlFamily() nftnl.Family {
	if t.Family == v1.IPv6Protocol {
		return nftnl.IPv6
	}
	return nftnl.IPv4
}

// ListAll lists the table's chains, sets and maps: over netlink when the
// table has a socket (nft's listing reads every rule too), through nft
// otherwise or if that fails.
func (t *Table) ListAll(ctx context.Context) (map[string][]string, error) {
	if t.NL != nil {
		if names, err := t.NL.ListNames(t.nlFamily(), t.Name); err == nil {
			return names, nil
		}
	}
	return t.NFT.ListAll(ctx)
}

// Replace adds to tx the deletion of the table, whether or not it exists,
// so that what tx adds next replaces it whole.
func (t *Table) Replace(tx *knftables.Transaction) {
	table := &knftables.Table{Family: Family(t.Family), Name: t.Name}
	tx.Add(table)
	tx.Delete(table)
}

// CheckNames reports the first of chains and sets that the table lacks, or
// "" when it has them all. Over netlink it checks that every one of chains
// is there and holds rules (a flushed one has none), with one dump per
// chain that the kernel filters to that chain, and does not look at sets;
// without netlink it checks by name, through nft's listing, that chains and
// sets (or maps) are there.
func (t *Table) CheckNames(ctx context.Context, chains, sets []string) (string, error) {
	if t.NL != nil {
		for _, c := range chains {
			n, err := t.NL.RuleCount(t.nlFamily(), t.Name, c)
			switch {
			case errors.Is(err, syscall.ENOENT):
				return "chain " + c + " (or table " + t.Name + ")", nil
			case err != nil:
				return "", fmt.Errorf("nftables: checking the table: %w", err)
			case n == 0:
				return "the rules of chain " + c, nil
			}
		}
		return "", nil
	}
	names, err := t.ListAll(ctx)
	switch {
	case knftables.IsNotFound(err), err == nil && len(names["chain"]) == 0:
		return "table " + t.Name, nil
	case err != nil:
		return "", fmt.Errorf("nftables: checking the table: %w", err)
	}
	for _, kind := range []string{"chain", "set", "map"} {
		slices.Sort(names[kind])
	}
	has := func(kind, name string) bool { _, ok := slices.BinarySearch(names[kind], name); return ok }
	for _, c := range chains {
		if !has("chain", c) {
			return "chain " + c, nil
		}
	}
	for _, name := range sets {
		if !has("set", name) && !has("map", name) {
			return "set or map " + name, nil
		}
	}
	return "", nil
}

// Cleanup deletes the table in both IP families (a dual-stack proxy runs
// one executor per family, and either one cleans up both).
func (t *Table) Cleanup(ctx context.Context) error {
	return Cleanup(ctx, t.Name, func(f knftables.Family, table string) (knftables.Interface, error) {
		if f == Family(t.Family) {
			return t.NFT, nil
		}
		return t.newInterface(f, table)
	})
}

// Cleanup deletes the table in both IP families through the interfaces
// open returns. A missing table is not an error.
func Cleanup(ctx context.Context, table string, open func(knftables.Family, string) (knftables.Interface, error)) error {
	var errs []error
	for _, f := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		nft, err := open(f, table)
		if err == nil {
			tx := nft.NewTransaction()
			// add, then delete: succeeds whether or not the table exists.
			tx.Add(&knftables.Table{Family: f, Name: table})
			tx.Delete(&knftables.Table{Family: f, Name: table})
			err = nft.Run(ctx, tx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("nftables: deleting table %s %s: %w", f, table, err))
		}
	}
	return errors.Join(errs...)
}

// Expected is what a table must hold, as DeepCheck compares it.
type Expected struct {
	// Rules is the number of rules of every chain the table must have.
	Rules map[string]int
	// Elements is the Digest of the elements of the sets and maps whose
	// elements only the executor writes (not the dynamic ones the packet
	// path fills, nor interval sets, which the kernel may store as more
	// elements), each element hashed as nftnl.ElementHash hashes it.
	Elements map[string]nftnl.Digest
	// order is the names of Rules, sorted (Sort).
	order []string
}

// Sort records the order DeepCheck reads the chains in; call it once
// Rules is filled.
func (w *Expected) Sort() { w.order = slices.Sorted(maps.Keys(w.Rules)) }

// chains are the names of w.Rules, sorted.
func (w Expected) chains() []string {
	if len(w.order) == len(w.Rules) {
		return w.order
	}
	return slices.Sorted(maps.Keys(w.Rules))
}

// ForgetRules forgets what LearnRules read: for a sync that rewrites the
// whole table.
func (t *Table) ForgetRules() { t.written = nil }

// LearnRules reads, over netlink, the rules of chains that a sync has just
// written (nftnl.Conn.RuleDigest, one dump each), for DeepCheck to compare
// them with later: the form the kernel gives a rule is not the one it was
// written in, so the check compares the kernel's form with the kernel's
// form read right after the write. A chain it cannot read (deleted, or an
// error) is forgotten, and learned by the next DeepCheck that reads it and
// finds its number of rules right. Without a netlink socket it does
// nothing.
func (t *Table) LearnRules(chains []string) {
	if t.NL == nil {
		return
	}
	if t.written == nil {
		t.written = map[string]uint64{}
	}
	for _, c := range chains {
		d, err := t.NL.RuleDigest(t.nlFamily(), t.Name, c)
		if err != nil {
			delete(t.written, c)
			continue
		}
		t.written[c] = d.Sum
	}
}

// ForgetChains forgets what LearnRules read of chains: chains deleted.
func (t *Table) ForgetChains(chains []string) {
	for _, c := range chains {
		delete(t.written, c)
	}
}

// DeepCheck compares part of the table with want over netlink: the
// chains of want.Rules whose index in name order is slice modulo slices,
// each with its number of rules and their content as LearnRules read it
// (one dump per chain, which the kernel filters to the chain), and every
// set and map of want.Elements with its number of elements and their
// content (one dump each). Called with slice 0 to of−1 in turn, it
// compares every object in of calls; a dump of the whole table's rules
// would cost the kernel time quadratic in their number. It returns the
// first difference in name order: a chain missing, with another number of
// rules or with rules other than those written, a set or map missing, with
// another number of elements or with other elements; "" when there is
// none, and without a netlink socket (it does not check then). Chains and
// sets want does not name are not looked at. A chain LearnRules did not
// read (or forgot) is learned here, when its number of rules is right.
func (t *Table) DeepCheck(want Expected, slice, of int) (string, error) {
	if t.NL == nil {
		return "", nil
	}
	family := t.nlFamily()
	for i, c := range want.chains() {
		if of > 1 && i%of != slice {
			continue
		}
		d, err := t.NL.RuleDigest(family, t.Name, c)
		switch {
		case errors.Is(err, syscall.ENOENT):
			return "chain " + c + " is missing (or table " + t.Name + ")", nil
		case err != nil:
			return "", fmt.Errorf("nftables: checking the table: %w", err)
		case d.N != want.Rules[c]:
			return fmt.Sprintf("chain %s has %d rules, want %d", c, d.N, want.Rules[c]), nil
		}
		written, ok := t.written[c]
		switch {
		case !ok:
			if t.written == nil {
				t.written = map[string]uint64{}
			}
			t.written[c] = d.Sum
		case written != d.Sum:
			return fmt.Sprintf("chain %s has rules other than those written (%d rules, as many as written)", c, d.N), nil
		}
	}
	for _, s := range slices.Sorted(maps.Keys(want.Elements)) {
		d, err := t.NL.ElementDigest(family, t.Name, s)
		w := want.Elements[s]
		switch {
		case errors.Is(err, syscall.ENOENT):
			return "set or map " + s + " is missing (or table " + t.Name + ")", nil
		case err != nil:
			return "", fmt.Errorf("nftables: checking the table: %w", err)
		case d.N != w.N:
			return fmt.Sprintf("set or map %s has %d elements, want %d", s, d.N, w.N), nil
		case d.Sum != w.Sum:
			return fmt.Sprintf("set or map %s has elements other than those written (%d elements, as many as written)", s, d.N), nil
		}
	}
	return "", nil
}
