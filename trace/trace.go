// Package trace answers "where does this packet go" from a ruleset.Ruleset:
// given a new flow's protocol, addresses, ports and where it comes from, it
// says whether a Service takes it and, if so, whether the flow is rejected,
// dropped (by a Local traffic policy or by a load-balancer source-range
// firewall) or forwarded, to which targets with which share each, whether its
// source is masqueraded and whether ClientIP affinity pins it.
//
// It is derived from the Ruleset's decisions alone (ruleset.Ruleset.Decide,
// ruleset.Service.Firewalled), and so it is the specification that the
// rules of every backend meet: a data plane that does what Trace says
// serves Services as kube-proxy does. Options name the behaviours in which
// kube-proxy's two modes differ (IPTablesMode, NFTablesMode).
//
// The package is pure: no I/O, no clock, no randomness, no logging.
//
// # Limitations
//
//   - It traces the first packet of a flow. Replies, established flows,
//     conntrack and the affinity state left by earlier flows are not
//     modelled: Outcome.Affinity only says that affinity applies.
//   - It knows the node through the packet (Packet.ToNode, Packet.FromNode)
//     and the Ruleset's Config; it does not know the node's interfaces or
//     routes.
package trace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Packet is the first packet of a new flow.
type Packet struct {
	Protocol v1.Protocol
	Src, Dst netip.AddrPort
	// FromNode reports that a process on the node sent it; otherwise it
	// arrived on one of the node's interfaces (from a pod on the node,
	// from another host, or from a pod elsewhere). Whether it comes from a
	// pod is told by its source address, as the rules tell it.
	FromNode bool
	// ToNode reports that Dst's address is one of the node's own: node
	// ports are served on it (unless Config.NodePortAddresses lists the
	// addresses).
	ToNode bool
}

func (p Packet) String() string {
	from := "arriving"
	if p.FromNode {
		from = "from the node"
	}
	return fmt.Sprintf("%s %v -> %v %s", strings.ToLower(string(p.Protocol)), p.Src, p.Dst, from)
}

// Options are the behaviours of a backend beyond the Ruleset's decisions.
// IPTablesMode and NFTablesMode are kube-proxy's two modes.
type Options struct {
	// RejectUnknownPorts rejects flows to a cluster IP on a port or
	// protocol that no Service port of it serves (kube-proxy's nftables
	// mode: "Reject traffic to invalid ports of ClusterIPs").
	RejectUnknownPorts bool
	// DropUnallocated drops flows to an address inside the Config's
	// ServiceCIDRs that is no cluster IP (kube-proxy's nftables mode: "Drop
	// traffic to unallocated ClusterIPs").
	DropUnallocated bool
	// FirewallFirst applies the load-balancer source-range firewall to
	// every Service port with source ranges, also one that rejects for
	// want of endpoints (kube-proxy's nftables mode, whose firewall-check
	// runs before the no-endpoint reject): ruleset.Service.SourceRangesDeny
	// rather than ruleset.Service.Firewalled.
	FirewallFirst bool
	// ArrivingRejectsOnly rejects flows to the external and load-balancer
	// IPs of a Service port without endpoints only when they
	// arrive: one the node sends to such an address, not its own, is left
	// alone (kube-proxy's iptables mode, whose KUBE-EXTERNAL-SERVICES is
	// jumped to from INPUT and FORWARD only).
	ArrivingRejectsOnly bool
	// NodePortRejectsOnAllAddresses rejects or drops flows to the node port
	// of a Service port without (local) endpoints on every address of the
	// node and on the loopback addresses, also where node ports are not
	// served (Config.NodePortAddresses, IPv6 loopback, 127.0.0.1 without
	// Config.LocalhostNodePorts): kube-proxy's iptables mode matches them
	// with `--dst-type LOCAL`.
	NodePortRejectsOnAllAddresses bool
	// LocalnetGuard drops, with Config.LocalhostNodePorts (IPv4), a new flow
	// to 127.0.0.0/8 from a source outside it that no Service port
	// forwards (kube-proxy's iptables mode: "block incoming localnet
	// connections", in KUBE-FIREWALL on input and output).
	LocalnetGuard bool
	// HairpinLocalOnly masquerades a flow that reaches its own source
	// (hairpin) only when that endpoint, with the flow's protocol, is a
	// target on this node (ruleset.Target's Local) of some Service port of
	// the Ruleset: kube-proxy's nftables mode masquerades the DNATed
	// connections in its hairpin-connections set (address . address .
	// protocol . port), which holds this node's endpoints, where the
	// iptables mode marks every endpoint's own traffic in the endpoint's
	// chain (what ruleset.Ruleset.Decide says). A pod elsewhere that this
	// node sends back to itself keeps its source.
	HairpinLocalOnly bool
	// MasqueradeClusterAddresses masquerades, as the Service ports'
	// ClusterIPMasquerade says, every forwarded flow to an address that is
	// a cluster IP, whatever its port and the frontend that takes it (an
	// external IP of another port at that address, say): kube-proxy's
	// nftables mode marks them in its services chain before the lookup
	// ("masquerade clusterIP traffic from outside cluster").
	MasqueradeClusterAddresses bool
}

var (
	// IPTablesMode is kube-proxy's iptables mode.
	IPTablesMode = Options{ArrivingRejectsOnly: true, NodePortRejectsOnAllAddresses: true, LocalnetGuard: true}
	// NFTablesMode is kube-proxy's nftables mode.
	NFTablesMode = Options{RejectUnknownPorts: true, DropUnallocated: true, FirewallFirst: true, HairpinLocalOnly: true, MasqueradeClusterAddresses: true}
)

// Outcome is where a packet goes.
type Outcome struct {
	// Verdict is what happens to the packet: VerdictNotServed when no
	// Service takes it and the rules leave it alone.
	Verdict ruleset.Verdict
	// Service is the Service port that took the packet, and Kind the
	// kind of frontend it came through; zero when Verdict is VerdictNotServed or
	// the packet is dropped for an unallocated address or rejected for an
	// unknown port.
	Service servicemap.PortName
	Kind    ruleset.FrontendKind
	// Targets, Masquerade and ShortCircuit are the Decision's, when the
	// packet is forwarded.
	Targets      []ruleset.Choice
	Masquerade   bool
	ShortCircuit bool
	// Affinity is the Service port's ClientIP affinity, when the packet
	// is forwarded: a client that reached a target within the timeout
	// reaches it again.
	Affinity affinity.Policy
}

// Trace returns the Outcome of p under rs.
func Trace(rs *ruleset.Ruleset, p Packet, opts Options) Outcome {
	if !p.Src.Addr().IsValid() || !p.Dst.Addr().IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() ||
		p.Dst.Addr().Is4() != (rs.Config().Family == v1.IPv4Protocol) {
		return Outcome{}
	}
	out := decide(rs, p, opts)
	if opts.LocalnetGuard && guarded(rs.Config(), p) && out.Verdict != ruleset.VerdictForward {
		return Outcome{Verdict: ruleset.VerdictDrop}
	}
	return out
}

// decide is the Outcome of a valid p, before the localnet guard.
func decide(rs *ruleset.Ruleset, p Packet, opts Options) Outcome {
	s, kind := lookup(rs, p)
	if s == nil {
		if opts.NodePortRejectsOnAllAddresses && (p.ToNode || p.Dst.Addr().IsLoopback()) {
			if out, ok := nodePortRefusal(rs, p); ok {
				return out
			}
		}
		return unmatched(rs, p, opts)
	}
	src := ruleset.Client{Addr: p.Src.Addr(), FromNode: p.FromNode}
	out := Outcome{Service: s.Name, Kind: kind}
	if s.Firewalled(kind, src.Addr) || opts.FirewallFirst && s.SourceRangesDeny(kind, src.Addr) {
		out.Verdict = ruleset.VerdictFirewall
		return out
	}
	d := rs.Decide(s, kind, src)
	switch d.Verdict {
	case ruleset.VerdictReject:
		out.Verdict = ruleset.VerdictReject
	case ruleset.VerdictDrop:
		out.Verdict = ruleset.VerdictDrop
	case ruleset.VerdictForward:
		out.Verdict = ruleset.VerdictForward
		out.Targets, out.Masquerade, out.ShortCircuit, out.Affinity = d.Targets, d.Masquerade, d.ShortCircuit, s.Affinity
		if opts.MasqueradeClusterAddresses && masqueradedClusterAddress(rs, p) {
			out.Masquerade = true
		}
		if opts.HairpinLocalOnly || out.Masquerade != d.Masquerade {
			out.Targets = masquerades(rs, s, d, out.Masquerade, src.Addr, opts.HairpinLocalOnly)
		}
		return out
	default:
		return Outcome{}
	}
	if opts.ArrivingRejectsOnly && out.Verdict == ruleset.VerdictReject && p.FromNode && !p.ToNode && (kind == ruleset.KindExternalIP || kind == ruleset.KindLoadBalancerIP) {
		return Outcome{}
	}
	return out
}

// masquerades is d's targets, each masqueraded when masq is set or for
// hairpin from src: as d says, or, with localOnly, when the target is a
// target on this node of some port of rs with s's protocol.
func masquerades(rs *ruleset.Ruleset, s *ruleset.Service, d ruleset.Decision, masq bool, src netip.Addr, localOnly bool) []ruleset.Choice {
	cs := slices.Clone(d.Targets)
	for i := range cs {
		hairpin := cs[i].Masquerade && !d.Masquerade
		if localOnly {
			hairpin = cs[i].Endpoint.Addr() == src && localTarget(rs, s.Name.Protocol, cs[i].Endpoint)
		}
		cs[i].Masquerade = masq || hairpin
	}
	return cs
}

// localTarget reports whether ep, with protocol proto, is a target on this
// node of some Service port of rs.
func localTarget(rs *ruleset.Ruleset, proto v1.Protocol, ep netip.AddrPort) bool {
	for _, s := range rs.Services() {
		if s.Name.Protocol != proto {
			continue
		}
		for _, ts := range [2][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
			for _, t := range ts {
				if t.Local && t.Endpoint == ep {
					return true
				}
			}
		}
	}
	return false
}

// masqueradedClusterAddress reports whether p goes to a cluster IP and
// the Config masquerades such traffic from p's source.
func masqueradedClusterAddress(rs *ruleset.Ruleset, p Packet) bool {
	if _, _, ok := rs.Owner(ruleset.Frontend{Kind: ruleset.KindClusterAddress, Addr: p.Dst.Addr()}); !ok {
		return false
	}
	cfg := rs.Config()
	if cfg.MasqueradeAll {
		return true
	}
	return len(cfg.ClusterCIDRs) > 0 && !slices.ContainsFunc(cfg.ClusterCIDRs, func(c netip.Prefix) bool { return c.Contains(p.Src.Addr()) })
}

// nodePortRefusal is the reject or drop of the owner of p's node port when
// its external route rejects or drops.
func nodePortRefusal(rs *ruleset.Ruleset, p Packet) (Outcome, bool) {
	s, _, ok := rs.Owner(ruleset.Frontend{Kind: ruleset.KindNodePort, Protocol: p.Protocol, Port: p.Dst.Port()})
	if !ok {
		return Outcome{}, false
	}
	switch s.External {
	case ruleset.RouteReject:
		return Outcome{Verdict: ruleset.VerdictReject, Service: s.Name, Kind: ruleset.KindNodePort}, true
	case ruleset.RouteDrop:
		return Outcome{Verdict: ruleset.VerdictDrop, Service: s.Name, Kind: ruleset.KindNodePort}, true
	}
	return Outcome{}, false
}

// loopbackNet is 127.0.0.0/8.
var loopbackNet = netip.MustParsePrefix("127.0.0.0/8")

// guarded reports whether the localnet guard watches p: localhost node
// ports on (IPv4), to 127.0.0.0/8 from outside it.
func guarded(cfg ruleset.Config, p Packet) bool {
	return cfg.LocalhostNodePorts && cfg.Family == v1.IPv4Protocol &&
		loopbackNet.Contains(p.Dst.Addr()) && !loopbackNet.Contains(p.Src.Addr())
}

// lookup finds the Service port and kind of frontend that take p: the owner
// (ruleset.Ruleset.Owner) of its destination address, protocol and port,
// else the owner of the node port.
func lookup(rs *ruleset.Ruleset, p Packet) (*ruleset.Service, ruleset.FrontendKind) {
	dst := p.Dst.Addr().WithZone("")
	if s, kind, ok := rs.Owner(ruleset.Frontend{Addr: dst, Protocol: p.Protocol, Port: p.Dst.Port()}); ok {
		return s, kind
	}
	if !servesNodePorts(rs.Config(), p) {
		return nil, 0
	}
	if s, kind, ok := rs.Owner(ruleset.Frontend{Kind: ruleset.KindNodePort, Protocol: p.Protocol, Port: p.Dst.Port()}); ok {
		return s, kind
	}
	return nil, 0
}

// servesNodePorts reports whether node ports are served on p's destination:
// Config.NodePortAddresses, or else any address of the node; loopback only
// for IPv4 with Config.LocalhostNodePorts.
func servesNodePorts(cfg ruleset.Config, p Packet) bool {
	dst := p.Dst.Addr()
	if dst.IsLoopback() && !(cfg.LocalhostNodePorts && dst.Is4()) {
		return false
	}
	if len(cfg.NodePortAddresses) > 0 {
		return slices.Contains(cfg.NodePortAddresses, dst)
	}
	return p.ToNode || dst.IsLoopback()
}

// unmatched is the Outcome of a packet no Service port takes.
func unmatched(rs *ruleset.Ruleset, p Packet, opts Options) Outcome {
	dst := p.Dst.Addr().WithZone("")
	if len(rs.ServicesAt(ruleset.Frontend{Kind: ruleset.KindClusterAddress, Addr: dst})) > 0 {
		if opts.RejectUnknownPorts {
			return Outcome{Verdict: ruleset.VerdictReject}
		}
		return Outcome{}
	}
	if opts.DropUnallocated && slices.ContainsFunc(rs.Config().ServiceCIDRs, func(c netip.Prefix) bool { return c.Contains(dst) }) {
		return Outcome{Verdict: ruleset.VerdictDrop}
	}
	return Outcome{}
}

// ParsePacket reads a packet written as "PROTO SRC -> DST [from WHERE]",
// such as "tcp 198.18.0.5:40000 -> 198.19.0.10:80 from pod": PROTO is tcp,
// udp or sctp, SRC and DST are address:port (IPv6 in brackets), and WHERE is
// pod, outside (both arriving; the default) or node (sent by the node
// itself). ToNode is left false: only the caller knows the node's addresses.
func ParsePacket(s string) (Packet, error) {
	f := strings.Fields(s)
	if len(f) != 4 && !(len(f) == 6 && f[4] == "from") || f[2] != "->" {
		return Packet{}, fmt.Errorf("packet %q: want \"PROTO SRC -> DST [from pod|node|outside]\"", s)
	}
	var p Packet
	switch strings.ToLower(f[0]) {
	case "tcp":
		p.Protocol = v1.ProtocolTCP
	case "udp":
		p.Protocol = v1.ProtocolUDP
	case "sctp":
		p.Protocol = v1.ProtocolSCTP
	default:
		return Packet{}, fmt.Errorf("packet %q: protocol %q is not tcp, udp or sctp", s, f[0])
	}
	var err error
	if p.Src, err = netip.ParseAddrPort(f[1]); err != nil {
		return Packet{}, fmt.Errorf("packet %q: source: %w", s, err)
	}
	if p.Dst, err = netip.ParseAddrPort(f[3]); err != nil {
		return Packet{}, fmt.Errorf("packet %q: destination: %w", s, err)
	}
	if len(f) == 6 {
		switch f[5] {
		case "node":
			p.FromNode = true
		case "pod", "outside":
		default:
			return Packet{}, fmt.Errorf("packet %q: %q is not pod, node or outside", s, f[5])
		}
	}
	return p, nil
}
