package ruleset

import (
	"net/netip"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Choose returns the target of a new flow from src to a frontend of kind of
// s, for a data plane that picks targets itself (a user-space proxy, say);
// an AddrPort that is not valid when Decide does not say VerdictForward
// (the load-balancer source-range firewall drops the flow, say). With s's ClientIP affinity, the
// target is the one sticky holds for src.Addr while that is recent and
// Decide still offers it to src (affinity.Table.Choose), otherwise it is
// Pick(Decide's targets, x), recorded in sticky. The caller draws x
// uniformly from [0, 1) and passes now, the time of the flow.
func (r *Ruleset) Choose(sticky *affinity.Table[servicemap.PortName], s *Service, kind FrontendKind, src Client, now time.Time, x float64) netip.AddrPort {
	choices := r.Decide(s, kind, src).Targets
	if len(choices) == 0 {
		return netip.AddrPort{}
	}
	if sticky == nil { // no table: no affinity is kept
		return Pick(choices, x).Endpoint
	}
	offered := func(t netip.AddrPort) bool { return offers(choices, t) }
	return sticky.Choose(s.Name, src.Addr.WithZone(""), s.Affinity, now, offered, func() netip.AddrPort { return Pick(choices, x).Endpoint })
}

// Offers reports whether Choose may give target to a new flow from src to a
// frontend of kind of s: a data plane that keeps flows of its own (UDP
// flows, say) moves those whose target r no longer offers.
func (r *Ruleset) Offers(s *Service, kind FrontendKind, src Client, target netip.AddrPort) bool {
	return offers(r.Decide(s, kind, src).Targets, target)
}

func offers(choices []Choice, target netip.AddrPort) bool {
	return slices.ContainsFunc(choices, func(c Choice) bool { return c.Endpoint == target })
}
