package flat

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/names"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// flatPort is what one Service port puts in the flat layout's table: its
// elements, the group and count of each target list it uses, and the
// hairpin keys it needs in the hairpin set (shared with other ports, so
// counted rather than owned): those of the targets on this node of each of
// its target lists (ClusterTargets, LocalTargets) that a frontend uses,
// each list once.
type flatPort struct {
	elements []model.Element
	groups   []groupN
	hairpin  []hairpinKey
	// hairpinKeys, when set, takes the hairpin keys, packed, in place of
	// hairpin (a whole table's render counts them sorted).
	hairpinKeys *useKeys
	affinity    []affinityClass
	// usesCluster and usesLocal report that a frontend of the port being
	// rendered uses its ClusterTargets, its LocalTargets.
	usesCluster, usesLocal bool
	// frontendStart is the index in elements of the first element of the
	// frontend being rendered.
	frontendStart int
	// arena is where the elements' keys are carved from, in
	// chunks of at least arenaChunk data (0: as many as asked).
	arena      []model.Datum
	arenaChunk int
}

// datums returns an empty slice with room for n data, carved from p's
// arena.
func (p *flatPort) datums(n int) []model.Datum {
	if cap(p.arena)-len(p.arena) < n {
		p.arena = make([]model.Datum, 0, max(n, p.arenaChunk))
	}
	start := len(p.arena)
	p.arena = p.arena[:start+n]
	return p.arena[start : start : start+n]
}

// port renders one Service port of rs. A frontend that another port owns
// (ruleset.Ruleset.Owner) is left to it and named in a warning.
func (r *flatRenderer) port(rs *ruleset.Ruleset, s *ruleset.Service) (flatPort, []svcproxy.Warning) {
	var p flatPort
	if !names.Safe(s.Name) {
		return p, []svcproxy.Warning{names.UnsafeWarning(s)}
	}
	warns := r.portInto(&p, ownership{rs: rs}, s, s.Frontends(), portComment(s.Name))
	return p, warns
}

// portInto is port appending to p: its elements, groups and hairpin
// addresses after those p holds, for the frontends of s (fs, its
// Frontends) that o says s renders, with comment (portComment). The
// caller has checked that s's name is safe (safeName).
func (r *flatRenderer) portInto(p *flatPort, o ownership, s *ruleset.Service, fs []ruleset.Frontend, comment string) []svcproxy.Warning {
	warns := r.affinityWarnings(s)
	p.usesCluster, p.usesLocal = false, false
	for _, f := range fs {
		if f.Kind == ruleset.KindClusterAddress { // one entry per address, whichever port has it
			if o.owns(s, f) {
				r.frontend(p, s, f, comment)
			}
			continue
		}
		if !o.owns(s, f) {
			if owner, ok := o.otherOwner(s, f); ok {
				if w := ruleset.ConflictWarning(s.Name, f, owner); !slices.Contains(warns, w) {
					warns = append(warns, w)
				}
			}
			continue
		}
		r.frontend(p, s, f, comment)
	}
	p.addHairpin(s)
	return warns
}

// portComment is the comment of the elements of a Service port:
// "namespace/name:port/PROTOCOL". That may reach 148 bytes; nft refuses
// comments over 128, and with them the whole transaction: the comment
// keeps its first 128, which name the namespace and Service.
func portComment(n servicemap.PortName) string { return string(appendPortComment(nil, n)) }

// appendPortComment appends portComment(n).
func appendPortComment(b []byte, n servicemap.PortName) []byte {
	start := len(b)
	b = append(append(append(b, n.Namespace...), '/'), n.Name...)
	if n.Port != "" {
		b = append(append(b, ':'), n.Port...)
	}
	b = append(append(b, '/'), n.Protocol...)
	return b[:start+min(len(b)-start, knftables.CommentLengthMax)]
}

// portCommentList is the portComments of a list of Service ports, in one
// string: that of port i is all[ends[i-1]:ends[i]] (from 0 for the
// first).
type portCommentList struct {
	all  string
	ends []int
}

// at is the comment of port i.
func (c portCommentList) at(i int) string {
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return c.all[start:c.ends[i]]
}

// portComments are the portComments of svcs, each empty when its name is
// not safe (safeName), and only then. Checking a name just before copying
// it reads it from memory once.
func portComments(svcs []*ruleset.Service) portCommentList {
	n := 0
	for _, s := range svcs {
		n += len(s.Name.Namespace) + len(s.Name.Name) + len(s.Name.Port) + len(s.Name.Protocol) + 3
	}
	var b strings.Builder
	b.Grow(n)
	ends := make([]int, len(svcs))
	var buf []byte
	for i, s := range svcs {
		if names.Safe(s.Name) {
			buf = appendPortComment(buf[:0], s.Name)
			b.Write(buf)
		}
		ends[i] = b.Len()
	}
	return portCommentList{b.String(), ends}
}

// addHairpin appends the hairpin keys of the targets on this node of the
// target lists of s that p's frontends use to p's hairpin keys (or
// hairpinKeys): as in kube-proxy 1.37's nftables mode, a flow DNATed to
// its own source is masqueraded when that source, with the flow's
// protocol and port, is a target on this node of some Service port.
func (p *flatPort) addHairpin(s *ruleset.Service) {
	proto := model.ProtoNumber(s.Name.Protocol)
	for _, l := range []struct {
		used    bool
		targets []ruleset.Target
	}{{p.usesCluster, s.ClusterTargets}, {p.usesLocal, s.LocalTargets}} {
		switch {
		case !l.used:
		case p.hairpinKeys != nil:
			p.hairpinKeys.addLocalTargets(l.targets, proto)
		default:
			for _, t := range l.targets {
				if t.Local {
					p.hairpin = append(p.hairpin, hairpinKeyOf(t, proto))
				}
			}
		}
	}
}

func (r *flatRenderer) warn(s *ruleset.Service, reason string) svcproxy.Warning {
	return svcproxy.Warning{Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
		Reason: fmt.Sprintf("port %s/%s: %s", s.Name.Port, s.Name.Protocol, reason)}
}

// frontend adds the elements of one frontend that s owns.
func (r *flatRenderer) frontend(p *flatPort, s *ruleset.Service, f ruleset.Frontend, comment string) {
	p.frontendStart = len(p.elements)
	switch {
	case f.Protocol == "":
		p.elements = append(p.elements, model.Element{Set: flatSetClusterIPs, Key: append(p.datums(1), model.Addr(f.Addr)), Comment: comment})
	case !f.Addr.IsValid():
		r.route(p, s, append(p.datums(2), model.Proto(model.ProtoNumber(f.Protocol)), model.Port(f.Port)), false, true, comment)
	case f.Addr == s.ClusterIP:
		r.route(p, s, model.AppendAddrProtoPort(p.datums(3), f.Addr, model.ProtoNumber(f.Protocol), f.Port), true, false, comment)
	default:
		key := model.AppendAddrProtoPort(p.datums(3), f.Addr, model.ProtoNumber(f.Protocol), f.Port)
		r.route(p, s, key, false, false, comment)
		// An address that is both an external and a load-balancer IP is
		// reached as an external IP, which no firewall guards.
		lb := slices.Contains(s.LoadBalancerIPs, f.Addr) && !slices.Contains(s.ExternalIPs, f.Addr)
		if lb && s.UsesFirewall() { // also without endpoints: the firewall comes first, as in kube-proxy's layout
			r.firewall(p, s, key, comment)
		}
	}
}

// route adds the elements that send one frontend's traffic where the
// Service's Internal (cluster IP) or External route says.
func (r *flatRenderer) route(p *flatPort, s *ruleset.Service, key []model.Datum, internal, nodePort bool, comment string) {
	reject, drop := flatSetReject, flatSetDrop
	if nodePort {
		reject, drop = flatSetNodePortReject, flatSetNodePortDrop
	}
	groups := func(addr, np flatGroup) flatGroup {
		if nodePort {
			return np
		}
		return addr
	}
	route := s.External
	if internal {
		route = s.Internal
	}
	switch {
	case route == ruleset.RouteReject:
		p.elements = append(p.elements, model.Element{Set: reject, Key: key, Comment: comment})
	case internal && route == ruleset.RouteCluster:
		r.targets(p, s, groupCluster, key, false, comment)
	case internal && route == ruleset.RouteLocal:
		r.targets(p, s, groupCluster, key, true, comment)
	case internal && route == ruleset.RouteDrop:
		p.elements = append(p.elements, model.Element{Set: drop, Key: key, Comment: comment})
	case route == ruleset.RouteCluster:
		r.targets(p, s, groups(groupExternal, groupNodePortExternal), key, false, comment)
	case route == ruleset.RouteLocal, route == ruleset.RouteDrop:
		if route == ruleset.RouteLocal {
			r.targets(p, s, groups(groupLocal, groupNodePortLocal), key, true, comment)
		} else {
			p.elements = append(p.elements, model.Element{Set: drop, Key: key, Comment: comment})
		}
		r.targets(p, s, groups(groupShortCircuit, groupNodePortShortCircuit), key, false, comment)
	}
}

// targets adds a frontend of s to the group of its target count and
// protocol, and its targets (LocalTargets when local, else
// ClusterTargets), in the Ruleset's order, under indices 0…N−1: a block
// whose rows the Service's targets make (targetRows).
func (r *flatRenderer) targets(p *flatPort, s *ruleset.Service, g flatGroup, key []model.Datum, local bool, comment string) {
	targets := &s.ClusterTargets
	if local {
		targets = &s.LocalTargets
	}
	if len(*targets) == 0 {
		return
	}
	p.usesCluster, p.usesLocal = p.usesCluster || !local, p.usesLocal || local
	k := groupN{group: g, n: len(*targets), proto: model.ProtoNumber(s.Name.Protocol)}
	p.groups = append(p.groups, k)
	names := r.names(k)
	p.elements = append(p.elements,
		model.Element{Set: names.set, Key: key, Comment: comment},
		model.Element{Set: names.targets, Key: key, Rows: len(*targets), Source: (*targetRows)(targets), Comment: comment})
	if r.rendersAffinity(s) {
		r.affinityTargets(p, s, g, key, targets, comment)
	}
}

// targetRows make the rows of a targets block from a Service's targets (a
// Ruleset's, which do not change): row i is index i, then the address and
// port of target i.
type targetRows []ruleset.Target

func (*targetRows) Widths() (key, value int) { return 1, 2 }

func (t *targetRows) AppendRow(dst []model.Datum, i int) []model.Datum {
	ep := (*t)[i].Endpoint
	return append(dst, model.Int(uint32(i)), model.Addr(ep.Addr()), model.Port(ep.Port()))
}

// firewall adds a load-balancer frontend to the source-range firewall:
// the ranges it lets through, and (FirewallAllowsNode) the port's
// load-balancer IPs, from which the node's own requests come.
func (r *flatRenderer) firewall(p *flatPort, s *ruleset.Service, key []model.Datum, comment string) {
	p.elements = append(p.elements, model.Element{Set: flatSetFirewall, Key: key, Comment: comment})
	allow := slices.Clone(s.LoadBalancerSourceRanges)
	if s.FirewallAllowsNode {
		for _, ip := range s.LoadBalancerIPs {
			allow = append(allow, maxPrefix(ip))
		}
	}
	for _, src := range outermost(allow) {
		p.elements = append(p.elements, model.Element{Set: flatSetFirewallAllow, Key: append(slices.Clone(key), model.Prefix(src)), Comment: comment})
	}
}

// outermost are the prefixes of ps that no other prefix of ps contains,
// each once, widest first: the kernel refuses overlapping ranges in one
// element key of a concatenated interval set.
func outermost(ps []netip.Prefix) []netip.Prefix {
	sorted := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		sorted[i] = p.Masked()
	}
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		return cmp.Or(cmp.Compare(a.Bits(), b.Bits()), a.Addr().Compare(b.Addr()))
	})
	var out []netip.Prefix
	for _, p := range sorted {
		if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Contains(p.Addr()) }) {
			out = append(out, p)
		}
	}
	return out
}
