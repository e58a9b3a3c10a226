package cowmap_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/internal/cowmap"
)

// With and Without return new Maps; the Map they were called on, like a
// snapshot handed out earlier, does not change.
func ExampleMap() {
	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	dns := types.NamespacedName{Namespace: "kube-system", Name: "dns"}

	var v1 cowmap.Map[int]
	v1 = v1.With(web, 80).With(dns, 53)
	v2 := v1.With(web, 8080).Without(dns)

	for _, m := range []cowmap.Map[int]{v1, v2} {
		port, _ := m.Get(web)
		_, hasDNS := m.Get(dns)
		fmt.Printf("len=%d web=%d dns=%v\n", m.Len(), port, hasDNS)
	}
	// Output:
	// len=2 web=80 dns=true
	// len=1 web=8080 dns=false
}
