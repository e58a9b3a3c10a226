// Package endpoints turns discovery/v1 EndpointSlices into the endpoints of
// each Service port (servicemap.PortName), for one IP family.
//
// The slices of one Service (found by the kubernetes.io/service-name label)
// are merged: endpoints are matched to Service ports by port name and
// protocol; slices of the other address family and FQDN slices are ignored;
// ports with no number are ignored. Each endpoint is its first address, as
// kube-proxy reads it. Where kube-proxy reads an object the API server
// would refuse, or accepts only with its StrictIPCIDRValidation gate off,
// this package reads it as kube-proxy does, with a warning: a port with no
// name is skipped; a port listed twice in a slice serves the endpoints
// under each of its numbers; IPv4 octets with leading zeros are decimal
// and an IPv4-mapped IPv6 address is IPv4. Multicast endpoint addresses,
// which the API server accepts (but for link-local ones), are used, with a
// warning. The addresses the API server always refuses for endpoints
// (unspecified, loopback, link-local) are skipped.
//
// When the same address and port appear more than once, the copy kept is the one kube-proxy keeps when it reads
// the slices in the order of their names, and each slice's endpoints in
// its order: the last copy that is not terminating, or the first copy when
// all are terminating (a pod that reuses the address of a terminating pod
// wins over it). kube-proxy reads a Service's slices in the order of a Go
// map: where the copy it keeps depends on that order (copies that differ,
// in different slices, the last non-terminating or, all terminating, the
// first of each slice), it keeps any of them from one run to the next;
// this package always keeps the same one, one of kube-proxy's choices, so
// the result never depends on the order slices arrive in. Wherever
// kube-proxy's choice does not depend on the order (all copies in one
// slice, say), it is kube-proxy's. Endpoints of a port are sorted by
// address and port.
//
// Malformed endpoints and ports are skipped and reported as
// svcproxy.Warnings; a malformed slice is skipped whole.
//
// Tracker follows slice adds, updates and deletes in any order and hands out
// immutable Snapshots with the ports whose endpoints changed, and the UDP and
// SCTP ports that lost a serving endpoint, whose conntrack entries may now
// point at a pod that is gone. It holds each endpoint of a Service whose
// endpoints are all in one slice (the usual case) once: its Snapshots share
// the lists it parsed from that slice.
//
// The package is pure: no I/O, no clock, no randomness, no logging.
//
// # Limitations
//
//   - EndpointSlices are tied to Services by the kubernetes.io/service-name
//     label alone; the Service itself need not exist (ruleset joins the two).
//   - FQDN slices, and slices whose address type is not the Tracker's family,
//     are ignored.
//   - Hints are taken as the EndpointSlice controller wrote them; topology
//     can compute them for slices that did not pass through it.
package endpoints
