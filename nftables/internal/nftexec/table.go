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

	"github.com/svcproxy/svcproxy"
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

// CheckNames reports the first of chains, sets and maps that the table
// lacks, the zero Drift when it has them all. Over netlink it checks that
// every one of chains holds rules, with one dump per chain that the kernel
// filters to that chain, and tells an empty one flushed
// (svcproxy.DriftRule) from missing (DriftChain) with a listing of the
// table's chains; it does not look at sets and maps. Without netlink it
// checks by name, through nft's listing, that chains, sets and maps are
// there. A missing table is svcproxy.DriftTable.
func (t *Table) CheckNames(ctx context.Context, chains, sets, maps []string) (svcproxy.Drift, error) {
	if t.NL != nil {
		for _, c := range chains {
			n, err := t.NL.RuleCount(t.nlFamily(), t.Name, c)
			switch {
			case err != nil && !errors.Is(err, syscall.ENOENT):
				return svcproxy.Drift{}, fmt.Errorf("nftables: checking the table: %w", err)
			case n == 0:
				return t.emptyChain(c, "the rules of chain "+c)
			}
		}
		return svcproxy.Drift{}, nil
	}
	names, err := t.ListAll(ctx)
	switch {
	case knftables.IsNotFound(err), err == nil && len(names["chain"]) == 0:
		return svcproxy.Drift{Kind: svcproxy.DriftTable, What: "table " + t.Name}, nil
	case err != nil:
		return svcproxy.Drift{}, fmt.Errorf("nftables: checking the table: %w", err)
	}
	for _, kind := range []string{"chain", "set", "map"} {
		slices.Sort(names[kind])
	}
	for _, want := range []struct {
		kind  string
		drift svcproxy.DriftKind
		names []string
	}{{"chain", svcproxy.DriftChain, chains}, {"set", svcproxy.DriftSet, sets}, {"map", svcproxy.DriftMap, maps}} {
		for _, name := range want.names {
			if _, ok := slices.BinarySearch(names[want.kind], name); !ok {
				return svcproxy.Drift{Kind: want.drift, What: want.kind + " " + name}, nil
			}
		}
	}
	return svcproxy.Drift{}, nil
}

// missing is the drift of an object (what, of kind) that netlink did not
// find: the whole table missing (svcproxy.DriftTable), or only the object.
func (t *Table) missing(kind svcproxy.DriftKind, what string) (svcproxy.Drift, error) {
	has, err := t.NL.HasTable(t.nlFamily(), t.Name)
	switch {
	case err != nil:
		return svcproxy.Drift{}, fmt.Errorf("nftables: checking the table: %w", err)
	case !has:
		return svcproxy.Drift{Kind: svcproxy.DriftTable, What: "table " + t.Name + " is missing"}, nil
	}
	return svcproxy.Drift{Kind: kind, What: what + " is missing"}, nil
}

// emptyChain is the drift of chain c, in which a netlink dump found no
// rules (the kernel's dump of a chain that does not exist is empty too):
// the whole table missing (svcproxy.DriftTable), the chain
// (DriftChain), or its rules (DriftRule, flushed), then what says it.
// It lists the table's chains, a dump the size of the table, so only
// once a chain was found empty.
func (t *Table) emptyChain(c, what string) (svcproxy.Drift, error) {
	d, err := t.missing(svcproxy.DriftChain, "chain "+c)
	if err != nil || d.Kind == svcproxy.DriftTable {
		return d, err
	}
	names, err := t.NL.ListNames(t.nlFamily(), t.Name)
	switch {
	case err != nil:
		return svcproxy.Drift{}, fmt.Errorf("nftables: checking the table: %w", err)
	case !slices.Contains(names["chain"], c):
		return d, nil
	}
	return svcproxy.Drift{Kind: svcproxy.DriftRule, What: what}, nil
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
	// Maps are the names of Elements that are maps, not sets.
	Maps map[string]bool
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
// content (one dump each): a dump of the whole table's rules would cost
// the kernel time quadratic in their number. It returns the
// first difference in name order: a chain missing, with another number of
// rules or with rules other than those written (svcproxy.DriftRule), a
// set or map missing (DriftSet, DriftMap), with another number of
// elements or with other elements (DriftElement), the table missing
// (DriftTable); the zero Drift when there is none, and without a netlink
// socket (it does not check then). Chains and sets want does not name are
// not looked at. A chain LearnRules did not read (or forgot) is learned
// here, when its number of rules is right.
func (t *Table) DeepCheck(want Expected) (svcproxy.Drift, error) {
	if t.NL == nil {
		return svcproxy.Drift{}, nil
	}
	family := t.nlFamily()
	for _, c := range want.chains() {
		d, err := t.NL.RuleDigest(family, t.Name, c)
		switch {
		case err != nil && !errors.Is(err, syscall.ENOENT):
			return svcproxy.Drift{}, fmt.Errorf("nftables: checking the table: %w", err)
		case err != nil || d.N == 0 && want.Rules[c] > 0:
			return t.emptyChain(c, fmt.Sprintf("chain %s has 0 rules, want %d", c, want.Rules[c]))
		case d.N != want.Rules[c]:
			return svcproxy.Drift{Kind: svcproxy.DriftRule, What: fmt.Sprintf("chain %s has %d rules, want %d", c, d.N, want.Rules[c])}, nil
		}
		written, ok := t.written[c]
		switch {
		case !ok:
			if t.written == nil {
				t.written = map[string]uint64{}
			}
			t.written[c] = d.Sum
		case written != d.Sum:
			return svcproxy.Drift{Kind: svcproxy.DriftRule, What: fmt.Sprintf("chain %s has rules other than those written (%d rules, as many as written)", c, d.N)}, nil
		}
	}
	for _, s := range slices.Sorted(maps.Keys(want.Elements)) {
		d, err := t.NL.ElementDigest(family, t.Name, s)
		w := want.Elements[s]
		kind, missing := "set", svcproxy.DriftSet
		if want.Maps[s] {
			kind, missing = "map", svcproxy.DriftMap
		}
		switch {
		case errors.Is(err, syscall.ENOENT):
			return t.missing(missing, kind+" "+s)
		case err != nil:
			return svcproxy.Drift{}, fmt.Errorf("nftables: checking the table: %w", err)
		case d.N != w.N:
			return svcproxy.Drift{Kind: svcproxy.DriftElement, What: fmt.Sprintf("%s %s has %d elements, want %d", kind, s, d.N, w.N)}, nil
		case d.Sum != w.Sum:
			return svcproxy.Drift{Kind: svcproxy.DriftElement, What: fmt.Sprintf("%s %s has elements other than those written (%d elements, as many as written)", kind, s, d.N)}, nil
		}
	}
	return svcproxy.Drift{}, nil
}
