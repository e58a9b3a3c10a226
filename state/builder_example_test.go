package state_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// A Builder builds the Rulesets of every family of a State's Snapshots,
// each from the last: ConfigFrom checks one base Config for both families
// at once and completes it per family from the Snapshot. Each build
// warning comes out once, however many builds follow.
func ExampleBuilder() {
	must := warnings.Must(warnings.Example)
	if _, err := state.ConfigFrom(ruleset.Config{MasqueradeMark: 3}); err != nil {
		fmt.Println("refused:", err)
	}
	config, err := state.ConfigFrom(ruleset.Config{
		ClusterCIDRs:        []netip.Prefix{netip.MustParsePrefix("198.18.0.0/20"), netip.MustParsePrefix("2001:db8:18::/64")},
		RestrictExternalIPs: true,
	})
	if err != nil {
		panic(err)
	}
	builder, err := state.NewBuilder(config)
	if err != nil {
		panic(err)
	}
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, "node-a", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	must.None(st.UpdateService(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIPs:  []string{"198.19.0.10", "2001:db8:19::10"},
			ExternalIPs: []string{"198.19.1.1"},
			Ports:       []v1.ServicePort{{Name: "http", Port: 80}},
		},
	}))
	for range 2 {
		built, err := builder.Build(st.Snapshot())
		if err != nil {
			panic(err)
		}
		for _, f := range st.Families() {
			fmt.Printf("%s: %d Service ports\n", f, built.Rulesets[f].Len())
		}
		for _, w := range built.Warnings {
			fmt.Println("warning:", w)
		}
	}
	// Output:
	// refused: ruleset config: masquerade mark 0x3 is not a single bit
	// IPv4: 1 Service ports
	// IPv6: 1 Service ports
	// warning: Service demo/web: externalIP 198.19.1.1 is not allowed: not served
	// IPv4: 1 Service ports
	// IPv6: 1 Service ports
}
