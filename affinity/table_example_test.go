package affinity_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/affinity"
)

// A proxy keeps one Table; for each new flow it asks the Table for the
// target, with what the Service offers now and a pick for when the
// affinity does not hold. Each flow restarts the 10 s timeout: the flow at
// +30 s comes 18 s after the last one and is picked anew.
func ExampleTable() {
	var table affinity.Table[string]
	policy, _ := affinity.ClientIP(10)
	client, start := netip.MustParseAddr("198.18.32.2"), time.Unix(0, 0)
	a, b := netip.MustParseAddrPort("198.18.64.2:8080"), netip.MustParseAddrPort("198.18.65.2:8080")
	offered := func(netip.AddrPort) bool { return true }
	for _, flow := range []struct {
		after time.Duration
		pick  netip.AddrPort
	}{{0, a}, {6 * time.Second, b}, {12 * time.Second, b}, {30 * time.Second, b}} {
		now, pick := start.Add(flow.after), flow.pick
		got := table.Choose("demo/web:http", client, policy, now, offered, func() netip.AddrPort { return pick })
		fmt.Printf("+%v: %v\n", now.Sub(start), got)
	}
	// Output:
	// +0s: 198.18.64.2:8080
	// +6s: 198.18.64.2:8080
	// +12s: 198.18.64.2:8080
	// +30s: 198.18.65.2:8080
}
