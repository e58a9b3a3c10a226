package ruleset

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/prefix"
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
	// KindClusterAddress is the port's cluster IP as a whole, on any
	// protocol and port: the key of the set of active cluster IPs. No flow
	// is decided on it (Decide says VerdictNotServed).
	KindClusterAddress
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
	case KindClusterAddress:
		return "cluster IP address"
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
	// VerdictDrop: the packet is dropped: a Local traffic policy applies
	// and this node has no usable endpoint (or, in a trace, the address is
	// an unallocated one of the Service CIDRs).
	VerdictDrop
	// VerdictFirewall: the load-balancer source-range firewall drops the
	// packet (Service.Firewalled).
	VerdictFirewall
)

func (v Verdict) String() string {
	switch v {
	case VerdictNotServed:
		return "not a Service"
	case VerdictForward:
		return "forwarded"
	case VerdictReject:
		return "rejected"
	case VerdictDrop:
		return "dropped"
	case VerdictFirewall:
		return "dropped by the source-range firewall"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Client is what the rules can tell about where a packet comes from: whether
// the node itself sent it, and its source address, which says whether it
// comes from a pod (inside Config.ClusterCIDRs), whether the load-balancer
// source-range firewall lets it through, and whether it reaches its own
// endpoint (hairpin). Ruleset.ClientOf makes one for an Origin.
type Client struct {
	// Addr is the packet's source address. Its IPv6 zone, if any, is
	// ignored: fe80::1%eth0 is the address fe80::1 seen on eth0.
	Addr netip.Addr
	// FromNode reports that a process on the node sent the packet (the
	// output hook; iptables' `--src-type LOCAL`, nftables' `fib saddr type
	// local`), rather than that it arrived on an interface.
	FromNode bool
}

// Origin names where a packet comes from, as the rules tell origins apart.
type Origin uint8

const (
	// OriginOutside: a host off the cluster, whose packet arrives on one
	// of the node's interfaces from a source outside Config.ClusterCIDRs.
	OriginOutside Origin = iota
	// OriginPod: a pod, whose source is inside Config.ClusterCIDRs.
	OriginPod
	// OriginNode: a process on the node itself, sending from the node's
	// address.
	OriginNode
)

// Origins are the origins that Ruleset.ClientOf knows, in order.
var Origins = []Origin{OriginOutside, OriginPod, OriginNode}

func (o Origin) String() string {
	switch o {
	case OriginOutside:
		return "outside"
	case OriginPod:
		return "pod"
	case OriginNode:
		return "node"
	}
	return fmt.Sprintf("Origin(%d)", uint8(o))
}

// ClientOf returns a representative Client of origin under r's Config, for
// a node whose addresses are nodeAddrs (those of other families are
// ignored; state.Snapshot.NodeAddresses, say):
//
//   - outside: from the family's unspecified address (0.0.0.0 or ::),
//     which is in no cluster CIDR and passes no load-balancer source range
//     but 0.0.0.0/0 (::/0): an arbitrary off-cluster client;
//   - pod: from the last address of the first of Config.ClusterCIDRs that
//     is no node address; without cluster CIDRs the rules cannot tell a
//     pod from the outside, and the Client is the outside one;
//   - node: FromNode, from the first of nodeAddrs of the family, else of
//     Config.NodePortAddresses, else the unspecified address. A node
//     address inside a cluster CIDR makes the node's flows look like a
//     pod's, as they do to the rules.
//
// An Origin it does not know gives the zero Client.
func (r *Ruleset) ClientOf(origin Origin, nodeAddrs []netip.Addr) Client {
	cfg := r.Config()
	is4 := cfg.Family != v1.IPv6Protocol
	outside := netip.IPv6Unspecified()
	if is4 {
		outside = netip.IPv4Unspecified()
	}
	ofFamily := func(a netip.Addr) bool { return a.IsValid() && a.Is4() == is4 }
	var node []netip.Addr
	for _, a := range slices.Concat(nodeAddrs, cfg.NodePortAddresses) {
		if ofFamily(a) {
			node = append(node, a.WithZone(""))
		}
	}
	switch origin {
	case OriginOutside:
		return Client{Addr: outside}
	case OriginPod:
		for _, p := range cfg.ClusterCIDRs {
			if a := prefix.Last(p.Masked()); ofFamily(a) && !slices.Contains(node, a) {
				return Client{Addr: a}
			}
		}
		return Client{Addr: outside}
	case OriginNode:
		if len(node) > 0 {
			return Client{Addr: node[0], FromNode: true}
		}
		return Client{Addr: outside, FromNode: true}
	}
	return Client{}
}

// Choice is one target of a Decision.
type Choice struct {
	Target
	// Share is the fraction of new flows that go to this target: 1/N for
	// each of N targets (Share(N)).
	Share *big.Rat
	// Masquerade reports that flows to this target have their source
	// rewritten to the node's address: the Decision's Masquerade, or
	// hairpin (the target is the source itself, which would otherwise
	// answer itself and drop the reply).
	Masquerade bool
}

// Decision is what happens to a new flow to one frontend of a Service port.
type Decision struct {
	// Verdict is VerdictFirewall when the load-balancer source-range
	// firewall drops the flow, else the route's verdict.
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

// String is the verdict, then each target with its share, then
// "short-circuited" and "masqueraded" when they apply, and "hairpin" after
// a target that is masqueraded as the flow's own source: "forwarded
// 198.18.1.31:8080=1/2 198.18.2.32:8080=1/2 masqueraded".
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(d.Verdict.String())
	for _, c := range d.Targets {
		share := "0" // a nil Share counts as 0, as for Pick
		if c.Share != nil {
			share = c.Share.RatString()
		}
		fmt.Fprintf(&b, " %s=%s", c.Endpoint, share)
		if c.Masquerade && !d.Masquerade {
			b.WriteString(" hairpin")
		}
	}
	if d.ShortCircuit {
		b.WriteString(" short-circuited")
	}
	if d.Masquerade {
		b.WriteString(" masqueraded")
	}
	return b.String()
}

// Masquerade says which flows to a cluster IP have their source rewritten to
// the node's address.
type Masquerade uint8

const (
	// MasqueradeNone: no flow (Config.ClusterCIDRs is empty and
	// MasqueradeAll off).
	MasqueradeNone Masquerade = iota
	// MasqueradeOffCluster: the flows whose source is outside
	// Config.ClusterCIDRs (off-cluster traffic, routed to the Service range
	// through this node, may leave it again).
	MasqueradeOffCluster
	// MasqueradeAll: every flow (Config.MasqueradeAll).
	MasqueradeAll
)

func (m Masquerade) String() string {
	switch m {
	case MasqueradeNone:
		return "none"
	case MasqueradeOffCluster:
		return "off-cluster"
	case MasqueradeAll:
		return "all"
	}
	return fmt.Sprintf("Masquerade(%d)", uint8(m))
}

// ExternalTraffic is what happens to new flows to a port's external
// frontends (its node port, external IPs and load-balancer IPs), once they
// have passed the source-range firewall, besides the External route.
type ExternalTraffic struct {
	// Steered reports that flows go through the steps below before the
	// External route applies (kube-proxy's external chain): the port is
	// externally accessible and has endpoints somewhere, so External is
	// Cluster, Local or Drop. When false, External (None or Reject) applies
	// to every flow.
	Steered bool
	// Masquerade reports that every steered flow is masqueraded:
	// externalTrafficPolicy Cluster, where the endpoint may be on another
	// node and the reply must come back through this one.
	Masquerade bool
	// ShortCircuit reports that steered flows from pods (a source inside
	// Config.ClusterCIDRs) and then those from the node itself go to
	// ClusterTargets, whatever External says, and that those from the node
	// (and not from a pod address) are masqueraded: externalTrafficPolicy
	// Local, as if they had gone out to the load balancer and come back.
	// Never true without ClusterTargets.
	ShortCircuit bool
}

// Decide says what happens to a new flow from src to a frontend of kind of s,
// a Service of r: the whole answer for that client (Ruleset.ClientOf makes
// one for an Origin). It reads the decisions the Builder stored in s
// (kube-proxy's behaviour, which every backend renders):
//
//   - Load-balancer IPs: a flow that the source-range firewall drops
//     (Service.Firewalled) has VerdictFirewall.
//   - Cluster IP: the Internal route; flows are masqueraded as
//     ClusterIPMasquerade says.
//   - Node port, external and load-balancer IPs: with
//     ExternalTraffic.ShortCircuit, flows from a pod go to the cluster-wide
//     targets, then flows from the node go there too, masqueraded. Every
//     other flow takes the External route, masqueraded when
//     ExternalTraffic.Masquerade is set.
//   - A flow to a target that is its own source is masqueraded (hairpin),
//     as kube-proxy's iptables mode does; its nftables mode masquerades
//     only a target on this node (trace.Options.HairpinLocalOnly).
//
// The kind must be one that s has (its cluster IP, node port, one of its
// external or load-balancer IPs); VerdictNotServed says it has none, or
// that s is nil or has no ServicePort.
func (r *Ruleset) Decide(s *Service, kind FrontendKind, src Client) Decision {
	if !s.valid() {
		return Decision{}
	}
	src.Addr = src.Addr.WithZone("")
	if kind == KindClusterIP {
		if !s.ClusterIP.IsValid() {
			return Decision{}
		}
		masq := s.ClusterIPMasquerade == MasqueradeAll ||
			s.ClusterIPMasquerade == MasqueradeOffCluster && !r.fromPod(src.Addr)
		return decide(s.Internal, s, src, masq, false)
	}
	if !s.hasFrontend(kind) {
		return Decision{}
	}
	if s.Firewalled(kind, src.Addr) {
		return Decision{Verdict: VerdictFirewall}
	}
	ext := s.ExternalTraffic
	if ext.ShortCircuit {
		if r.fromPod(src.Addr) {
			return decide(RouteCluster, s, src, false, true)
		}
		if src.FromNode {
			return decide(RouteCluster, s, src, true, true)
		}
	}
	return decide(s.External, s, src, ext.Masquerade, false)
}

// fromPod reports whether addr, without a zone, is inside
// Config.ClusterCIDRs (never, when there are none).
func (r *Ruleset) fromPod(addr netip.Addr) bool {
	if r == nil {
		return false
	}
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
// always has targets: the Builder makes it a Drop otherwise, and so does
// decide, for a Service that no Builder made.
func decide(route Route, s *Service, src Client, masq, short bool) Decision {
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
		return Decision{Verdict: VerdictDrop}
	}
	d := Decision{Verdict: VerdictForward, Masquerade: masq, ShortCircuit: short, Targets: make([]Choice, len(ts))}
	for i, t := range ts {
		d.Targets[i] = Choice{Target: t, Share: Share(len(ts)), Masquerade: masq || t.Endpoint.Addr() == src.Addr}
	}
	return d
}

// Firewalled reports whether the load-balancer source-range firewall drops a
// flow from src to one of s's load-balancer IPs: SourceRangesDeny, for
// steered flows (ExternalTraffic.Steered) only: a Reject route turns the
// others away first. The zone of src, if any, is ignored.
func (s *Service) Firewalled(kind FrontendKind, src netip.Addr) bool {
	return s.valid() && s.ExternalTraffic.Steered && s.SourceRangesDeny(kind, src)
}

// SourceRangesDeny reports whether s's loadBalancerSourceRanges deny a flow
// from src through a frontend of that kind, whatever the Service's routes:
// the kind is a load-balancer IP, the port has source ranges, src is in
// none of them, and src is not one of the load-balancer IPs that
// FirewallAllowsNode lets through. The zone of src, if any, is ignored.
func (s *Service) SourceRangesDeny(kind FrontendKind, src netip.Addr) bool {
	if kind != KindLoadBalancerIP || !s.UsesFirewall() {
		return false
	}
	src = src.WithZone("")
	if slices.ContainsFunc(s.LoadBalancerSourceRanges, func(p netip.Prefix) bool { return p.Contains(src) }) {
		return false
	}
	return !(s.FirewallAllowsNode && slices.Contains(s.LoadBalancerIPs, src))
}
