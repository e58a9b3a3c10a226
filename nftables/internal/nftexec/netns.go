package nftexec

import (
	"context"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/netnsrun"
)

// inNetNS returns open made to open its interfaces in ns and to run every
// nft command of theirs from a thread in ns.
func inNetNS(open func(knftables.Family, string) (knftables.Interface, error), ns *netnsrun.Namespace) func(knftables.Family, string) (knftables.Interface, error) {
	return func(family knftables.Family, table string) (knftables.Interface, error) {
		var nft knftables.Interface
		err := ns.Do(func() error {
			var err error
			nft, err = open(family, table)
			return err
		})
		if err != nil {
			return nil, err
		}
		return netnsInterface{ns: ns, nft: nft}, nil
	}
}

// netnsInterface runs the commands of a knftables.Interface from a thread
// in a network namespace: knftables starts nft from the calling thread.
type netnsInterface struct {
	ns  *netnsrun.Namespace
	nft knftables.Interface
}

func (n netnsInterface) NewTransaction() *knftables.Transaction { return n.nft.NewTransaction() }

func (n netnsInterface) Run(ctx context.Context, tx *knftables.Transaction) error {
	return n.ns.Do(func() error { return n.nft.Run(ctx, tx) })
}

func (n netnsInterface) Check(ctx context.Context, tx *knftables.Transaction) error {
	return n.ns.Do(func() error { return n.nft.Check(ctx, tx) })
}

func (n netnsInterface) ListAll(ctx context.Context) (names map[string][]string, err error) {
	err = n.ns.Do(func() error {
		names, err = n.nft.ListAll(ctx)
		return err
	})
	return names, err
}

func (n netnsInterface) List(ctx context.Context, objectType string) (names []string, err error) {
	err = n.ns.Do(func() error {
		names, err = n.nft.List(ctx, objectType)
		return err
	})
	return names, err
}

func (n netnsInterface) ListRules(ctx context.Context, chain string) (rules []*knftables.Rule, err error) {
	err = n.ns.Do(func() error {
		rules, err = n.nft.ListRules(ctx, chain)
		return err
	})
	return rules, err
}

func (n netnsInterface) ListElements(ctx context.Context, objectType, name string) (elements []*knftables.Element, err error) {
	err = n.ns.Do(func() error {
		elements, err = n.nft.ListElements(ctx, objectType, name)
		return err
	})
	return elements, err
}

func (n netnsInterface) ListCounters(ctx context.Context) (counters []*knftables.Counter, err error) {
	err = n.ns.Do(func() error {
		counters, err = n.nft.ListCounters(ctx)
		return err
	})
	return counters, err
}
