package engine_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// printBackend is a data plane that prints what it is asked to do.
type printBackend struct{ syncs int }

func (b *printBackend) Sync(_ context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	b.syncs++
	fmt.Printf("sync %s: %d Service ports\n", rs.Config().Family, rs.Len())
	return svcproxy.SyncResult{Full: b.syncs == 1}, nil
}

func (b *printBackend) RequestFullSync() {}
func (b *printBackend) CheckState(context.Context) (svcproxy.Drift, error) {
	return svcproxy.Drift{}, nil
}
func (b *printBackend) Cleanup(context.Context) error { return nil }
func (b *printBackend) Close() error                  { return nil }

// An Engine over a Backend of one's own. Run would sync on every Request
// and periodically; Sync here runs one sync, as a proxy's --once does.
func Example() {
	must := warnings.Must(warnings.Example)
	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	slices := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(services.Update(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}))
	builder, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	if err != nil {
		panic(err)
	}
	source := engine.ProviderFunc(func(context.Context) (engine.Desired, error) {
		svcs, _ := services.Snapshot()
		eps, _ := slices.Snapshot()
		rs, ws := builder.Build(svcs, eps)
		must.None(ws)
		return engine.Desired{Rulesets: map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs}}, nil
	})
	e, err := engine.New(engine.Config{
		Backends: map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: &printBackend{}},
		Provider: source,
		OnSync: func(ev engine.SyncEvent) {
			fmt.Println("full:", ev.Full, "error:", ev.Err)
		},
	})
	if err != nil {
		panic(err)
	}
	if err := e.Sync(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("healthy:", e.Health().Healthy)
	// Output:
	// sync IPv4: 1 Service ports
	// full: true error: <nil>
	// healthy: true
}

// The executors of this module are Backends.
var (
	_ engine.Backend = (*iptables.Executor)(nil)
	_ engine.Backend = (*nftables.Executor)(nil)
)
