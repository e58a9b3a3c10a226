package iptables

import (
	"bytes"
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// renderOptions says what a render writes besides the top-level chains and
// the chains of the plans marked for rewriting.
type renderOptions struct {
	// stale are nat chains to flush and delete; none of the plans'
	// chains is among them.
	stale []string
	// listTables starts each table with a "-S" line (see listLine).
	listTables bool
	// canary writes the Canary chain, empty, in filter, nat and mangle,
	// as kube-proxy's iptables mode has it.
	canary bool
	// kernel is what the rules may use of the kernel.
	kernel Kernel
	// serviceRules, when not nil, receives the number of rules of each
	// rewritten plan's own chains.
	serviceRules map[servicemap.PortName]int
}

// renderer accumulates the text of one render.
type renderer struct {
	names Names
	cfg   ruleset.Config
	v6    bool
	mark  string // the masquerade mark, "0x4000"
	b     []byte
	probs []string // probs[n] is the --probability text for 1/n
	// kernel is renderOptions.kernel, for the render under way.
	kernel Kernel
	// largeCluster leaves the comments out of the per-endpoint rules
	// (endpointComment), as kube-proxy's large-cluster mode does.
	largeCluster bool
	// owns reports whether a Service owns a frontend
	// (ruleset.Ruleset.Owns): a frontend's rules are written for its owner
	// alone. Only the rendering of the top-level chains asks.
	owns func(*ruleset.Service, ruleset.Frontend) bool
}

// ownsAddr reports whether p's Service owns its frontend of kind at addr
// (with its port).
func (r *renderer) ownsAddr(p *plan, kind ruleset.FrontendKind, addr netip.Addr) bool {
	return r.owns(p.service, ruleset.Frontend{Kind: kind, Addr: addr, Protocol: p.service.Name.Protocol, Port: p.service.Port})
}

// ownsNodePort reports whether p's Service owns its node port.
func (r *renderer) ownsNodePort(p *plan) bool {
	return r.owns(p.service, ruleset.Frontend{Kind: ruleset.KindNodePort, Protocol: p.service.Name.Protocol, Port: p.service.NodePort})
}

// largeClusterEndpoints is kube-proxy's threshold: with more endpoints
// than this (Ruleset.ListedEndpoints), its iptables mode is in large-cluster
// mode.
const largeClusterEndpoints = 1000

// isLargeCluster reports whether kube-proxy's iptables mode would be in
// large-cluster mode for rs, which leaves the comments out of the rules
// that grow with the number of endpoints.
func isLargeCluster(rs *ruleset.Ruleset) bool { return rs.ListedEndpoints() > largeClusterEndpoints }

func newRenderer(names Names, cfg ruleset.Config) *renderer {
	return &renderer{
		names: names,
		cfg:   cfg,
		v6:    cfg.Family == v1.IPv6Protocol,
		mark:  "0x" + strconv.FormatUint(uint64(cfg.Mark()), 16),
	}
}

// listLine lists the table before it is restored, with a comment for the
// operator who reads a dry run.
const listLine = "# -S lists the table first: it keeps the iptables-nft --noflush restore linear (see package iptables)\n-S\n"

// render writes both tables: the top-level chains in full, the chains of
// the plans marked for rewriting, and what opts adds.
func (r *renderer) render(plans []plan, opts renderOptions) []byte {
	perLine := 112 // about 110 bytes a line (up to ~250)
	if r.largeCluster {
		perLine = 80 // about 77 without the endpoint rules' comments
	}
	r.b = make([]byte, 0, perLine*estimateLines(plans, opts))
	r.kernel = opts.kernel
	r.filterTable(plans, opts)
	r.natTable(plans, opts)
	if opts.canary {
		r.str("*mangle\n")
		r.canaryChain()
		r.str("COMMIT\n")
	}
	return r.b
}

// estimateLines is about how many lines a render writes.
func estimateLines(plans []plan, opts renderOptions) int {
	lines := 64 + len(opts.stale)
	for i := range plans {
		p := &plans[i]
		if p.rewrite {
			lines += 3*len(p.endpoints) + len(p.service.ClusterTargets) + len(p.service.LocalTargets) + 8
		} else {
			lines += 3
		}
	}
	return lines
}

// filterTable writes the filter table: the rejects and drops of Services
// without (local) endpoints, the load-balancer firewall, health-check node
// ports and KUBE-FORWARD.
func (r *renderer) filterTable(plans []plan, opts renderOptions) {
	n := r.names
	r.str("*filter\n")
	if opts.listTables {
		r.str(listLine)
	}
	for _, c := range n.FilterChains() {
		r.declare(c)
	}
	if opts.canary {
		r.canaryChain()
	}
	if !r.v6 && r.cfg.LocalhostNodePorts {
		// route_localnet, which localhost node ports need, lets packets
		// to 127.0.0.0/8 in from outside: drop those not translated,
		// on input and on output, as kube-proxy does.
		r.rule(n.Firewall())
		r.comment("block incoming localnet connections")
		r.str(" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n")
	}
	for i := range plans {
		r.internalVerdictRule(&plans[i])
	}
	for i := range plans {
		r.externalVerdictRules(&plans[i])
	}
	for i := range plans {
		r.firewallDropRules(&plans[i])
	}
	for i := range plans {
		r.healthCheckRule(&plans[i])
	}
	r.forwardRules()
	r.str("COMMIT\n")
}

// internalVerdictRule rejects or drops cluster-IP traffic in filter
// KUBE-SERVICES when p has no chain for it.
func (r *renderer) internalVerdictRule(p *plan) {
	if p.internalVerdict == "" || !p.service.ClusterIP.IsValid() || !r.ownsAddr(p, ruleset.KindClusterIP, p.service.ClusterIP) {
		return
	}
	r.rule(r.names.Services())
	r.comment(p.portName, verdictComment(p.internalVerdict))
	r.proto(p.proto)
	r.dst(p.service.ClusterIP, p.service.Port)
	r.jump(p.internalVerdict)
}

// externalVerdictRules reject or drop, in KUBE-EXTERNAL-SERVICES, the
// traffic to p's external IPs, load-balancer IPs and node port that the
// external chain does not take.
func (r *renderer) externalVerdictRules(p *plan) {
	if p.externalVerdict == "" {
		return
	}
	n := r.names
	kinds := [...]ruleset.FrontendKind{ruleset.KindExternalIP, ruleset.KindLoadBalancerIP}
	for i, ips := range [][]netip.Addr{p.service.ExternalIPs, p.service.LoadBalancerIPs} {
		for _, ip := range ips {
			if !r.ownsAddr(p, kinds[i], ip) {
				continue
			}
			r.rule(n.ExternalServices())
			r.comment(p.portName, verdictComment(p.externalVerdict))
			r.proto(p.proto)
			r.dst(ip, p.service.Port)
			r.jump(p.externalVerdict)
		}
	}
	if p.service.NodePort != 0 && r.ownsNodePort(p) {
		r.rule(n.ExternalServices())
		r.comment(p.portName, verdictComment(p.externalVerdict))
		r.str(" -m addrtype --dst-type LOCAL")
		r.proto(p.proto)
		r.dport(p.service.NodePort)
		r.jump(p.externalVerdict)
	}
}

// firewallDropRules drop, in KUBE-PROXY-FIREWALL, the load-balancer
// traffic p's firewall chain did not accept.
func (r *renderer) firewallDropRules(p *plan) {
	if p.firewallChain == "" {
		return
	}
	for _, ip := range p.service.LoadBalancerIPs {
		if !r.ownsAddr(p, ruleset.KindLoadBalancerIP, ip) {
			continue
		}
		r.rule(r.names.ProxyFirewall())
		r.comment(p.portName, " traffic not accepted by ", p.firewallChain)
		r.proto(p.proto)
		r.dst(ip, p.service.Port)
		r.jump("DROP")
	}
}

// healthCheckRule accepts p's health-check node port in filter
// KUBE-NODEPORTS.
func (r *renderer) healthCheckRule(p *plan) {
	if p.service.HealthCheckNodePort == 0 {
		return
	}
	r.rule(r.names.NodePorts())
	r.comment(p.portName, " health check node port")
	r.proto("tcp")
	r.dport(p.service.HealthCheckNodePort)
	r.jump("ACCEPT")
}

// forwardRules writes KUBE-FORWARD. INVALID packets, which would reset
// connections, are dropped unless conntrack is liberal (kube-proxy's
// issues 74839 and 117924).
func (r *renderer) forwardRules() {
	n := r.names
	if !r.kernel.TCPBeLiberal {
		r.rule(n.Forward())
		r.str(" -m conntrack --ctstate INVALID")
		if r.kernel.InvalidDroppedCounter {
			r.nfacct(CounterInvalidDropped)
		}
		r.jump("DROP")
	}
	r.rule(n.Forward())
	r.comment("kubernetes forwarding rules")
	r.str(" -m mark --mark " + r.mark + "/" + r.mark + " -j ACCEPT\n")
	r.rule(n.Forward())
	r.comment("kubernetes forwarding conntrack rule")
	r.str(" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n")
}

// canaryChain declares the Canary chain, which holds no rule.
func (r *renderer) canaryChain() { r.declare(r.names.Canary()) }

func verdictComment(verdict string) string {
	if verdict == "DROP" {
		return " has no local endpoints"
	}
	return " has no endpoints"
}

// natTable writes the nat table: the top-level chains, the chains of the
// plans marked for rewriting, and the stale chains flushed and deleted.
func (r *renderer) natTable(plans []plan, opts renderOptions) {
	r.str("*nat\n")
	if opts.listTables {
		r.str(listLine)
	}
	r.natDeclarations(plans, opts.stale)
	if opts.canary {
		r.canaryChain()
	}
	r.masqueradeRules()
	for i := range plans {
		r.serviceRules(&plans[i])
	}
	r.nodePortsJump()
	for i := range plans {
		r.nodePortRule(&plans[i])
	}
	for i := range plans {
		if plans[i].rewrite {
			start := len(r.b)
			r.serviceChains(&plans[i])
			if opts.serviceRules != nil {
				opts.serviceRules[plans[i].service.Name] = bytes.Count(r.b[start:], []byte("\n"))
			}
		}
	}
	for _, c := range opts.stale {
		r.str("-X " + c + "\n")
	}
	r.str("COMMIT\n")
}

// natDeclarations declares (creates or flushes) the top-level nat chains,
// the chains of the plans marked for rewriting and the stale chains.
func (r *renderer) natDeclarations(plans []plan, stale []string) {
	n := r.names
	for _, c := range n.NATChains() {
		if c == n.MasqNonPod() && len(r.cfg.ClusterCIDRs) <= 1 {
			continue
		}
		r.declare(c)
	}
	for i := range plans {
		if plans[i].rewrite {
			for _, c := range plans[i].chains() {
				r.declare(c)
			}
		}
	}
	for _, c := range stale {
		r.declare(c)
	}
}

// masqueradeRules writes KUBE-POSTROUTING, KUBE-MARK-MASQ and, with more
// than one cluster CIDR, KUBE-MASQ-NONPOD.
func (r *renderer) masqueradeRules() {
	n := r.names
	r.rule(n.Postrouting())
	r.str(" -m mark ! --mark " + r.mark + "/" + r.mark + " -j RETURN\n")
	r.rule(n.Postrouting())
	r.str(" -j MARK --xor-mark " + r.mark + "\n")
	r.rule(n.Postrouting())
	r.comment("kubernetes service traffic requiring SNAT")
	r.str(" -j MASQUERADE --random-fully\n")
	r.rule(n.MarkMasq())
	r.str(" -j MARK --or-mark " + r.mark + "\n")
	if len(r.cfg.ClusterCIDRs) <= 1 {
		return
	}
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

// serviceRules writes p's rules in nat KUBE-SERVICES: its cluster IP, its
// external IPs and its load-balancer IPs.
func (r *renderer) serviceRules(p *plan) {
	n := r.names
	s := p.service
	if p.internalChain != "" && s.ClusterIP.IsValid() && r.ownsAddr(p, ruleset.KindClusterIP, s.ClusterIP) {
		r.rule(n.Services())
		r.comment(p.portName, " cluster IP")
		r.proto(p.proto)
		r.dst(s.ClusterIP, s.Port)
		r.jump(p.internalChain)
	}
	if p.externalChain == "" {
		return
	}
	for _, ip := range s.ExternalIPs {
		if !r.ownsAddr(p, ruleset.KindExternalIP, ip) {
			continue
		}
		r.rule(n.Services())
		r.comment(p.portName, " external IP")
		r.proto(p.proto)
		r.dst(ip, s.Port)
		r.jump(p.externalChain)
	}
	loadBalancerChain := p.externalChain
	if p.firewallChain != "" {
		loadBalancerChain = p.firewallChain
	}
	for _, ip := range s.LoadBalancerIPs {
		if !r.ownsAddr(p, ruleset.KindLoadBalancerIP, ip) {
			continue
		}
		r.rule(n.Services())
		r.comment(p.portName, " loadbalancer IP")
		r.proto(p.proto)
		r.dst(ip, s.Port)
		r.jump(loadBalancerChain)
	}
}

// nodePortsJump writes the last rules of nat KUBE-SERVICES: node-port
// traffic, to a local address or to one of the NodePort addresses, goes on
// to KUBE-NODEPORTS; with Config.NoNodePortAddresses, nothing does.
func (r *renderer) nodePortsJump() {
	const comment = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
	n := r.names
	if len(r.cfg.NodePortAddresses) == 0 && !r.cfg.NoNodePortAddresses {
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

// nodePortRule sends p's node port to its external chain in nat
// KUBE-NODEPORTS; with the localhost counter, first from 127.0.0.0/8
// through it, as kube-proxy does.
func (r *renderer) nodePortRule(p *plan) {
	if p.externalChain == "" || p.service.NodePort == 0 || !r.ownsNodePort(p) {
		return
	}
	if !r.v6 && r.cfg.LocalhostNodePorts && r.kernel.LocalhostNodePortsCounter {
		r.rule(r.names.NodePorts())
		r.comment(p.portName)
		r.proto(p.proto)
		r.str(" -d 127.0.0.0/8")
		r.dport(p.service.NodePort)
		r.nfacct(CounterLocalhostNodePorts)
		r.jump(p.externalChain)
	}
	r.rule(r.names.NodePorts())
	r.comment(p.portName)
	r.proto(p.proto)
	r.dport(p.service.NodePort)
	r.jump(p.externalChain)
}
