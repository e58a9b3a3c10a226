package endpoints

import (
	"net/netip"
	"slices"
)

// Port is what a Snapshot holds for one Service port. Its slices must not
// be modified. The zero Port has no endpoints and knows nothing of them
// (see AllReadyUnhinted and MaybeOnNode).
type Port struct {
	// Endpoints are the port's endpoints, sorted by address and port, each
	// address and port once.
	Endpoints []Endpoint
	// Serving are the addresses and ports of the Endpoints that are serving
	// or ready, in their order: those that existing connections may keep
	// using, whichever node they run on and whether or not they take new
	// ones. Nil when there are none.
	Serving []netip.AddrPort
	summary summary
}

// PortOf is the Port that a Snapshot holds for a port whose endpoints are
// eps, which must be sorted by address and port, each address and port
// once (as Merge gives them).
func PortOf(eps []Endpoint) Port {
	return Port{Endpoints: eps, Serving: slices.Clip(appendServing(nil, eps)), summary: summarize(eps)}
}

// usable reports whether existing connections may keep using ep: it is
// serving or ready (Port.Serving).
func (ep *Endpoint) usable() bool { return ep.Serving || ep.Ready }

// appendServing appends the addresses and ports of the eps that are
// usable, in their order, to dst.
func appendServing(dst []netip.AddrPort, eps []Endpoint) []netip.AddrPort {
	for i := range eps {
		if eps[i].usable() {
			dst = append(dst, eps[i].AddrPort())
		}
	}
	return dst
}

// countServing is the number of eps that are usable.
func countServing(eps []Endpoint) int {
	n := 0
	for i := range eps {
		if eps[i].usable() {
			n++
		}
	}
	return n
}

// AllReadyUnhinted reports that p has endpoints, and that every one is
// ready and has no topology hints (ZoneHints, NodeHints). It is false for
// a Port that neither a Snapshot nor PortOf made.
func (p Port) AllReadyUnhinted() bool { return p.summary&allReadyUnhinted != 0 }

// MaybeOnNode reports whether an endpoint of p may run on the node named
// node. False is certain: none does (and none runs on a node named "").
// True means that one does, or that p cannot tell: it keeps a mask of its
// endpoints' nodes by a hash of their names, not the names, and a Port
// that neither a Snapshot nor PortOf made knows nothing.
func (p Port) MaybeOnNode(node string) bool {
	switch {
	case node == "":
		return false
	case p.summary&summarized == 0:
		return true
	}
	return p.summary&nodeBit(node) != 0
}

// summary is what a Port knows of its endpoints besides them, so that a
// reader can rule out cases without reading each endpoint: whether every
// one is ready and unhinted, and the nodes they run on as a mask of
// nodeBits bits, one per hash of a node name. The zero summary knows
// nothing.
type summary uint64

const (
	summarized       summary = 1 << 63
	allReadyUnhinted summary = 1 << 62
	nodeBits                 = 62
)

// summarize is the summary of eps; no endpoints are not AllReadyUnhinted.
func summarize(eps []Endpoint) summary {
	s := summarized
	if len(eps) > 0 {
		s |= allReadyUnhinted
	}
	for i := range eps {
		ep := &eps[i]
		if !ep.Ready || len(ep.ZoneHints) > 0 || len(ep.NodeHints) > 0 {
			s &^= allReadyUnhinted
		}
		if ep.NodeName != "" {
			s |= nodeBit(ep.NodeName)
		}
	}
	return s
}

// nodeBit is the bit of the node named name in a summary's mask: by its
// FNV-1a hash.
func nodeBit(name string) summary {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return 1 << (h % nodeBits)
}
