package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
)

// okRunner accepts every iptables command: every rule checked is there.
type okRunner struct{}

func (okRunner) Run(context.Context, iptables.Command) error { return nil }

// executors are the executors of this module as Backends, over fakes.
func executors(t *testing.T) map[string]engine.Backend {
	t.Helper()
	ipt, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: v1.IPv4Protocol, Runner: okRunner{}})
	if err != nil {
		t.Fatal(err)
	}
	nft, err := nftables.NewExecutor(nftables.ExecutorConfig{
		Family: v1.IPv4Protocol,
		NewInterface: func(family knftables.Family, table string) (knftables.Interface, error) {
			return knftables.NewFake(family, table), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]engine.Backend{"iptables": ipt, "nftables": nft}
}

// TestExecutorsShareErrors: a first sync falls back for
// svcproxy.ErrFullSyncNeeded, the one value every backend wraps.
func TestExecutorsShareErrors(t *testing.T) {
	rs := fixture.Ruleset(t, ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	res, err := executors(t)["nftables"].(*nftables.Executor).Apply(context.Background(), rs)
	if err != nil || !errors.Is(res.Fallback, svcproxy.ErrFullSyncNeeded) {
		t.Errorf("first nftables sync: fallback %v, %v; want svcproxy.ErrFullSyncNeeded", res.Fallback, err)
	}
}

// TestExecutorsAsBackends: both executors sync fully first, then
// incrementally, and may be used from several
// goroutines at once (run with -race).
func TestExecutorsAsBackends(t *testing.T) {
	rs := fixture.Ruleset(t, ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	ctx := context.Background()
	for name, b := range executors(t) {
		first, err := b.Sync(ctx, rs)
		if err != nil || !first.Full {
			t.Fatalf("%s: first sync %+v, %v; want a full one", name, first, err)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i % 3 {
				case 0:
					if _, err := b.Sync(ctx, rs); err != nil {
						t.Errorf("%s: concurrent Sync: %v", name, err)
					}
				case 1:
					if _, err := b.CheckState(ctx); err != nil {
						t.Errorf("%s: concurrent CheckState: %v", name, err)
					}
				case 2:
					b.RequestFullSync()
				}
			}()
		}
		wg.Wait()
		if _, err := b.Sync(ctx, rs); err != nil {
			t.Errorf("%s: Sync after the concurrent calls: %v", name, err)
		}
		again, err := b.Sync(ctx, rs)
		if err != nil || again.Full {
			t.Errorf("%s: Sync of an unchanged Ruleset: %+v, %v; want an incremental one", name, again, err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}
