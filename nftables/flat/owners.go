package flat

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// ownership says which Service port renders a frontend. For a whole
// table, only the frontends at rs's shared destinations
// (ruleset.Ruleset.SharedDestinations) are asked of rs, whose index of
// frontends costs a lookup per question (and, in a Ruleset fresh from
// Build, the index's making on the first); every other frontend is its
// Service port's own. A cluster IP as a whole, shared by the ports of a
// Service with several, is its first port's, found without the index.
type ownership struct {
	rs *ruleset.Ruleset
	// shared are rs's shared destinations (nil: ask rs of every frontend).
	shared map[ruleset.Frontend]bool
	// clusterAddress is the first Service port of each shared cluster IP.
	clusterAddress map[netip.Addr]servicemap.PortName
}

// wholeTableOwnership is the ownership of a whole table of rs.
func wholeTableOwnership(rs *ruleset.Ruleset) ownership {
	o := ownership{rs: rs, shared: map[ruleset.Frontend]bool{}, clusterAddress: map[netip.Addr]servicemap.PortName{}}
	for _, d := range rs.SharedDestinations() {
		o.shared[d] = true
		if d.Protocol == "" && d.Addr.IsValid() {
			o.clusterAddress[d.Addr] = servicemap.PortName{}
		}
	}
	if len(o.clusterAddress) > 0 {
		for _, s := range rs.Services() {
			if first, ok := o.clusterAddress[s.ClusterIP]; ok && first == (servicemap.PortName{}) {
				o.clusterAddress[s.ClusterIP] = s.Name
			}
		}
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
		if f.Kind == ruleset.KindClusterAddress {
			return o.clusterAddress[f.Addr] == s.Name
		}
	}
	if f.Kind == ruleset.KindClusterAddress {
		owners := o.rs.ServicesAt(f)
		return len(owners) > 0 && owners[0] == s.Name
	}
	return o.rs.Owns(s, f)
}

// otherOwner is the Service port other than s that owns f's destination
// (ruleset.Ruleset.Owner), if another does: s's frontend of one kind may
// be left to its frontend of another at the same address (an external IP
// that is also a load-balancer IP).
func (o ownership) otherOwner(s *ruleset.Service, f ruleset.Frontend) (servicemap.PortName, bool) {
	owner, _, ok := o.rs.Owner(f)
	if !ok || owner.Name == s.Name {
		return servicemap.PortName{}, false
	}
	return owner.Name, true
}
