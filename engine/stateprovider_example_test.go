package engine_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// A StateProvider has a state.Builder build the Rulesets of a State for an
// Engine: the ConfigFunc completes each family's Config from the Snapshot
// (the node, its addresses), and each build warning is reported once,
// however many syncs follow.
func ExampleStateProvider() {
	must := warnings.Must(warnings.Example)
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "node-a", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	must.None(st.UpdateService(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"}, ExternalIPs: []string{"198.19.1.1"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}))
	config, err := state.ConfigFrom(ruleset.Config{
		RestrictExternalIPs: true,
		AllowedExternalIPs:  []netip.Prefix{netip.MustParsePrefix("198.19.2.0/24")},
	})
	if err != nil {
		panic(err)
	}
	builder, err := state.NewBuilder(config)
	if err != nil {
		panic(err)
	}
	provider := engine.StateProvider{State: st, Builder: builder, OnWarnings: func(ws []svcproxy.Warning) {
		for _, w := range ws {
			fmt.Println("warning:", w)
		}
	}}
	e, err := engine.New(engine.Config{
		Backends: map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: &printBackend{}},
		Provider: provider,
	})
	if err != nil {
		panic(err)
	}
	for range 2 {
		if err := e.Sync(context.Background()); err != nil {
			panic(err)
		}
	}
	// Output:
	// warning: Service default/web: externalIP 198.19.1.1 is not allowed: not served
	// sync IPv4: 1 Service ports
	// sync IPv4: 1 Service ports
}
