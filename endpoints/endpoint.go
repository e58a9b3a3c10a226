package endpoints

import (
	"cmp"
	"net/netip"
	"slices"
)

// Endpoint is one backend of one Service port, as an EndpointSlice describes
// it. Values are immutable: the hint slices must not be modified.
type Endpoint struct {
	Addr netip.Addr
	Port uint16
	// Ready, Serving and Terminating are the EndpointSlice conditions with
	// their API defaults applied (nil ready and serving mean true, nil
	// terminating means false).
	Ready       bool
	Serving     bool
	Terminating bool
	// NodeName and Zone say where the endpoint runs ("" when unknown).
	NodeName string
	Zone     string
	// ZoneHints and NodeHints are the topology hints, sorted and without
	// duplicates.
	ZoneHints []string
	NodeHints []string
}

// noEndpoint is what a nil *Endpoint reads as: the zero Endpoint.
var noEndpoint Endpoint

// orZero is e, or the zero Endpoint for a nil e: the methods of a nil
// *Endpoint read it as the zero Endpoint.
func (e *Endpoint) orZero() *Endpoint {
	if e == nil {
		return &noEndpoint
	}
	return e
}

// AddrPort is the endpoint's address and port.
func (e *Endpoint) AddrPort() netip.AddrPort {
	e = e.orZero()
	return netip.AddrPortFrom(e.Addr, e.Port)
}

// String is the endpoint's "ip:port" ("[ip]:port" for IPv6).
func (e *Endpoint) String() string { return e.AddrPort().String() }

// Compare orders endpoints by address, then port.
func (e *Endpoint) Compare(o *Endpoint) int {
	e, o = e.orZero(), o.orZero()
	return cmp.Or(e.Addr.Compare(o.Addr), cmp.Compare(e.Port, o.Port))
}

// Equal reports whether two endpoints are the same in every field.
func (e *Endpoint) Equal(o *Endpoint) bool {
	e, o = e.orZero(), o.orZero()
	return e.Addr == o.Addr && e.Port == o.Port &&
		e.Ready == o.Ready && e.Serving == o.Serving && e.Terminating == o.Terminating &&
		e.NodeName == o.NodeName && e.Zone == o.Zone &&
		slices.Equal(e.ZoneHints, o.ZoneHints) && slices.Equal(e.NodeHints, o.NodeHints)
}

// HasZoneHint reports whether zone is among the endpoint's zone hints.
func (e *Endpoint) HasZoneHint(zone string) bool {
	_, found := slices.BinarySearch(e.orZero().ZoneHints, zone)
	return found
}

// HasNodeHint reports whether node is among the endpoint's node hints.
func (e *Endpoint) HasNodeHint(node string) bool {
	_, found := slices.BinarySearch(e.orZero().NodeHints, node)
	return found
}
