package nftables

import (
	"github.com/svcproxy/svcproxy/ruleset"
)

// ownership says which Service port renders a frontend. For a whole
// table, only the frontends at rs's shared destinations
// (ruleset.Ruleset.SharedDestinations) are asked of rs, whose index of
// frontends costs a lookup per question; every other frontend is its
// Service port's own.
type ownership struct {
	rs *ruleset.Ruleset
	// shared are rs's shared destinations (nil: ask rs of every frontend).
	shared map[ruleset.Frontend]bool
}

// wholeTableOwnership is the ownership of a whole table of rs.
func wholeTableOwnership(rs *ruleset.Ruleset) ownership {
	o := ownership{rs: rs, shared: map[ruleset.Frontend]bool{}}
	for _, d := range rs.SharedDestinations() {
		o.shared[d] = true
	}
	return o
}

// owns reports whether s renders f: for a cluster IP as a whole, whether
// s is the first Service port with that address; else whether s owns f's
// destination through f (ruleset.Ruleset.Owns).
func (o ownership) owns(s *ruleset.Service, f ruleset.Frontend) bool {
	if o.shared != nil {
		d := f
		d.Kind = 0
		if !o.shared[d] {
			return true
		}
	}
	if f.Kind == ruleset.KindClusterAddress {
		owners := o.rs.ServicesAt(f)
		return len(owners) > 0 && owners[0] == s.Name
	}
	return o.rs.Owns(s, f)
}
