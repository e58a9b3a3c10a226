package manifests_test

import (
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// Load reads a directory of manifests into the state.Objects that a State
// takes as they are; the State warns of what the files lack (here, node-c
// names no Node of them).
func ExampleLoad() {
	objs, warnings, err := manifests.Load(filepath.Join("..", "examples", "demo", "manifests"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d Services, %d EndpointSlices, %d Nodes, %d warnings\n", len(objs.Services), len(objs.EndpointSlices), len(objs.Nodes), len(warnings))
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "node-c", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	for _, w := range st.Replace(*objs) {
		fmt.Println("warning:", w)
	}
	// Output:
	// 6 Services, 5 EndpointSlices, 2 Nodes, 0 warnings
	// warning: Node node-c: no Node of this name among the objects: the node has no zone and no addresses
}
