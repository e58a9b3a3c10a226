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
// an AddrPort that is not valid when the flow is not forwarded: the
// load-balancer source-range firewall drops it (Service.Firewalled), or
// Decide does not say VerdictForward. With s's ClientIP affinity, the
// target is the one sticky holds for src.Addr while that is recent and
// Decide still offers it to src (affinity.Table.Choose), otherwise it is
// Pick(Decide's targets, x), recorded in sticky. The caller draws x
// uniformly from [0, 1) and passes now, the time of the flow.
func (r *Ruleset) Choose(sticky *affinity.Table[servicemap.PortName], s *Service, kind FrontendKind, src Client, now time.Time, x float64) netip.AddrPort {
	choices := r.flowTargets(s, kind, src)
	if len(choices) == 0 {
		return netip.AddrPort{}
	}
	offered := func(t netip.AddrPort) bool { return offers(choices, t) }
	return sticky.Choose(s.Name, src.Addr, s.Affinity, now, offered, func() netip.AddrPort { return Pick(choices, x).Endpoint })
}

// Offers reports whether Choose may give target to a new flow from src to a
// frontend of kind of s: a data plane that keeps flows of its own (UDP
// flows, say) moves those whose target r no longer offers.
func (r *Ruleset) Offers(s *Service, kind FrontendKind, src Client, target netip.AddrPort) bool {
	return offers(r.flowTargets(s, kind, src), target)
}

// flowTargets are the targets that a new flow from src to a frontend of
// kind of s may go to, the firewall included.
func (r *Ruleset) flowTargets(s *Service, kind FrontendKind, src Client) []Choice {
	if s.Firewalled(kind, src.Addr) {
		return nil
	}
	return r.Decide(s, kind, src).Targets
}

func offers(choices []Choice, target netip.AddrPort) bool {
	return slices.ContainsFunc(choices, func(c Choice) bool { return c.Endpoint == target })
}
