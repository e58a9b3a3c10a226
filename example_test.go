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
