package svcproxy_test

import (
	"fmt"

	"github.com/svcproxy/svcproxy"
)

// Warnings name the object they are about; a name that could not come from
// the API server is quoted, so that it cannot forge a line of its own in a log.
func ExampleWarning_String() {
	warnings := []svcproxy.Warning{
		{Kind: "Service", Namespace: "shop", Name: "cart", Reason: `externalIP 203.0.113.5 is not allowed: not served`},
		{Kind: "Node", Name: "node-a", Reason: "no zone label"},
		{Kind: "EndpointSlice", Namespace: "shop", Name: "cart-1\nService x/y: all fine", Reason: "invalid name"},
	}
	for _, w := range warnings {
		fmt.Println(w)
	}
	// Output:
	// Service shop/cart: externalIP 203.0.113.5 is not allowed: not served
	// Node node-a: no zone label
	// EndpointSlice shop/"cart-1\nService x/y: all fine": invalid name
}

// A converter of one's own reports what it skipped the way svcproxy's do.
func ExampleReporter() {
	report := svcproxy.Reporter{Kind: "Service", Namespace: "default", Name: "web"}
	report.Warnf("port %q has no number: skipped", "http")
	why := report.Skipf("clusterIP %q is not an IP address", "10.0.0.300")
	fmt.Println(why)
	for _, w := range report.Warnings {
		fmt.Println(w)
	}
	// Output:
	// clusterIP "10.0.0.300" is not an IP address
	// Service default/web: port "http" has no number: skipped
	// Service default/web: clusterIP "10.0.0.300" is not an IP address
}
