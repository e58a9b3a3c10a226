package nftables

import (
	"net/netip"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// chainDef is one per-service chain, its declaration and its rules.
type chainDef struct {
	decl  model.Chain
	rules []ruleDef
}

// l4protoMatch are the boxed `meta l4proto` matches that DNAT rules
// start with.
var l4protoMatch = map[byte]model.Stmt{
	6:   model.Equal{Field: model.L4Proto, Value: model.Proto(6)},
	17:  model.Equal{Field: model.L4Proto, Value: model.Proto(17)},
	132: model.Equal{Field: model.L4Proto, Value: model.Proto(132)},
}

// ruleDef is one rule: its statements and comment and, printed once, its
// text.
type ruleDef struct {
	rule model.Rule
	text string
}

// newRule is the rule of stmts, with an optional comment. Its text is
// printed in the renderer's scratch buffer.
func (r *renderer) newRule(comment string, stmts ...model.Stmt) ruleDef {
	ru := model.Rule{Stmts: stmts, Comment: comment}
	r.scratch = ru.AppendText(r.scratch[:0])
	return ruleDef{rule: ru, text: string(r.scratch)}
}

// sameRule reports whether two rules have the same text and comment.
func sameRule(a, b ruleDef) bool { return a.text == b.text && a.rule.Comment == b.rule.Comment }

// writeRules appends the rules of c.
func (r *renderer) writeRules(tx txWriter, c *chainDef) {
	for i := range c.rules {
		tx.write(ruleOp(&c.decl, &c.rules[i]))
	}
}

// addRule appends the rule of stmts, with an optional comment, to chain.
func (r *renderer) addRule(tx txWriter, chain, comment string, stmts ...model.Stmt) {
	ru := r.newRule(comment, stmts...)
	tx.write(ruleOp(chainRef(chain), &ru))
}

func chainsByName(cs []chainDef) map[string]*chainDef {
	m := make(map[string]*chainDef, len(cs))
	for i := range cs {
		m[cs[i].decl.Name] = &cs[i]
	}
	return m
}

// affinitySet is the set of an affinity set, which remembers clients for
// timeout seconds.
func (r *renderer) affinitySet(name string, timeout int32) *model.Set {
	// "dynamic" too: some kernels add it to sets updated from the packet
	// path, and an add without it would then fail.
	return &model.Set{Name: name, KeyType: r.addrType, Dynamic: true, Timeout: time.Duration(timeout) * time.Second}
}

func setsByName(ss []*model.Set) map[string]*model.Set {
	m := make(map[string]*model.Set, len(ss))
	for _, s := range ss {
		m[s.Name] = s
	}
	return m
}

// sameSet reports whether two affinity sets are declared alike.
func sameSet(a, b *model.Set) bool { return a.Name == b.Name && a.Timeout == b.Timeout }

// affinitySets are the per-endpoint sets of a ClientIP-affinity Service
// port, which remember the clients each endpoint has served.
func (r *renderer) affinitySets(s *ruleset.Service) []*model.Set {
	if !s.Affinity.Enabled() {
		return nil
	}
	sets := make([]*model.Set, len(s.Endpoints))
	for i := range s.Endpoints {
		sets[i] = r.affinitySet(prefixAffinity+EndpointChainBase(s.Name, s.Endpoints[i].AddrPort()), s.Affinity.Seconds())
	}
	return sets
}

// chains are the per-service and per-endpoint chains of s, with their
// rules, following kube-proxy 1.37: the policy chains (cluster, then
// local), which DNAT, the external and firewall chains, then, for ClientIP
// affinity only, one chain per endpoint.
func (r *renderer) chains(s *ruleset.Service) []chainDef {
	base := ServiceChainBase(s.Name)
	chains := make([]chainDef, 0, 4+len(s.Endpoints))
	var endpointBases []string
	if s.Affinity.Enabled() {
		// The endpoints' chain-name bases, hashed once each.
		endpointBases = make([]string, len(s.Endpoints))
		for i := range s.Endpoints {
			endpointBases[i] = EndpointChainBase(s.Name, s.Endpoints[i].AddrPort())
		}
	}
	if len(s.ClusterTargets) > 0 {
		chains = append(chains, r.policyChain(prefixService+base, s, endpointBases, s.ClusterTargets))
	}
	if len(s.LocalTargets) > 0 {
		chains = append(chains, r.policyChain(prefixLocal+base, s, endpointBases, s.LocalTargets))
	}
	if s.ExternalTraffic.Steered {
		chains = append(chains, r.externalChain(s, base))
	}
	if s.UsesFirewall() {
		chains = append(chains, r.firewallChain(s, base))
	}
	for i := range endpointBases {
		chains = append(chains, r.endpointChain(s, s.Endpoints[i].AddrPort(), endpointBases[i]))
	}
	return chains
}

// markMasq sets the masquerade bit in the packet mark, as kube-proxy
// writes it (`mark set mark or 0x00004000`).
func (r *renderer) markMasq() model.Stmt { return model.MarkOr{Bits: r.cfg.Mark(), Keywords: true} }

// externalChain is the chain of NodePort, externalIP and load-balancer
// traffic, from the Service's ExternalTraffic: the short-circuit of pod
// traffic to the cluster chain, the masquerade of all traffic, the
// masquerade and short-circuit of the node's own traffic, then the External
// route's chain.
func (r *renderer) externalChain(s *ruleset.Service, base string) chainDef {
	clusterChain := prefixService + base
	c := chainDef{decl: model.Chain{Name: prefixExternal + base}}
	ext := s.ExternalTraffic
	if ext.ShortCircuit && len(r.podNets) > 0 {
		c.rules = append(c.rules, r.newRule("short-circuit pod traffic", model.AddrIn{Field: r.saddr, Values: r.podNets}, model.Goto(clusterChain)))
	}
	if ext.Masquerade {
		c.rules = append(c.rules, r.newRule("masquerade", r.markMasq()))
	}
	if ext.ShortCircuit {
		c.rules = append(c.rules,
			r.newRule("masquerade local traffic", model.FibLocal{Saddr: true}, r.markMasq()),
			r.newRule("short-circuit local traffic", model.FibLocal{Saddr: true}, model.Goto(clusterChain)))
	}
	switch s.External {
	case ruleset.RouteCluster:
		c.rules = append(c.rules, r.newRule("", model.Goto(clusterChain)))
	case ruleset.RouteLocal:
		c.rules = append(c.rules, r.newRule("", model.Goto(prefixLocal+base)))
	}
	return c
}

// firewallChain drops load-balancer traffic from outside the port's
// source ranges (and, when the Ruleset allows it, the node's own traffic
// to its load-balancer IPs).
func (r *renderer) firewallChain(s *ruleset.Service, base string) chainDef {
	sources := make([]model.Datum, 0, len(s.LoadBalancerSourceRanges))
	for _, p := range s.LoadBalancerSourceRanges {
		sources = append(sources, model.Network(p))
	}
	if s.FirewallAllowsNode {
		for _, ip := range s.LoadBalancerIPs {
			sources = append(sources, model.Addr(ip))
		}
	}
	return chainDef{
		decl:  model.Chain{Name: prefixFirewall + base},
		rules: []ruleDef{r.newRule("", model.AddrIn{Field: r.saddr, Values: sources, Braces: true, Neg: true}, model.Drop)},
	}
}

// endpointChain is the chain of one endpoint of a ClientIP-affinity
// Service port, whose EndpointChainBase is endpointBase: the affinity set's
// update, DNAT.
func (r *renderer) endpointChain(s *ruleset.Service, endpoint netip.AddrPort, endpointBase string) chainDef {
	proto := model.ProtoNumber(s.Name.Protocol)
	return chainDef{decl: model.Chain{Name: prefixEndpoint + endpointBase}, rules: []ruleDef{
		r.newRule("", model.UpdateSet{Set: prefixAffinity + endpointBase, Field: r.saddr}),
		r.newRule("", l4protoMatch[proto], model.DNATTo{To: endpoint}),
	}}
}

// policyChain spreads traffic over targets. Without affinity it DNATs
// there itself: to the one target, or to one picked at random through an
// anonymous map. With ClientIP affinity, clients with affinity go back to
// their endpoint's chain, the others to one picked at random; endpointBases
// are then the EndpointChainBase of each of s.Endpoints.
func (r *renderer) policyChain(name string, s *ruleset.Service, endpointBases []string, targets []ruleset.Target) chainDef {
	c := chainDef{decl: model.Chain{Name: name}}
	if !s.Affinity.Enabled() {
		proto := l4protoMatch[model.ProtoNumber(s.Name.Protocol)]
		if len(targets) == 1 {
			// One target: no map to insert, as kube-proxy writes it.
			c.rules = append(c.rules, r.newRule("", proto, model.DNATTo{To: targets[0].Endpoint}))
			return c
		}
		to := make([]netip.AddrPort, len(targets))
		for i, t := range targets {
			to[i] = t.Endpoint
		}
		c.rules = append(c.rules, r.newRule("", proto, model.NumgenDNAT{Family: r.tableRef.Family, Targets: to}))
		return c
	}
	targetChains := make([]string, len(targets))
	for i, t := range targets {
		base := endpointBase(s, endpointBases, t.Endpoint)
		targetChains[i] = prefixEndpoint + base
		c.rules = append(c.rules, r.newRule("", model.InSet{Key: []model.Expr{r.saddr}, Set: prefixAffinity + base}, model.Goto(targetChains[i])))
	}
	c.rules = append(c.rules, r.newRule("", model.NumgenGoto{Chains: targetChains}))
	return c
}

// endpointBase is the EndpointChainBase of ep, taken from endpointBases
// (those of s.Endpoints, which hold every target's endpoint) when ep is
// there.
func endpointBase(s *ruleset.Service, endpointBases []string, ep netip.AddrPort) string {
	i, found := slices.BinarySearchFunc(s.Endpoints, ep, func(e endpoints.Endpoint, t netip.AddrPort) int { return e.AddrPort().Compare(t) })
	if !found {
		return EndpointChainBase(s.Name, ep)
	}
	return endpointBases[i]
}
