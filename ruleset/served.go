package ruleset

import (
	"slices"
)

// ServedFrontend is a frontend that a data plane serves, with the Service
// port that owns it (Ruleset.Owner).
type ServedFrontend struct {
	Frontend
	Service *Service
}

// ServedFrontends returns the frontends on which r's Services receive new
// flows, each with its owner, sorted by Frontend.Compare: every cluster,
// external and load-balancer IP with its protocol and port, and every node
// port (its Addr not valid: it is served on Config.NodePortAddresses), of
// every protocol. Each destination (address, protocol and port) appears
// once, with the Service port that owns it and the kind of that port's
// frontend there. A cluster IP as a whole (KindClusterAddress) and a
// frontend whose address is not valid are left out. It takes O(n log n)
// time for n frontends.
func (r *Ruleset) ServedFrontends() []ServedFrontend {
	var out []ServedFrontend
	for _, s := range r.Services() {
		for _, f := range s.Frontends() {
			if f.Kind == KindClusterAddress || (f.Kind != KindNodePort && !f.Addr.IsValid()) || !r.Owns(s, f) {
				continue
			}
			out = append(out, ServedFrontend{Frontend: f, Service: s})
		}
	}
	slices.SortFunc(out, func(a, b ServedFrontend) int { return a.Frontend.Compare(b.Frontend) })
	return out
}
