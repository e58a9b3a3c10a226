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

// Statements that many rules share, boxed once.
var (
	jumpMarkMasq model.Stmt = model.Jump(chainMarkMasq)
	l4protoMatch            = map[byte]model.Stmt{
		6:   model.Equal{Field: model.L4Proto, Value: model.Proto(6)},
		17:  model.Equal{Field: model.L4Proto, Value: model.Proto(17)},
		132: model.Equal{Field: model.L4Proto, Value: model.Proto(132)},
	}
)

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
// rules, following kube-proxy: the policy chains (cluster, then local),
// the external and firewall chains, then one chain per endpoint.
func (r *renderer) chains(s *ruleset.Service) []chainDef {
	base := ServiceChainBase(s.Name)
	chains := make([]chainDef, 0, 4+len(s.Endpoints))
	masquerade := r.clusterIPMasquerade(s)
	// The endpoints' chain-name bases, hashed once each.
	endpointBases := make([]string, len(s.Endpoints))
	for i := range s.Endpoints {
		endpointBases[i] = EndpointChainBase(s.Name, s.Endpoints[i].AddrPort())
	}
	if len(s.ClusterTargets) > 0 {
		chains = append(chains, r.policyChain(prefixService+base, s, endpointBases, s.ClusterTargets, masquerade, s.Internal == ruleset.RouteCluster))
	}
	if len(s.LocalTargets) > 0 {
		chains = append(chains, r.policyChain(prefixLocal+base, s, endpointBases, s.LocalTargets, masquerade, s.Internal == ruleset.RouteLocal))
	}
	if s.ExternalTraffic.Steered {
		chains = append(chains, r.externalChain(s, base))
	}
	if s.UsesFirewall() {
		chains = append(chains, r.firewallChain(s, base))
	}
	for i := range s.Endpoints {
		chains = append(chains, r.endpointChain(s, s.Endpoints[i].AddrPort(), endpointBases[i]))
	}
	return chains
}

// clusterIPMasquerade is the rule that masquerades traffic to the cluster
// IP as the Service's ClusterIPMasquerade says (all of it, or what comes
// from outside the pod network), in whichever policy chain internal traffic
// reaches; external traffic reaches the same chains, hence the match on the
// cluster IP. nil when nothing is masqueraded there.
func (r *renderer) clusterIPMasquerade(s *ruleset.Service) []model.Stmt {
	toClusterIP := []model.Stmt{
		model.Equal{Field: r.daddr, Value: model.Addr(s.ClusterIP)},
		model.DportEq{Proto: model.ProtoNumber(s.Name.Protocol), Port: s.Port},
	}
	switch s.ClusterIPMasquerade {
	case ruleset.MasqueradeAll:
		return append(toClusterIP, jumpMarkMasq)
	case ruleset.MasqueradeOffCluster:
		return append(toClusterIP, model.AddrIn{Field: r.saddr, Values: r.podNets, Neg: true}, jumpMarkMasq)
	}
	return nil
}

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
		c.rules = append(c.rules, r.newRule("", jumpMarkMasq))
	}
	if ext.ShortCircuit {
		c.rules = append(c.rules,
			r.newRule("masquerade local traffic", model.FibLocal{Saddr: true}, jumpMarkMasq),
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

// endpointChain is the chain of one endpoint, whose EndpointChainBase is
// endpointBase: hairpin masquerade (a pod that reaches itself through the
// Service), the affinity set's update, DNAT.
func (r *renderer) endpointChain(s *ruleset.Service, endpoint netip.AddrPort, endpointBase string) chainDef {
	proto := model.ProtoNumber(s.Name.Protocol)
	c := chainDef{decl: model.Chain{Name: prefixEndpoint + endpointBase}, rules: make([]ruleDef, 0, 3)}
	// The statements of all the chain's rules share one array.
	stmts := append(make([]model.Stmt, 0, 5), model.Equal{Field: r.saddr, Value: model.Addr(endpoint.Addr())}, jumpMarkMasq)
	c.rules = append(c.rules, r.newRule("", stmts[0:2:2]...))
	if s.Affinity.Enabled() {
		stmts = append(stmts, model.UpdateSet{Set: prefixAffinity + endpointBase, Field: r.saddr})
		c.rules = append(c.rules, r.newRule("", stmts[2:3:3]...))
	}
	n := len(stmts)
	stmts = append(stmts, l4protoMatch[proto], model.DNATTo{To: endpoint})
	c.rules = append(c.rules, r.newRule("", stmts[n:n+2:n+2]...))
	return c
}

// policyChain spreads traffic over targets: clients with affinity go back
// to their endpoint, the others to one picked at random. endpointBases
// are the EndpointChainBase of each of s.Endpoints; masquerade is the
// rule that internal traffic reaching this chain starts with, if any.
func (r *renderer) policyChain(name string, s *ruleset.Service, endpointBases []string, targets []ruleset.Target, masquerade []model.Stmt, internal bool) chainDef {
	c := chainDef{decl: model.Chain{Name: name}}
	if internal && masquerade != nil {
		c.rules = append(c.rules, r.newRule("", masquerade...))
	}
	targetBases := make([]string, len(targets))
	targetChains := make([]string, len(targets))
	for i, t := range targets {
		targetBases[i] = endpointBase(s, endpointBases, t.Endpoint)
		targetChains[i] = prefixEndpoint + targetBases[i]
	}
	if s.Affinity.Enabled() {
		for i := range targets {
			set := prefixAffinity + targetBases[i]
			c.rules = append(c.rules, r.newRule("", model.InSet{Key: []model.Expr{r.saddr}, Set: set}, model.Goto(targetChains[i])))
		}
	}
	if len(targets) == 1 {
		// No choice to make: a plain goto spares the kernel an
		// anonymous verdict map.
		c.rules = append(c.rules, r.newRule("", model.Goto(targetChains[0])))
		return c
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
