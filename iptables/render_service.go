package iptables

import (
	"strconv"

	"github.com/svcproxy/svcproxy/ruleset"
)

// serviceChains writes the rules of a ServicePort's own chains.
func (r *renderer) serviceChains(p *plan) {
	if p.externalChain != "" {
		r.externalRules(p)
	}
	if p.firewallChain != "" {
		r.firewallChainRules(p)
	}
	if p.clusterChain != "" {
		r.targets(p, p.clusterChain, p.service.ClusterTargets, p.internalChain == p.clusterChain)
	}
	if p.localChain != "" {
		r.targets(p, p.localChain, p.service.LocalTargets, p.internalChain == p.localChain)
	}
	r.endpointChainRules(p)
}

// externalRules writes the external chain, from the Service's
// ExternalTraffic: the short-circuit of pod traffic to the cluster chain,
// the masquerade of all traffic, the masquerade and short-circuit of the
// node's own traffic, then the External route's chain.
func (r *renderer) externalRules(p *plan) {
	s := p.service
	ext := s.ExternalTraffic
	if ext.ShortCircuit {
		for _, cidr := range r.cfg.ClusterCIDRs {
			r.rule(p.externalChain)
			r.comment("pod traffic for ", p.portName, " external destinations")
			r.str(" -s ")
			r.prefix(cidr)
			r.jump(p.clusterChain)
		}
	}
	if ext.Masquerade {
		r.rule(p.externalChain)
		r.comment("masquerade traffic for ", p.portName, " external destinations")
		r.jump(r.names.MarkMasq())
	}
	if ext.ShortCircuit {
		r.rule(p.externalChain)
		r.comment("masquerade LOCAL traffic for ", p.portName, " external destinations")
		r.str(" -m addrtype --src-type LOCAL")
		r.jump(r.names.MarkMasq())
		r.rule(p.externalChain)
		r.comment("route LOCAL traffic for ", p.portName, " external destinations")
		r.str(" -m addrtype --src-type LOCAL")
		r.jump(p.clusterChain)
	}
	switch s.External {
	case ruleset.RouteCluster:
		r.rule(p.externalChain)
		r.jump(p.clusterChain)
	case ruleset.RouteLocal:
		r.rule(p.externalChain)
		r.jump(p.localChain)
	}
}

// firewallChainRules writes the firewall chain: traffic from the source
// ranges (and from the load-balancer IPs when the node is allowed) goes on
// to the external chain; the rest falls through to be dropped in
// KUBE-PROXY-FIREWALL.
func (r *renderer) firewallChainRules(p *plan) {
	s := p.service
	for _, src := range s.LoadBalancerSourceRanges {
		r.rule(p.firewallChain)
		r.comment(p.portName, " loadbalancer IP")
		r.str(" -s ")
		r.prefix(src)
		r.jump(p.externalChain)
	}
	if s.FirewallAllowsNode {
		for _, ip := range s.LoadBalancerIPs {
			r.rule(p.firewallChain)
			r.comment(p.portName, " loadbalancer IP")
			r.str(" -s ")
			r.addr(ip)
			r.jump(p.externalChain)
		}
	}
	r.rule(p.firewallChain)
	r.comment("other traffic to ", p.portName, " will be dropped by ", r.names.ProxyFirewall())
	r.str("\n")
}

// endpointChainRules writes each endpoint's chain: hairpin masquerade, then
// DNAT (recording the client for ClientIP affinity). Their comments, as
// those of the rules that jump to the endpoint chains, are left out in
// large-cluster mode (endpointComment).
func (r *renderer) endpointChainRules(p *plan) {
	chains := p.endpointChains()
	for i, ep := range p.endpoints {
		r.rule(chains[i])
		r.endpointComment(p.portName)
		r.str(" -s ")
		r.addr(ep.Addr())
		r.jump(r.names.MarkMasq())
		r.rule(chains[i])
		r.endpointComment(p.portName)
		if p.service.Affinity.Enabled() {
			r.str(" -m recent --name " + chains[i] + " --set")
		}
		r.proto(p.proto)
		r.str(" -j DNAT --to-destination ")
		r.addrPort(ep)
		r.str("\n")
	}
}

// targets writes a policy chain (KUBE-SVC- or KUBE-SVL-): the masquerade
// rule for cluster-IP traffic when it is the internal chain, the affinity
// checks, then one rule per target, target i of N taken with probability
// 1/(N−i) (ruleset.Probability), the last unconditionally.
func (r *renderer) targets(p *plan, chain string, ts []ruleset.Target, internal bool) {
	if internal && p.service.ClusterIP.IsValid() {
		r.clusterIPMasquerade(p, chain)
	}
	if p.service.Affinity.Enabled() {
		r.affinityChecks(p, chain, ts)
	}
	for i, t := range ts {
		r.rule(chain)
		r.endpointComment(p.portName, " -> ", addrPortString(t.Endpoint))
		if remaining := len(ts) - i; remaining > 1 {
			r.str(" -m statistic --mode random --probability ")
			r.str(r.probability(remaining))
		}
		r.jump(p.endpointChainOf(t.Endpoint))
	}
}

// clusterIPMasquerade writes the rule of chain that marks cluster-IP
// traffic for masquerading, as the Service's ClusterIPMasquerade says: all
// of it, or what does not come from the cluster CIDRs.
func (r *renderer) clusterIPMasquerade(p *plan, chain string) {
	n := r.names
	switch p.service.ClusterIPMasquerade {
	case ruleset.MasqueradeAll:
		r.clusterIPRule(p, chain)
		r.jump(n.MarkMasq())
	case ruleset.MasqueradeOffCluster:
		r.clusterIPRule(p, chain)
		if cidrs := r.cfg.ClusterCIDRs; len(cidrs) == 1 {
			r.str(" ! -s ")
			r.prefix(cidrs[0])
			r.jump(n.MarkMasq())
		} else {
			r.jump(n.MasqNonPod())
		}
	}
}

// affinityChecks writes, for ClientIP affinity, one rule per target that
// sends a client seen within the timeout back to the same endpoint.
func (r *renderer) affinityChecks(p *plan, chain string, ts []ruleset.Target) {
	mask := " --mask 255.255.255.255"
	if r.v6 {
		mask = " --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	secs := strconv.Itoa(int(p.service.Affinity.Seconds()))
	for _, t := range ts {
		endpointChain := p.endpointChainOf(t.Endpoint)
		r.rule(chain)
		r.endpointComment(p.portName, " -> ", addrPortString(t.Endpoint))
		r.str(" -m recent --name " + endpointChain + mask + " --rcheck --seconds " + secs + " --reap")
		r.jump(endpointChain)
	}
}

func (r *renderer) clusterIPRule(p *plan, chain string) {
	r.rule(chain)
	r.comment(p.portName, " cluster IP")
	r.proto(p.proto)
	r.dst(p.service.ClusterIP, p.service.Port)
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
