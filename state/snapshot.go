package state

import (
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// Snapshot is what one sync works from: immutable, and independent of
// later events.
type Snapshot struct {
	// Node is the proxy's node: its name, and its zone from its Node.
	Node topology.Node
	// NodeAddresses are the usable addresses of the families served of the
	// proxy's Node, in its order (see ruleset.NodeAddresses); nil without a
	// Node.
	NodeAddresses []netip.Addr
	// ServiceCIDRs are the CIDRs of every ServiceCIDR object, sorted, each
	// once.
	ServiceCIDRs []netip.Prefix
	// TriggerTimes are the EndpointSlices' last-change-trigger-times
	// recorded since the previous Snapshot (every one of a slice that
	// changed more than once, none of a slice deleted since), sorted: each
	// is in one Snapshot only, so a caller whose sync fails keeps them for
	// the next one.
	TriggerTimes []time.Time
	families     []Family
}

// Family is the part of a Snapshot of one IP family: what
// ruleset.Builder.Build and Update take, and the addresses a ruleset.Config
// of that family takes.
type Family struct {
	IPFamily  v1.IPFamily
	Services  servicemap.Snapshot
	Endpoints endpoints.Snapshot
	// NodeAddresses and ServiceCIDRs are the Snapshot's of this family.
	NodeAddresses []netip.Addr
	ServiceCIDRs  []netip.Prefix
	// TriggerTimes are those of the Snapshot's TriggerTimes that are of
	// EndpointSlices of this family, sorted (kube-proxy's per-family
	// network programming latency).
	TriggerTimes []time.Time
}

// Families are the parts of every family served, IPv4 first.
func (s Snapshot) Families() []Family { return slices.Clone(s.families) }

// Family returns the part of family f, and false when f is not served.
func (s Snapshot) Family(f v1.IPFamily) (Family, bool) {
	for _, fam := range s.families {
		if fam.IPFamily == f {
			return fam, true
		}
	}
	return Family{}, false
}

// Snapshot returns the current state. It hands out the trigger times
// recorded since the previous Snapshot, and resets Pending.
func (s *State) Snapshot() Snapshot {
	if !s.made() {
		return Snapshot{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Node: s.node, NodeAddresses: slices.Clone(s.nodeAddrs)}
	for _, cidrs := range s.serviceCIDRs {
		snap.ServiceCIDRs = append(snap.ServiceCIDRs, cidrs...)
	}
	slices.SortFunc(snap.ServiceCIDRs, netip.Prefix.Compare)
	snap.ServiceCIDRs = slices.Compact(snap.ServiceCIDRs)
	byFamily := map[v1.IPFamily][]time.Time{}
	for key, times := range s.triggerTimes {
		snap.TriggerTimes = append(snap.TriggerTimes, times...)
		f := s.triggerFamily[key]
		byFamily[f] = append(byFamily[f], times...)
		delete(s.triggerTimes, key)
		delete(s.triggerFamily, key)
	}
	slices.SortFunc(snap.TriggerTimes, time.Time.Compare)
	for _, f := range s.families {
		fam := Family{
			IPFamily:      f,
			NodeAddresses: ofFamily(snap.NodeAddresses, f, netip.Addr.Is4),
			ServiceCIDRs:  ofFamily(snap.ServiceCIDRs, f, func(p netip.Prefix) bool { return p.Addr().Is4() }),
			TriggerTimes:  slices.SortedFunc(slices.Values(byFamily[f]), time.Time.Compare),
		}
		fam.Services, _ = s.services[f].Snapshot()
		fam.Endpoints, _ = s.slices[f].Snapshot()
		snap.families = append(snap.families, fam)
	}
	return snap
}

// ofFamily returns the elements of xs that are of family f.
func ofFamily[T any](xs []T, f v1.IPFamily, is4 func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if is4(x) == (f == v1.IPv4Protocol) {
			out = append(out, x)
		}
	}
	return out
}
