package nftables

import (
	"cmp"
	"encoding/binary"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

// destination is a frontend's destination (its address, protocol and
// port; not its kind) as a value without pointers, which sorts and hashes
// fast.
type destination struct {
	hi, lo uint64 // the address's 16 bytes, big-endian
	// protoPort is the protocol's number here (0: none, a cluster IP as a
	// whole) above the port.
	protoPort uint32
}

// destinationOf is f's destination; ok is false for a protocol it has no
// number for.
func destinationOf(f ruleset.Frontend) (d destination, ok bool) {
	a := f.Addr.As16()
	var proto uint32
	switch f.Protocol {
	case "":
	case v1.ProtocolTCP:
		proto = 1
	case v1.ProtocolUDP:
		proto = 2
	case v1.ProtocolSCTP:
		proto = 3
	default:
		return d, false
	}
	return destination{hi: binary.BigEndian.Uint64(a[:8]), lo: binary.BigEndian.Uint64(a[8:]), protoPort: proto<<16 | uint32(f.Port)}, true
}

func (d destination) compare(o destination) int {
	return cmp.Or(cmp.Compare(d.hi, o.hi), cmp.Compare(d.lo, o.lo), cmp.Compare(d.protoPort, o.protoPort))
}

// ownership says which Service port renders a frontend, for a whole
// table: a frontend whose destination no other frontend of rs has is its
// Service port's own (ruleset.Ruleset.Owns: the one Service port there,
// through its one frontend there), and only the others are asked of rs,
// whose index of frontends costs a lookup per question.
type ownership struct {
	rs *ruleset.Ruleset
	// frontends are the Frontends of each Service of rs, in its order
	// (wholeTableOwnership), or nil.
	frontends [][]ruleset.Frontend
	// shared are the destinations of more than one frontend of rs (nil:
	// ask rs of every frontend).
	shared map[destination]bool
}

// wholeTableOwnership finds the shared destinations of rs by sorting the
// destinations of all its frontends (Service.Frontends, each frontend once:
// a port with two frontends at one destination shares it). If a frontend
// has a protocol without a number here, every frontend is asked of rs.
func wholeTableOwnership(rs *ruleset.Ruleset) ownership {
	all := make([]destination, 0, 3*rs.Len())
	frontends := make([][]ruleset.Frontend, rs.Len())
	known := true
	for i, s := range rs.Services() {
		frontends[i] = s.Frontends()
		for _, f := range frontends[i] {
			d, ok := destinationOf(f)
			known = known && ok
			all = append(all, d)
		}
	}
	if !known {
		return ownership{rs: rs, frontends: frontends}
	}
	slices.SortFunc(all, destination.compare)
	shared := map[destination]bool{}
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			shared[all[i]] = true
		}
	}
	return ownership{rs: rs, frontends: frontends, shared: shared}
}

// owns reports whether s renders f: for a cluster IP as a whole, whether
// s is the first Service port with that address; else whether s owns f's
// destination through f (ruleset.Ruleset.Owns).
func (o ownership) owns(s *ruleset.Service, f ruleset.Frontend) bool {
	if o.shared != nil {
		if d, _ := destinationOf(f); !o.shared[d] {
			return true
		}
	}
	if f.Kind == ruleset.KindClusterAddress {
		owners := o.rs.ServicesAt(f)
		return len(owners) > 0 && owners[0] == s.Name
	}
	return o.rs.Owns(s, f)
}
