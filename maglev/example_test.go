package maglev_test

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/maglev"
)

// Every node that builds the table of the same targets sends a flow of the
// same hash to the same target; each target owns a third of the entries.
func Example() {
	targets := []netip.AddrPort{
		netip.MustParseAddrPort("198.18.66.2:8080"),
		netip.MustParseAddrPort("198.18.64.2:8080"),
		netip.MustParseAddrPort("198.18.65.2:8080"),
	}
	tab, err := maglev.New(targets, 251)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("entries per target:", tab.Counts())
	same, _ := maglev.New([]netip.AddrPort{targets[2], targets[0], targets[1]}, 251)
	for _, h := range []uint64{1, 2, 3, 4} {
		a, _ := tab.Lookup(h)
		b, _ := same.Lookup(h)
		fmt.Println(h, a, a == b)
	}
	// Output:
	// entries per target: [84 84 83]
	// 1 198.18.64.2:8080 true
	// 2 198.18.65.2:8080 true
	// 3 198.18.64.2:8080 true
	// 4 198.18.64.2:8080 true
}
