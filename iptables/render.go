package iptables

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// ErrFullSyncNeeded is returned by RenderPartial when only a full render can
// bring the kernel to the new state: there is no previous Ruleset, or the
// two were built with different Configs.
var ErrFullSyncNeeded = errors.New("iptables: a full sync is needed")

// Comments longer than this are cut: the kernel's limit is 256 bytes with
// the terminating NUL (XT_MAX_COMMENT_LEN).
const maxCommentLen = 255

// Render returns the iptables-restore input (for iptables-restore with an
// IPv4 Ruleset, ip6tables-restore with an IPv6 one) that makes the filter
// and nat tables hold the rules of rs, with kube-proxy's chain structure.
// It is meant for `iptables-restore --noflush`: every chain it writes is
// declared with ":CHAIN - [0:0]", which creates or flushes it, and chains
// that are not ours are left alone. The jumps from the built-in chains are
// not part of it (see Executor).
//
// Each table starts with a "-S" line, which lists the table on standard
// output. It changes nothing; it makes iptables-nft load its cache of the
// whole table at once, which keeps a full restore linear in the number of
// chains (see the package documentation), and the Executor reads the
// listing to find chains left over from earlier runs.
//
// Render is pure and deterministic: equal Rulesets give identical bytes.
// The zero Names is DefaultNames.
func Render(names Names, rs *ruleset.Ruleset) []byte {
	return renderFull(names, rs, nil)
}

// renderFull is Render that also flushes and deletes the nat chains stale
// (which must not be among rs's chains).
func renderFull(names Names, rs *ruleset.Ruleset, stale []string) []byte {
	r := newRenderer(names, rs.Config())
	return r.render(r.plans(rs.Services()), nil, stale, true)
}

// RenderPartial returns iptables-restore --noflush input that takes the
// kernel from the state of a successful sync of old to that of new, where
// ch is ruleset.Diff(old, new): the top-level chains (KUBE-SERVICES,
// KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES, KUBE-PROXY-FIREWALL, …) are
// rewritten in full, the chains of added and changed ServicePorts are
// re-declared (which flushes them) and rewritten, and the chains of removed
// ServicePorts, and those a changed ServicePort no longer uses, are flushed
// and deleted. The chains of unchanged ServicePorts are not mentioned.
//
// It returns ErrFullSyncNeeded when old is nil or ch.ConfigChanged.
func RenderPartial(names Names, old, new *ruleset.Ruleset, ch ruleset.Changes) ([]byte, error) {
	if old == nil || ch.ConfigChanged {
		return nil, ErrFullSyncNeeded
	}
	r := newRenderer(names, new.Config())
	plans := r.plans(new.Services())

	write := make([]bool, len(plans))
	touched := slices.Concat(ch.Added, ch.Changed)
	slices.SortFunc(touched, servicemap.PortName.Compare)
	i := 0
	for j := range plans {
		name := plans[j].s.Name
		for i < len(touched) && touched[i].Compare(name) < 0 {
			i++
		}
		write[j] = i < len(touched) && touched[i] == name
	}

	// Chains that go away: all of a removed ServicePort's, and those a
	// changed one no longer uses.
	var stale []string
	oldR := newRenderer(names, old.Config())
	for _, name := range ch.Removed {
		if s, ok := old.Service(name); ok {
			p := oldR.plan(s)
			stale = append(stale, p.chains()...)
		}
	}
	for _, name := range ch.Changed {
		before, ok1 := old.Service(name)
		after, ok2 := new.Service(name)
		if !ok1 || !ok2 {
			continue
		}
		pa, pb := r.plan(after), oldR.plan(before)
		keep := pa.chains()
		for _, c := range pb.chains() {
			if !slices.Contains(keep, c) {
				stale = append(stale, c)
			}
		}
	}
	// A partial sync that re-declares many chains meets the same
	// quadratic cost in iptables-nft as a full one; "-S" avoids it at the
	// price of listing the tables, which only pays when the partial input
	// is large (see listPays).
	text := r.render(plans, write, stale, false)
	if listPays(plans, write, len(stale), text) {
		text = r.render(plans, write, stale, true)
	}
	return text, nil
}

// listPays reports whether "-S" lines make restoring text (a partial
// render) cheaper. Without them iptables-nft 1.8.9 inserts every chain name
// the input mentions into a sorted linked list, once per line that mentions
// it: time ~ c₁·K·L for K names and L lines. With them it lists the whole
// table instead: time ~ c₂·R for R rules in the kernel. Measured on the
// reference machine (N Services × 10 endpoints, N = 1,000 to 10,000),
// c₂/c₁ ≈ 1,000: a one-Service partial sync at N = 10,000 takes 1.4 s
// without "-S" and 5.5 s with it, while a full restore at N = 2,000 takes
// 46 s without and 1.5 s with.
func listPays(plans []plan, write []bool, stale int, text []byte) bool {
	lines := bytes.Count(text, []byte("\n"))
	names := 16 + stale // top-level chains and the stale ones
	rules := 16         // a full render's rule count, about
	for i := range plans {
		p := &plans[i]
		names += 3 // jumped to from the top-level chains
		n := len(p.s.ClusterTargets) + len(p.s.LocalTargets) + 2*len(p.eps) + 8
		rules += n
		if write[i] {
			names += len(p.chains())
		}
	}
	return names*lines > 1000*rules
}

// natChains lists the nat chains a render of rs declares, sorted.
func natChains(names Names, rs *ruleset.Ruleset) []string {
	r := newRenderer(names, rs.Config())
	var cs []string
	for _, c := range names.NATChains() {
		if c != names.MasqNonPod() || len(rs.Config().ClusterCIDRs) > 1 {
			cs = append(cs, c)
		}
	}
	plans := r.plans(rs.Services())
	for i := range plans {
		cs = append(cs, plans[i].chains()...)
	}
	slices.Sort(cs)
	return cs
}

// staleChains lists the nat chains a render of old declares and one of new
// does not, sorted. A nil old has none.
func staleChains(names Names, old, new *ruleset.Ruleset) []string {
	if old == nil {
		return nil
	}
	keep := natChains(names, new)
	var stale []string
	for _, c := range natChains(names, old) {
		if _, found := slices.BinarySearch(keep, c); !found {
			stale = append(stale, c)
		}
	}
	return stale
}

// renderer accumulates the text of one render.
type renderer struct {
	names Names
	cfg   ruleset.Config
	v6    bool
	mark  string // the masquerade mark, "0x4000"
	b     []byte
	probs []string // probs[n] is the --probability text for 1/n
}

func newRenderer(names Names, cfg ruleset.Config) *renderer {
	return &renderer{
		names: names,
		cfg:   cfg,
		v6:    cfg.Family == v1.IPv6Protocol,
		mark:  "0x" + strconv.FormatUint(uint64(cfg.Mark()), 16),
	}
}

// plan is what is rendered for one ServicePort: the chains it uses (""
// when unused) and where each kind of traffic goes.
type plan struct {
	s     *ruleset.Service
	proto string // "tcp", "udp" or "sctp"
	name  string // "ns/name:port", the base of every comment
	// Per-Service chains.
	svc, svl, ext, fw string
	// eps are the endpoints of s.Endpoints and of every target, sorted,
	// each once; seps[i] is the chain of eps[i] (see endpointChains).
	eps   []netip.AddrPort
	seps  []string
	names Names
	// internal is the chain cluster-IP traffic jumps to; when it is "",
	// internalVerdict (REJECT or DROP) applies in filter instead.
	internal        string
	internalVerdict string
	// externalVerdict, when not "", rejects or drops traffic to external
	// addresses in filter (what the EXT chain does not short-circuit).
	externalVerdict string
}

// chains lists the nat chains of the plan in the order they are written.
func (p *plan) chains() []string {
	var cs []string
	for _, c := range []string{p.ext, p.fw, p.svc, p.svl} {
		if c != "" {
			cs = append(cs, c)
		}
	}
	return append(cs, p.endpointChains()...)
}

// endpointChains returns the chains of p.eps, computed on first use: a
// partial render needs them only for the ServicePorts it writes.
func (p *plan) endpointChains() []string {
	if p.seps == nil {
		p.seps = make([]string, len(p.eps))
		for i, ep := range p.eps {
			p.seps[i] = p.names.EndpointChain(p.s.Name, ep)
		}
	}
	return p.seps
}

func (r *renderer) plans(services []*ruleset.Service) []plan {
	ps := make([]plan, 0, len(services))
	for _, s := range services {
		p := r.plan(s)
		if p.proto == "" {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// plan decides the chains of s from its routes and targets. It does not
// re-decide policy; the only departures from the routes are for states a
// ruleset.Builder never produces (a Cluster route without cluster targets is
// rejected, a Local route without local targets dropped), so that a jump
// never names a chain that does not exist.
func (r *renderer) plan(s *ruleset.Service) plan {
	p := plan{s: s, name: s.Name.String(), names: r.names}
	switch s.Name.Protocol {
	case v1.ProtocolTCP:
		p.proto = "tcp"
	case v1.ProtocolUDP:
		p.proto = "udp"
	case v1.ProtocolSCTP:
		p.proto = "sctp"
	default:
		return p // unknown protocol: not rendered (servicemap never gives one)
	}
	n := r.names
	hash := servicePortHash(s.Name) // once for the four chains
	if len(s.ClusterTargets) > 0 {
		p.svc = n.chain(kindSVC, hash)
	}
	if len(s.LocalTargets) > 0 {
		p.svl = n.chain(kindSVL, hash)
	}
	internal := normalize(s.Internal, p.svc, p.svl)
	switch internal {
	case ruleset.RouteCluster:
		p.internal = p.svc
	case ruleset.RouteLocal:
		p.internal = p.svl
	case ruleset.RouteReject:
		p.internalVerdict = "REJECT"
	case ruleset.RouteDrop:
		p.internalVerdict = "DROP"
	}
	external := normalize(s.External, p.svc, p.svl)
	switch external {
	case ruleset.RouteReject:
		p.externalVerdict = "REJECT"
	case ruleset.RouteDrop:
		p.externalVerdict = "DROP"
	}
	// The external chain exists whenever the Service has endpoints
	// somewhere: even when this node drops external traffic, it
	// short-circuits traffic from pods and from the node itself.
	if external == ruleset.RouteCluster || external == ruleset.RouteLocal || external == ruleset.RouteDrop {
		p.ext = n.chain(kindEXT, hash)
		if s.UsesFirewall() {
			p.fw = n.chain(kindFW, hash)
		}
	}
	// s.Endpoints already holds every target's endpoint; the union only
	// guards the invariant that each jump names a declared chain.
	for i := range s.Endpoints {
		p.eps = append(p.eps, s.Endpoints[i].AddrPort())
	}
	for _, ts := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
		for _, t := range ts {
			p.eps = append(p.eps, t.Endpoint)
		}
	}
	slices.SortFunc(p.eps, netip.AddrPort.Compare)
	p.eps = slices.Compact(p.eps)
	return p
}

func normalize(route ruleset.Route, svc, svl string) ruleset.Route {
	switch {
	case route == ruleset.RouteCluster && svc == "":
		return ruleset.RouteReject
	case route == ruleset.RouteLocal && svl == "":
		return ruleset.RouteDrop
	}
	return route
}

// listLine lists the table before it is restored, with a comment for the
// operator who reads a dry run.
const listLine = "# -S lists the table first: it keeps the iptables-nft --noflush restore linear (see package iptables)\n-S\n"

// render writes both tables. write[i] says whether plans[i]'s chains are
// written (nil: all are); stale nat chains are flushed and deleted; list
// adds the "-S" lines.
func (r *renderer) render(plans []plan, write []bool, stale []string, list bool) []byte {
	writes := func(i int) bool { return write == nil || write[i] }
	n := r.names
	// About 110 bytes a line on average (up to ~250).
	lines := 64 + len(stale)
	for i := range plans {
		if writes(i) {
			lines += 3*len(plans[i].eps) + len(plans[i].s.ClusterTargets) + len(plans[i].s.LocalTargets) + 8
		} else {
			lines += 3
		}
	}
	r.b = make([]byte, 0, 112*lines)

	// filter
	r.str("*filter\n")
	if list {
		r.str(listLine)
	}
	for _, c := range n.FilterChains() {
		r.declare(c)
	}
	if !r.v6 && r.cfg.LocalhostNodePorts {
		// route_localnet, which localhost node ports need, lets packets
		// to 127.0.0.0/8 in from outside: drop those not translated
		// (kube-proxy's and kubelet's "block incoming localnet
		// connections").
		r.rule(n.NodePorts())
		r.comment("block incoming localnet connections")
		r.str(" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n")
	}
	for i := range plans {
		p := &plans[i]
		if p.internalVerdict != "" && p.s.ClusterIP.IsValid() {
			r.rule(n.Services())
			r.comment(p.name, verdictComment(p.internalVerdict))
			r.proto(p.proto)
			r.dst(p.s.ClusterIP, p.s.Port)
			r.jump(p.internalVerdict)
		}
	}
	for i := range plans {
		p := &plans[i]
		if p.externalVerdict == "" {
			continue
		}
		for _, ips := range [][]netip.Addr{p.s.ExternalIPs, p.s.LoadBalancerIPs} {
			for _, ip := range ips {
				r.rule(n.ExternalServices())
				r.comment(p.name, verdictComment(p.externalVerdict))
				r.proto(p.proto)
				r.dst(ip, p.s.Port)
				r.jump(p.externalVerdict)
			}
		}
		if p.s.NodePort != 0 {
			r.rule(n.ExternalServices())
			r.comment(p.name, verdictComment(p.externalVerdict))
			r.str(" -m addrtype --dst-type LOCAL")
			r.proto(p.proto)
			r.dport(p.s.NodePort)
			r.jump(p.externalVerdict)
		}
	}
	for i := range plans {
		p := &plans[i]
		if p.fw == "" {
			continue
		}
		for _, ip := range p.s.LoadBalancerIPs {
			r.rule(n.ProxyFirewall())
			r.comment(p.name, " traffic not accepted by ", p.fw)
			r.proto(p.proto)
			r.dst(ip, p.s.Port)
			r.jump("DROP")
		}
	}
	for i := range plans {
		p := &plans[i]
		if p.s.HealthCheckNodePort != 0 {
			r.rule(n.NodePorts())
			r.comment(p.name, " health check node port")
			r.proto("tcp")
			r.dport(p.s.HealthCheckNodePort)
			r.jump("ACCEPT")
		}
	}
	r.rule(n.Forward())
	r.str(" -m conntrack --ctstate INVALID -j DROP\n")
	r.rule(n.Forward())
	r.comment("kubernetes forwarding rules")
	r.str(" -m mark --mark " + r.mark + "/" + r.mark + " -j ACCEPT\n")
	r.rule(n.Forward())
	r.comment("kubernetes forwarding conntrack rule")
	r.str(" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n")
	r.str("COMMIT\n")

	// nat
	r.str("*nat\n")
	if list {
		r.str(listLine)
	}
	multiCIDR := len(r.cfg.ClusterCIDRs) > 1
	for _, c := range n.NATChains() {
		if c == n.MasqNonPod() && !multiCIDR {
			continue
		}
		r.declare(c)
	}
	for i := range plans {
		if writes(i) {
			for _, c := range plans[i].chains() {
				r.declare(c)
			}
		}
	}
	for _, c := range stale {
		r.declare(c)
	}

	r.rule(n.Postrouting())
	r.str(" -m mark ! --mark " + r.mark + "/" + r.mark + " -j RETURN\n")
	r.rule(n.Postrouting())
	r.str(" -j MARK --xor-mark " + r.mark + "\n")
	r.rule(n.Postrouting())
	r.comment("kubernetes service traffic requiring SNAT")
	r.str(" -j MASQUERADE --random-fully\n")
	r.rule(n.MarkMasq())
	r.str(" -j MARK --or-mark " + r.mark + "\n")
	if multiCIDR {
		for _, cidr := range r.cfg.ClusterCIDRs {
			r.rule(n.MasqNonPod())
			r.str(" -s ")
			r.prefix(cidr)
			r.jump("RETURN")
		}
		r.rule(n.MasqNonPod())
		r.comment("masquerade traffic not from pods")
		r.jump(n.MarkMasq())
	}

	for i := range plans {
		p := &plans[i]
		if p.internal != "" && p.s.ClusterIP.IsValid() {
			r.rule(n.Services())
			r.comment(p.name, " cluster IP")
			r.proto(p.proto)
			r.dst(p.s.ClusterIP, p.s.Port)
			r.jump(p.internal)
		}
		if p.ext == "" {
			continue
		}
		for _, ip := range p.s.ExternalIPs {
			r.rule(n.Services())
			r.comment(p.name, " external IP")
			r.proto(p.proto)
			r.dst(ip, p.s.Port)
			r.jump(p.ext)
		}
		lb := p.ext
		if p.fw != "" {
			lb = p.fw
		}
		for _, ip := range p.s.LoadBalancerIPs {
			r.rule(n.Services())
			r.comment(p.name, " loadbalancer IP")
			r.proto(p.proto)
			r.dst(ip, p.s.Port)
			r.jump(lb)
		}
	}
	r.nodePortsJump()

	for i := range plans {
		p := &plans[i]
		if p.ext != "" && p.s.NodePort != 0 {
			r.rule(n.NodePorts())
			r.comment(p.name)
			r.proto(p.proto)
			r.dport(p.s.NodePort)
			r.jump(p.ext)
		}
	}

	for i := range plans {
		if writes(i) {
			r.serviceChains(&plans[i])
		}
	}
	for _, c := range stale {
		r.str("-X " + c + "\n")
	}
	r.str("COMMIT\n")
	return r.b
}

func verdictComment(verdict string) string {
	if verdict == "DROP" {
		return " has no local endpoints"
	}
	return " has no endpoints"
}

// nodePortsJump writes the last rules of nat KUBE-SERVICES: node-port
// traffic, to a local address or to one of the NodePort addresses, goes on
// to KUBE-NODEPORTS.
func (r *renderer) nodePortsJump() {
	const comment = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
	n := r.names
	if len(r.cfg.NodePortAddresses) == 0 {
		r.rule(n.Services())
		r.comment(comment)
		r.str(" -m addrtype --dst-type LOCAL")
		switch {
		case r.v6:
			r.str(" ! -d ::1/128")
		case !r.cfg.LocalhostNodePorts:
			r.str(" ! -d 127.0.0.0/8")
		}
		r.jump(n.NodePorts())
		return
	}
	for _, ip := range r.cfg.NodePortAddresses {
		if ip.IsLoopback() && (r.v6 || !r.cfg.LocalhostNodePorts) {
			continue // as kube-proxy: localhost node ports are off (and never work on IPv6)
		}
		r.rule(n.Services())
		r.comment(comment)
		r.str(" -d ")
		r.addr(ip)
		r.jump(n.NodePorts())
	}
}

// serviceChains writes the rules of a ServicePort's own chains.
func (r *renderer) serviceChains(p *plan) {
	n := r.names
	s := p.s
	if p.ext != "" {
		if s.External == ruleset.RouteCluster {
			// Endpoints may be on other nodes: masquerade so that
			// replies come back through this node.
			r.rule(p.ext)
			r.comment("masquerade traffic for ", p.name, " external destinations")
			r.jump(n.MarkMasq())
			r.rule(p.ext)
			r.jump(p.svc)
		} else {
			// externalTrafficPolicy Local: the source is kept for
			// traffic from outside, but traffic from pods and from the
			// node itself is short-circuited to the cluster endpoints,
			// as if it had gone out to the load balancer and back.
			short := ""
			if len(s.ClusterTargets) > 0 {
				short = p.svc
			}
			if short != "" {
				for _, cidr := range r.cfg.ClusterCIDRs {
					r.rule(p.ext)
					r.comment("pod traffic for ", p.name, " external destinations")
					r.str(" -s ")
					r.prefix(cidr)
					r.jump(short)
				}
			}
			r.rule(p.ext)
			r.comment("masquerade LOCAL traffic for ", p.name, " external destinations")
			r.str(" -m addrtype --src-type LOCAL")
			r.jump(n.MarkMasq())
			if short != "" {
				r.rule(p.ext)
				r.comment("route LOCAL traffic for ", p.name, " external destinations")
				r.str(" -m addrtype --src-type LOCAL")
				r.jump(short)
			}
			if p.svl != "" && s.External == ruleset.RouteLocal {
				r.rule(p.ext)
				r.jump(p.svl)
			}
		}
	}
	if p.fw != "" {
		for _, src := range s.LoadBalancerSourceRanges {
			r.rule(p.fw)
			r.comment(p.name, " loadbalancer IP")
			r.str(" -s ")
			r.prefix(src)
			r.jump(p.ext)
		}
		if s.FirewallAllowsNode {
			for _, ip := range s.LoadBalancerIPs {
				r.rule(p.fw)
				r.comment(p.name, " loadbalancer IP")
				r.str(" -s ")
				r.addr(ip)
				r.jump(p.ext)
			}
		}
		r.rule(p.fw)
		r.comment("other traffic to ", p.name, " will be dropped by ", n.ProxyFirewall())
		r.str("\n")
	}
	if p.svc != "" {
		r.targets(p, p.svc, s.ClusterTargets, p.internal == p.svc)
	}
	if p.svl != "" {
		r.targets(p, p.svl, s.LocalTargets, p.internal == p.svl)
	}
	seps := p.endpointChains()
	for i, ep := range p.eps {
		r.rule(seps[i])
		r.comment(p.name)
		r.str(" -s ")
		r.addr(ep.Addr())
		r.jump(n.MarkMasq())
		r.rule(seps[i])
		r.comment(p.name)
		if s.Affinity.Enabled() {
			r.str(" -m recent --name " + seps[i] + " --set")
		}
		r.proto(p.proto)
		r.str(" -j DNAT --to-destination ")
		r.addrPort(ep)
		r.str("\n")
	}
}

// targets writes a policy chain (KUBE-SVC- or KUBE-SVL-): the masquerade
// rule for cluster-IP traffic when it is the internal chain, the affinity
// checks, then one rule per target, each taken with probability
// 1/Remaining, the last unconditionally.
func (r *renderer) targets(p *plan, chain string, ts []ruleset.Target, internal bool) {
	n := r.names
	s := p.s
	if internal && s.ClusterIP.IsValid() {
		cidrs := r.cfg.ClusterCIDRs
		switch {
		case r.cfg.MasqueradeAll:
			r.clusterIPRule(p, chain)
			r.jump(n.MarkMasq())
		case len(cidrs) == 1:
			// Off-cluster traffic to a cluster IP (a static route to the
			// Service range through this node) may leave the node:
			// masquerade it.
			r.clusterIPRule(p, chain)
			r.str(" ! -s ")
			r.prefix(cidrs[0])
			r.jump(n.MarkMasq())
		case len(cidrs) > 1:
			r.clusterIPRule(p, chain)
			r.jump(n.MasqNonPod())
		}
	}
	idx := func(t ruleset.Target) int {
		i, _ := slices.BinarySearchFunc(p.eps, t.Endpoint, netip.AddrPort.Compare)
		return i
	}
	if s.Affinity.Enabled() {
		mask := " --mask 255.255.255.255"
		if r.v6 {
			mask = " --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
		}
		secs := strconv.Itoa(int(s.Affinity.Seconds()))
		for _, t := range ts {
			sep := p.endpointChains()[idx(t)]
			r.rule(chain)
			r.comment(p.name, " -> ", addrPortString(t.Endpoint))
			r.str(" -m recent --name " + sep + mask + " --rcheck --seconds " + secs + " --reap")
			r.jump(sep)
		}
	}
	for _, t := range ts {
		sep := p.endpointChains()[idx(t)]
		r.rule(chain)
		r.comment(p.name, " -> ", addrPortString(t.Endpoint))
		if t.Remaining > 1 {
			r.str(" -m statistic --mode random --probability ")
			r.str(r.probability(t.Remaining))
		}
		r.jump(sep)
	}
}

func (r *renderer) clusterIPRule(p *plan, chain string) {
	r.rule(chain)
	r.comment(p.name, " cluster IP")
	r.proto(p.proto)
	r.dst(p.s.ClusterIP, p.s.Port)
}

// probability is 1/n with 10 decimals, as kube-proxy writes it.
func (r *renderer) probability(n int) string {
	if n < len(r.probs) {
		if s := r.probs[n]; s != "" {
			return s
		}
	} else {
		r.probs = append(r.probs, make([]string, n+1-len(r.probs))...)
	}
	r.probs[n] = strconv.FormatFloat(1/float64(n), 'f', 10, 64)
	return r.probs[n]
}

// Text helpers. Everything variable that reaches the output goes through
// addr, prefix, comment or a number formatter, or is a chain name made by
// Names.

func (r *renderer) str(s string) { r.b = append(r.b, s...) }

func (r *renderer) declare(chain string) {
	r.b = append(r.b, ':')
	r.b = append(r.b, chain...)
	r.b = append(r.b, " - [0:0]\n"...)
}

func (r *renderer) rule(chain string) {
	r.b = append(r.b, "-A "...)
	r.b = append(r.b, chain...)
}

func (r *renderer) jump(target string) {
	r.b = append(r.b, " -j "...)
	r.b = append(r.b, target...)
	r.b = append(r.b, '\n')
}

func (r *renderer) proto(proto string) {
	r.b = append(r.b, " -m "...)
	r.b = append(r.b, proto...)
	r.b = append(r.b, " -p "...)
	r.b = append(r.b, proto...)
}

func (r *renderer) dst(ip netip.Addr, port uint16) {
	r.str(" -d ")
	r.addr(ip)
	r.dport(port)
}

func (r *renderer) dport(port uint16) {
	r.str(" --dport ")
	r.b = strconv.AppendUint(r.b, uint64(port), 10)
}

func (r *renderer) addr(ip netip.Addr) { r.b = ip.WithZone("").AppendTo(r.b) }

func (r *renderer) prefix(p netip.Prefix) { r.b = p.Masked().AppendTo(r.b) }

func (r *renderer) addrPort(ap netip.AddrPort) {
	r.b = netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port()).AppendTo(r.b)
}

func addrPortString(ap netip.AddrPort) string {
	return netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port()).String()
}

// comment writes "-m comment --comment TEXT", TEXT being the parts joined.
// Bytes other than letters, digits and " ./:_-[]>;," become '_', so
// nothing in TEXT can end the argument, the rule or the line; the text is
// cut to the kernel's limit and double-quoted when it holds a space.
func (r *renderer) comment(parts ...string) {
	total, quote := 0, false
	for _, p := range parts {
		total += len(p)
		quote = quote || strings.IndexByte(p, ' ') >= 0
	}
	left := min(total, maxCommentLen)
	if left < total { // the cut may drop the only space
		quote = false
		rest := left
		for _, p := range parts {
			if i := strings.IndexByte(p, ' '); i >= 0 && i < rest {
				quote = true
				break
			}
			rest -= min(rest, len(p))
		}
	}
	quote = quote || total == 0
	r.b = append(r.b, " -m comment --comment "...)
	if quote {
		r.b = append(r.b, '"')
	}
	for _, p := range parts {
		for i := 0; i < len(p) && left > 0; i++ {
			c := p[i]
			if !safeCommentByte(c) {
				c = '_'
			}
			r.b = append(r.b, c)
			left--
		}
	}
	if quote {
		r.b = append(r.b, '"')
	}
}

func safeCommentByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte(" ./:_-[]>;,", c) >= 0
}
