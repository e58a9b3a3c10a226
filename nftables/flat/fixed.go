package flat

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// flatBaseChains are the flat layout's base chains, hooked as kube-proxy
// hooks its own (see baseChains), each with one jump per line of rules.
func (r *flatRenderer) flatBaseChains() []*model.Chain {
	newOnly := []model.Stmt{model.CtNew{}}
	base := func(name, typ, hook, prio string, jumps ...[]model.Stmt) *model.Chain {
		c := &model.Chain{Name: name, Base: &model.Hook{Type: typ, Hook: hook, Priority: prio}}
		for _, j := range jumps {
			c.Rules = append(c.Rules, model.Rule{Stmts: j})
		}
		return c
	}
	jump := func(match []model.Stmt, to string) []model.Stmt {
		return append(slices.Clone(match), model.Jump(to))
	}
	return []*model.Chain{
		base("filter-prerouting-pre", "filter", "prerouting", "dstnat-10", jump(newOnly, flatFirewallCheck)),
		base("filter-output-pre", "filter", "output", "dstnat-10", jump(newOnly, flatFirewallCheck)),
		base("filter-input", "filter", "input", "filter", jump(newOnly, flatNodePortCheck), jump(newOnly, flatEndpointCheck)),
		base("filter-forward", "filter", "forward", "filter", jump(newOnly, flatEndpointCheck), jump(newOnly, flatClusterIPsCheck)),
		base("filter-output", "filter", "output", "filter", jump(newOnly, flatEndpointCheck), jump(newOnly, flatClusterIPsCheck)),
		base("nat-prerouting", "nat", "prerouting", "dstnat", jump(nil, flatServices)),
		base("nat-output", "nat", "output", "dstnat", jump(nil, flatServices)),
		base("nat-postrouting", "nat", "postrouting", "srcnat", jump(nil, flatMasquerading)),
	}
}

// nodeDestination is the match of packets to an address that serves node
// ports: Config.NodePortAddresses, or else any local address but (unless
// Config.LocalhostNodePorts) localhost. withFib is false in the input
// hook, where every address is local.
func (r *flatRenderer) nodeDestination(withFib bool) []model.Stmt {
	if len(r.cfg.NodePortAddresses) > 0 || r.cfg.NoNodePortAddresses {
		return []model.Stmt{model.InSet{Key: []model.Expr{r.daddr}, Set: flatSetNodePortIPs}}
	}
	var m []model.Stmt
	if withFib {
		m = append(m, model.FibLocal{})
	}
	if !(r.cfg.LocalhostNodePorts && r.family == model.IPv4) {
		m = append(m, model.Equal{Field: r.daddr, Value: model.Prefix(r.localhost()), Neg: true})
	}
	return m
}

func (r *flatRenderer) localhost() netip.Prefix {
	if r.family == model.IPv6 {
		return netip.MustParsePrefix("::1/128")
	}
	return netip.MustParsePrefix("127.0.0.0/8")
}

// flatFixedChains are the regular chains that do not depend on the
// endpoint counts in use.
func (r *flatRenderer) flatFixedChains() []*model.Chain {
	addr, np := r.addrKey(), r.nodePortKey()
	rule := func(stmts ...model.Stmt) model.Rule { return model.Rule{Stmts: stmts} }
	services := &model.Chain{Name: flatServices}
	for _, g := range []flatGroup{groupCluster, groupExternal, groupShortCircuit, groupLocal} {
		services.Rules = append(services.Rules, rule(model.Jump(g.String())))
	}
	services.Rules = append(services.Rules, model.Rule{Stmts: append(r.nodeDestination(true), model.Jump(flatNodePorts))})
	nodePorts := &model.Chain{Name: flatNodePorts}
	for _, g := range []flatGroup{groupNodePortExternal, groupNodePortShortCircuit, groupNodePortLocal} {
		nodePorts.Rules = append(nodePorts.Rules, rule(model.Jump(g.String())))
	}
	npDest := r.nodeDestination(false)
	clusterIPs := &model.Chain{Name: flatClusterIPsCheck, Rules: []model.Rule{
		{Stmts: []model.Stmt{model.InSet{Key: []model.Expr{r.daddr}, Set: flatSetClusterIPs}, model.Reject}, Comment: "Reject traffic to invalid ports of ClusterIPs"},
	}}
	if len(r.cfg.ServiceCIDRs) > 0 {
		clusterIPs.Rules = append(clusterIPs.Rules, model.Rule{Stmts: []model.Stmt{model.InSet{Key: []model.Expr{r.daddr}, Set: flatSetServiceCIDRs}, model.Drop}, Comment: "Drop traffic to unallocated ClusterIPs"})
	}
	return []*model.Chain{
		services, nodePorts, clusterIPs,
		{Name: flatFirewallCheck, Rules: []model.Rule{rule(model.InSet{Key: addr, Set: flatSetFirewall},
			model.InSet{Key: append(slices.Clone(addr), r.saddr), Set: flatSetFirewallAllow, Neg: true}, model.Drop)}},
		{Name: flatEndpointCheck, Rules: []model.Rule{
			rule(model.InSet{Key: addr, Set: flatSetReject}, model.Reject),
			rule(model.InSet{Key: addr, Set: flatSetDrop}, model.Drop),
		}},
		{Name: flatNodePortCheck, Rules: []model.Rule{
			{Stmts: append(slices.Clone(npDest), model.InSet{Key: np, Set: flatSetNodePortReject}, model.Reject)},
			{Stmts: append(slices.Clone(npDest), model.InSet{Key: np, Set: flatSetNodePortDrop}, model.Drop)},
		}},
		{Name: flatMasquerading, Rules: []model.Rule{
			rule(model.CtDNAT{}, model.InSet{Key: r.hairpinKey(), Set: flatSetHairpin}, model.MarkOr{Bits: r.mark}),
			rule(model.MarkClear{Bits: r.mark}, model.Return),
			rule(model.MarkXor{Bits: r.mark}),
			rule(model.Masquerade{}),
		}},
	}
}

// hairpinKey is the key of the hairpin set: source, destination, protocol
// and destination port, kube-proxy 1.37's hairpin-connections key.
func (r *flatRenderer) hairpinKey() []model.Expr {
	return []model.Expr{r.saddr, r.daddr, model.L4Proto, model.THDport}
}

// flatFixedSets are the sets that do not depend on the endpoint counts.
func (r *flatRenderer) flatFixedSets() []*model.Set {
	addr, np := r.addrKey(), r.nodePortKey()
	sets := []*model.Set{
		{Name: flatSetClusterIPs, Key: []model.Expr{r.daddr}, Comment: "Active ClusterIPs"},
		{Name: flatSetReject, Key: addr, Comment: "Service frontends without endpoints"},
		{Name: flatSetDrop, Key: addr, Comment: "Local-policy frontends without endpoints on this node"},
		{Name: flatSetNodePortReject, Key: np, Comment: "node ports without endpoints"},
		{Name: flatSetNodePortDrop, Key: np, Comment: "Local-policy node ports without endpoints on this node"},
		{Name: flatSetFirewall, Key: addr, Comment: "destinations that are subject to LoadBalancerSourceRanges"},
		{Name: flatSetFirewallAllow, Key: append(slices.Clone(addr), r.saddr), Interval: true, Comment: "sources that LoadBalancerSourceRanges let through"},
		{Name: flatSetHairpin, Key: r.hairpinKey(), Comment: "endpoints that may reach themselves through a Service"},
	}
	if len(r.cfg.ServiceCIDRs) > 0 {
		sets = append(sets, &model.Set{Name: flatSetServiceCIDRs, Key: []model.Expr{r.daddr}, Interval: true, Comment: "Service IP ranges"})
	}
	if len(r.cfg.ClusterCIDRs) > 0 {
		sets = append(sets, &model.Set{Name: flatSetClusterCIDRs, Key: []model.Expr{r.saddr}, Interval: true, Comment: "pod networks"})
	}
	if len(r.cfg.NodePortAddresses) > 0 || r.cfg.NoNodePortAddresses {
		sets = append(sets, &model.Set{Name: flatSetNodePortIPs, Key: []model.Expr{r.daddr}, Comment: "IPs that accept NodePort traffic"})
	}
	return sets
}

// flatConfigElements are the elements that come from the Config.
func (r *flatRenderer) flatConfigElements() []model.Element {
	var es []model.Element
	for _, p := range r.cfg.ServiceCIDRs {
		es = append(es, model.Element{Set: flatSetServiceCIDRs, Key: []model.Datum{model.Prefix(p)}})
	}
	for _, p := range r.cfg.ClusterCIDRs {
		es = append(es, model.Element{Set: flatSetClusterCIDRs, Key: []model.Datum{model.Prefix(p)}})
	}
	for _, a := range r.cfg.NodePortAddresses {
		if a.IsLoopback() && !(r.cfg.LocalhostNodePorts && r.family == model.IPv4) {
			continue
		}
		es = append(es, model.Element{Set: flatSetNodePortIPs, Key: []model.Datum{model.Addr(a)}})
	}
	return es
}

// sortedGroups are the groups, counts and protocols in use, in group,
// count, then protocol number order.
func sortedGroups(counts map[groupN]int) []groupN {
	return slices.SortedFunc(maps.Keys(counts), compareGroups)
}

func sortGroups(ks []groupN) { slices.SortFunc(ks, compareGroups) }

func compareGroups(a, b groupN) int {
	return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.n, b.n), cmp.Compare(a.proto, b.proto))
}
