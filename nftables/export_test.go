package nftables

import (
	"cmp"
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// CheckFrontends reports an element of a Service port of rs whose frontend
// is not among the port's Frontends: RenderChanges would miss its owner.
func CheckFrontends(rs *ruleset.Ruleset) error {
	r, err := newRenderer(rs.Config(), Options{})
	if err != nil {
		return err
	}
	for _, s := range rs.Services() {
		fs := s.Frontends()
		r.elements(s, func(k elemKey, _ verdict, kind ruleset.FrontendKind) {
			if k.in == inHairpin {
				return // no frontend's: see changePlan.claimHairpin
			}
			f := k.frontend()
			f.Kind = kind
			if err == nil && !slices.Contains(fs, f) {
				err = fmt.Errorf("%v: element %+v not on any of its Frontends %v", s.Name, k, fs)
			}
		})
	}
	return err
}

// NetlinkChanges renders the changes from old to new as an Executor does
// before it applies them over netlink, writes them to tx too (to show them),
// and encodes them with netlinkBatch: the number of messages of the batch,
// and the error of either.
func NetlinkChanges(tx *knftables.Transaction, old, new *ruleset.Ruleset, opts Options, deleteChains []string) (Result, int, error) {
	var ops opRecorder
	res, err := renderChanges(func(*renderer) txWriter { return &ops }, old, new, opts, deleteChains)
	if err != nil {
		return res, 0, err
	}
	ops.replay(knftWriter{tx: tx, table: tableRef(new.Config().Family, cmp.Or(opts.Table, DefaultTable))})
	b, err := netlinkBatch(Family(new.Config().Family), cmp.Or(opts.Table, DefaultTable), ops.ops, "")
	if err != nil {
		return res, 0, err
	}
	return res, b.Len(), nil
}

// NetlinkFirstSync renders a first sync of rs in chunks of chunk Service
// ports as an Executor does, and encodes the chunks after the first (the
// Service ports, which it sends over netlink) with netlinkBatch: the number
// of chunks, and the first error.
func NetlinkFirstSync(rs *ruleset.Ruleset, opts Options, chunk int) (int, error) {
	chunks, _, err := renderNew(newRecorder, rs, opts, chunk)
	if err != nil {
		return 0, err
	}
	for i, c := range chunks[1:] {
		if _, err := netlinkBatch(Family(rs.Config().Family), cmp.Or(opts.Table, DefaultTable), c.ops, ""); err != nil {
			return len(chunks), fmt.Errorf("chunk %d of %d: %w", i+2, len(chunks), err)
		}
	}
	return len(chunks), nil
}

// EncodeRule encodes the statements of a rule of a table of family as
// netlinkBatch does.
func EncodeRule(family knftables.Family, stmts []model.Stmt) ([]nftnl.Expr, error) {
	return newEncoder(family).rule(stmts)
}

// RenderResync exposes renderResync to the tests, with knftables
// transactions.
func RenderResync(newTx func() *knftables.Transaction, rs *ruleset.Ruleset, opts Options, existing map[string][]string, elements []*knftables.Element, chunk int) ([]*knftables.Transaction, Result, error) {
	var txs []*knftables.Transaction
	_, res, err := renderResync(func(r *renderer) knftWriter {
		txs = append(txs, newTx())
		return r.knftWriter(txs[len(txs)-1])
	}, rs, opts, existing, elements, chunk)
	if err != nil {
		return nil, Result{}, err
	}
	return txs, res, nil
}

// ResyncEncodes renders a chunked resync as the Executor does and encodes
// every transaction but the first (the fixed objects, through nft) with
// netlinkBatch.
func ResyncEncodes(rs *ruleset.Ruleset, opts Options, existing map[string][]string, elements []*knftables.Element, chunk int) error {
	chunks, _, err := renderResync(newRecorder, rs, opts, existing, elements, chunk)
	if err != nil {
		return err
	}
	for i, c := range chunks[1:] {
		if _, err := netlinkBatch(Family(rs.Config().Family), cmp.Or(opts.Table, DefaultTable), c.ops, ""); err != nil {
			return fmt.Errorf("transaction %d of %d: %w", i+2, len(chunks), err)
		}
	}
	return nil
}

// ChunkedChanges renders the changes from old to new as an Executor with
// Netlink and ChangeChunk chunk does, into transactions made by newTx,
// after checking that every transaction is encodable for netlink. It also
// names the Service ports each transaction changes.
func ChunkedChanges(newTx func() *knftables.Transaction, old, new *ruleset.Ruleset, opts Options, deleteChains []string, chunk int) ([]*knftables.Transaction, [][]servicemap.PortName, Result, error) {
	recorded, res, err := renderChangesChunked(newRecorder, old, new, opts, deleteChains, chunk)
	if err != nil {
		return nil, nil, res, err
	}
	txs := make([]*knftables.Transaction, len(recorded))
	for i, ops := range recorded {
		if _, err := netlinkBatch(Family(new.Config().Family), cmp.Or(opts.Table, DefaultTable), ops.ops, ""); err != nil {
			return nil, nil, res, fmt.Errorf("transaction %d of %d: %w", i+1, len(recorded), err)
		}
		txs[i] = newTx()
		ops.replay(knftWriter{tx: txs[i], table: tableRef(new.Config().Family, cmp.Or(opts.Table, DefaultTable))})
	}
	var ignored Result
	p, err := planChanges(old, new, opts, &ignored)
	if err != nil {
		return nil, nil, res, err
	}
	var names [][]servicemap.PortName
	for _, c := range p.chunks(chunk) {
		var ports []servicemap.PortName
		for _, pc := range c.changes {
			ports = append(ports, pc.name)
		}
		names = append(names, ports)
	}
	return txs, names, res, nil
}
