package nftables_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
)

// elementsOf lists the elements of the maps and sets that hold Service
// ports' elements, as the Executor does before a chunked resync.
func elementsOf(t *rapid.T, fake *knftables.Fake, existing map[string][]string) []*knftables.Element {
	var all []*knftables.Element
	for kind, names := range map[string][]string{
		"set": {"cluster-ips", "hairpin-connections"},
		"map": {"service-ips", "service-nodeports", "no-endpoint-services", "no-endpoint-nodeports", "firewall-ips"},
	} {
		for _, name := range names {
			if !slices.Contains(existing[kind], name) {
				continue
			}
			elems, err := fake.ListElements(context.Background(), kind, name)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, elems...)
		}
	}
	return all
}

// TestResyncMatchesRender: a chunked resync of a loaded table leaves it as
// Render's one transaction does; after every chunk no rule or element
// refers to a chain or set that is not there and no element was added over
// another (apply's checks); and every chunk but the first is encodable for
// netlink.
func TestResyncMatchesRender(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, opts, p := genConfig(t)
		w := newWorld(t, cfg)
		for range rapid.IntRange(1, 10).Draw(t, "before") {
			mutate(t, w, p)
		}
		old := w.build()
		load := func() *knftables.Fake {
			fake := knftables.NewFake(nftables.Family(cfg.Family), tableName(opts))
			tx := fake.NewTransaction()
			if _, err := nftables.Render(tx, old, opts, nil); err != nil {
				t.Fatal(err)
			}
			apply(t, fake, tx)
			return fake
		}
		one, chunked := load(), load()
		for range rapid.IntRange(0, 8).Draw(t, "changes") {
			mutate(t, w, p)
		}
		rs := w.build()
		ctx := context.Background()

		existing, err := one.ListAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx := one.NewTransaction()
		want, err := nftables.Render(tx, rs, opts, existing)
		if err != nil {
			t.Fatal(err)
		}
		apply(t, one, tx)

		elements, chunk := elementsOf(t, chunked, existing), rapid.IntRange(1, 4).Draw(t, "chunk")
		txs, got, err := nftables.RenderResync(chunked.NewTransaction, rs, opts, existing, elements, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if err := nftables.ResyncEncodes(rs, opts, existing, elements, chunk); err != nil {
			t.Fatalf("not encodable for netlink: %v", err)
		}
		for _, tx := range txs {
			apply(t, chunked, tx)
		}
		if diff := cmp.Diff(canonical(one.Dump()), canonical(chunked.Dump())); diff != "" {
			t.Fatalf("after the chunked resync (-Render +resync):\n%s", diff)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Result (-Render +resync):\n%s", diff)
		}
	})
}
