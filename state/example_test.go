package state_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// A dual-stack proxy: one State for both families, each family's Ruleset
// built from its part of a Snapshot and then updated from the next one.
// The dual-stack Service's bad externalIP is reported once.
func Example() {
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, "node-a", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	for _, w := range st.UpdateService(service("web", []string{"198.19.0.10", "2001:db8:19::10"}, "not-an-ip")) {
		fmt.Println("warning:", w)
	}
	st.UpdateSlice(slice("web", "web-v4", "198.18.1.1"))
	st.UpdateSlice(slice("web", "web-v6", "2001:db8:18::1", "2001:db8:18::2"))

	built := map[v1.IPFamily]*ruleset.Ruleset{}
	sync := func() {
		snap := st.Snapshot()
		for _, fam := range snap.Families() {
			b, err := ruleset.NewBuilder(ruleset.Config{Family: fam.Family, Node: snap.Node})
			if err != nil {
				panic(err)
			}
			rs, changes, _ := b.Update(built[fam.Family], fam.Services, fam.Endpoints)
			built[fam.Family] = rs
			for _, s := range rs.Services() {
				fmt.Printf("%s %s: %d targets (%d added, %d changed)\n", fam.Family, s.Name, len(s.ClusterTargets), len(changes.Added), len(changes.Changed))
			}
		}
	}
	sync()
	st.DeleteSlice("ns", "web-v6")
	sync()
	// Output:
	// warning: Service ns/web: invalid externalIP "not-an-ip" dropped
	// IPv4 ns/web:p: 1 targets (1 added, 0 changed)
	// IPv6 ns/web:p: 2 targets (1 added, 0 changed)
	// IPv4 ns/web:p: 1 targets (0 added, 0 changed)
	// IPv6 ns/web:p: 0 targets (0 added, 1 changed)
}
