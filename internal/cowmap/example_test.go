package cowmap_test

import (
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/internal/cowmap"
)

// service is a key ordered by its Compare method.
type service string

func (a service) Compare(b service) int { return strings.Compare(string(a), string(b)) }

// With and Without return new Maps; the Map they were called on, like a
// snapshot handed out earlier, does not change.
func ExampleMap() {
	var v1 cowmap.Map[service, int]
	v1 = v1.With("web", 80).With("dns", 53)
	v2 := v1.With("web", 8080).Without("dns")

	for _, m := range []cowmap.Map[service, int]{v1, v2} {
		port, _ := m.Get("web")
		_, hasDNS := m.Get("dns")
		fmt.Printf("len=%d web=%d dns=%v\n", m.Len(), port, hasDNS)
	}
	// Output:
	// len=2 web=80 dns=true
	// len=1 web=8080 dns=false
}

// All reads a Map in key order, whatever the order of the Withs.
func ExampleMap_All() {
	m := cowmap.Map[service, int]{}.With("web", 80).With("api", 443).With("dns", 53)
	for name, port := range m.All {
		fmt.Println(name, port)
	}
	// Output:
	// api 443
	// dns 53
	// web 80
}
