package ruleset

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
)

// FrontendKind is the way a packet reaches a Service port.
type FrontendKind uint8

const (
	// KindClusterIP is the port's cluster IP with the Service port.
	KindClusterIP FrontendKind = iota + 1
	// KindNodePort is an address of the node (Config.NodePortAddresses)
	// with the node port.
	KindNodePort
	// KindExternalIP is one of the port's externalIPs with the Service
	// port.
	KindExternalIP
	// KindLoadBalancerIP is one of the port's load-balancer ingress IPs
	// with the Service port.
	KindLoadBalancerIP
)

func (k FrontendKind) String() string {
	switch k {
	case KindClusterIP:
		return "cluster IP"
	case KindNodePort:
		return "node port"
	case KindExternalIP:
		return "external IP"
	case KindLoadBalancerIP:
		return "load-balancer IP"
	}
	return fmt.Sprintf("FrontendKind(%d)", uint8(k))
}

// Verdict is what happens to a new flow to a frontend.
type Verdict uint8

const (
	// VerdictNotServed: the Service port has no frontend of that kind;
	// the packet is none of its business.
	VerdictNotServed Verdict = iota
	// VerdictForward: the flow goes to one of Decision.Targets.
	VerdictForward
	// VerdictReject: the Service has no usable endpoint anywhere; the
	// client is told at once (TCP reset, ICMP unreachable).
	VerdictReject
	// VerdictDrop: a Local traffic policy applies and this node has no
	// usable endpoint; the packet is dropped.
	VerdictDrop
)

func (v Verdict) String() string {
	switch v {
	case VerdictNotServed:
		return "not served"
	case VerdictForward:
		return "forward"
	case VerdictReject:
		return "reject"
	case VerdictDrop:
		return "drop"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Source is what the rules can tell about where a packet comes from: whether
// the node itself sent it, and its source address, which says whether it
// comes from a pod (inside Config.ClusterCIDRs) and whether it reaches its
// own endpoint (hairpin).
type Source struct {
	// Addr is the packet's source address.
	Addr netip.Addr
	// FromNode reports that a process on the node sent the packet (the
	// output hook; iptables' `--src-type LOCAL`, nftables' `fib saddr type
	// local`), rather than that it arrived on an interface.
	FromNode bool
}

// Choice is one target of a Decision.
type Choice struct {
	Target
	// Share is the fraction of new flows that go to this target: 1/N for
	// each of N targets.
	Share *big.Rat
	// Masquerade reports that flows to this target have their source
	// rewritten to the node's address: the Decision's Masquerade, or
	// hairpin (the target is the source itself, which would otherwise
	// answer itself and drop the reply).
	Masquerade bool
}

// Decision is what happens to a new flow to one frontend of a Service port.
type Decision struct {
	Verdict Verdict
	// Targets are the targets a forwarded flow is spread over, in the
	// Ruleset's order; empty unless Verdict is VerdictForward.
	Targets []Choice
	// Masquerade reports that forwarded flows have their source rewritten
	// to the node's address, whatever the target.
	Masquerade bool
	// ShortCircuit reports that a flow to an external frontend of a port
	// with externalTrafficPolicy Local goes to the cluster-wide targets,
	// because it comes from a pod or from the node itself (as if it had
	// gone out to the load balancer and come back).
	ShortCircuit bool
}

// Decide says what happens to a new flow from src to a frontend of kind of s,
// a Service of r, once it has passed the load-balancer source-range firewall
// (see Service.Firewalled). It is kube-proxy's behaviour, which every backend
// renders:
//
//   - Cluster IP: the Internal route. Flows are masqueraded when
//     Config.MasqueradeAll is set, or when ClusterCIDRs are set and the
//     source is outside them.
//   - Node port, external and load-balancer IPs: the External route. Under
//     externalTrafficPolicy Cluster, flows are masqueraded (the endpoint may
//     be on another node). Under Local, flows from outside keep their source
//     and go to the node's local targets, or are dropped when it has none;
//     flows from a pod (a source inside ClusterCIDRs) or from the node go to
//     the cluster-wide targets, and those from the node are masqueraded.
//   - A flow to a target that is its own source is masqueraded (hairpin).
//
// The kind must be one that s has (its cluster IP, node port, one of its
// external or load-balancer IPs); VerdictNotServed says it has none.
func (r *Ruleset) Decide(s *Service, kind FrontendKind, src Source) Decision {
	if kind == KindClusterIP {
		if !s.ClusterIP.IsValid() {
			return Decision{}
		}
		masq := r.config.MasqueradeAll || (len(r.config.ClusterCIDRs) > 0 && !r.fromPod(src.Addr))
		return decide(s.Internal, s, src, masq, false)
	}
	if !s.hasFrontend(kind) {
		return Decision{}
	}
	if s.External == RouteCluster {
		return decide(RouteCluster, s, src, true, false)
	}
	if s.External == RouteLocal || s.External == RouteDrop {
		if src.FromNode {
			return decide(RouteCluster, s, src, true, true)
		}
		if len(r.config.ClusterCIDRs) > 0 && r.fromPod(src.Addr) {
			return decide(RouteCluster, s, src, false, true)
		}
	}
	return decide(s.External, s, src, false, false)
}

func (r *Ruleset) fromPod(addr netip.Addr) bool {
	return slices.ContainsFunc(r.config.ClusterCIDRs, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// hasFrontend reports whether s has a frontend of an external kind.
func (s *Service) hasFrontend(kind FrontendKind) bool {
	switch kind {
	case KindNodePort:
		return s.NodePort != 0
	case KindExternalIP:
		return len(s.ExternalIPs) > 0
	case KindLoadBalancerIP:
		return len(s.LoadBalancerIPs) > 0
	}
	return false
}

// decide turns a route into a Decision. A route that spreads over targets
// but has none rejects: the Builder never makes one.
func decide(route Route, s *Service, src Source, masq, short bool) Decision {
	var ts []Target
	switch route {
	case RouteNone:
		return Decision{}
	case RouteReject:
		return Decision{Verdict: VerdictReject}
	case RouteDrop:
		return Decision{Verdict: VerdictDrop}
	case RouteCluster:
		ts = s.ClusterTargets
	case RouteLocal:
		ts = s.LocalTargets
	}
	if len(ts) == 0 {
		return Decision{Verdict: VerdictReject}
	}
	d := Decision{Verdict: VerdictForward, Masquerade: masq, ShortCircuit: short, Targets: make([]Choice, len(ts))}
	share := big.NewRat(1, int64(len(ts)))
	for i, t := range ts {
		d.Targets[i] = Choice{Target: t, Share: share, Masquerade: masq || t.Endpoint.Addr() == src.Addr}
	}
	return d
}

// Firewalled reports whether the load-balancer source-range firewall drops a
// flow from src to one of s's load-balancer IPs: the port has
// loadBalancerSourceRanges, src is in none of them, and src is not one of
// the load-balancer IPs that FirewallAllowsNode lets through. Flows that a
// Reject route turns away never reach the firewall.
func (s *Service) Firewalled(kind FrontendKind, src netip.Addr) bool {
	if kind != KindLoadBalancerIP || !s.UsesFirewall() || s.External == RouteReject || s.External == RouteNone {
		return false
	}
	if slices.ContainsFunc(s.LoadBalancerSourceRanges, func(p netip.Prefix) bool { return p.Contains(src) }) {
		return false
	}
	return !(s.FirewallAllowsNode && slices.Contains(s.LoadBalancerIPs, src))
}
