package nftables

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// The base chains, as kube-proxy (1.34 and later) hooks them: the
// source-range firewall before DNAT, on the Service addresses; the
// endpoint and cluster-IP checks at filter priority, after DNAT, so that
// traffic DNATed to an endpoint (a short-circuit, say) is not refused by
// the entry of the address it was sent to; DNAT and SNAT.
type baseChain struct {
	name     string
	kind     knftables.BaseChainType
	hook     knftables.BaseChainHook
	priority knftables.BaseChainPriority
}

var baseChains = [...]baseChain{
	{chainFilterPreroutingPre, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"},
	{chainFilterOutputPre, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"},
	{chainFilterInput, knftables.FilterType, knftables.InputHook, knftables.FilterPriority},
	{chainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority},
	{chainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.FilterPriority},
	{chainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority},
	{chainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority},
	{chainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority},
}

// fixedChains are the regular chains every table has.
var fixedChains = []string{
	chainServices, chainServiceEPCheck, chainNodePortEPCheck, chainClusterIPsCheck,
	chainFirewallCheck, chainReject, chainMarkMasq, chainMasquerading,
}

// jumps are the rules of the base chains: jumps, of new connections only
// when newOnly.
var jumps = []struct {
	from    string
	newOnly bool
	to      string
}{
	// reject only works in input, forward and output before kernel 5.9.
	{chainFilterInput, true, chainNodePortEPCheck},
	{chainFilterInput, true, chainServiceEPCheck},
	{chainFilterForward, true, chainServiceEPCheck},
	{chainFilterOutput, true, chainServiceEPCheck},
	{chainFilterPreroutingPre, true, chainFirewallCheck},
	{chainFilterOutputPre, true, chainFirewallCheck},
	{chainNATOutput, false, chainServices},
	{chainNATPrerouting, false, chainServices},
	{chainNATPostrouting, false, chainMasquerading},
	{chainFilterForward, true, chainClusterIPsCheck},
	{chainFilterOutput, true, chainClusterIPsCheck},
}

func (r *renderer) fixedSetsAndMaps() []string {
	names := []string{setClusterIPs, mapNoEndpointServices, mapNoEndpointNodePorts, mapFirewallIPs, mapServiceIPs, mapServiceNodePorts}
	if len(r.cfg.NodePortAddresses) > 0 {
		names = append(names, setNodePortIPs)
	}
	return names
}

// fixed adds the table and everything in it that does not depend on the
// Services. mayExist says which chains may already be in the table. The
// maps and the cluster-ips set are flushed, unless keepElements.
func (r *renderer) fixed(tx txWriter, mayExist func(chain string) bool, keepElements bool) {
	comment := defaultTableDescription
	if r.table != DefaultTable {
		comment = "Service proxy rules"
	}
	tx.Add(&knftables.Table{Family: r.family, Name: r.table, Comment: &comment})
	r.addFixedChains(tx, mayExist)
	r.addFixedContainers(tx, keepElements)
	r.addFixedRules(tx)
	r.addNodePortRules(tx)
}

// addFixedChains adds the base chains, deleted first when they may exist (so
// that a changed hook or priority applies: nft refuses to change them on
// an existing chain), and the regular fixed chains, flushed.
func (r *renderer) addFixedChains(tx txWriter, mayExist func(chain string) bool) {
	for _, bc := range baseChains {
		if mayExist(bc.name) {
			tx.Add(r.chain(bc.name))
			tx.Delete(r.chain(bc.name))
		}
		c := r.chain(bc.name)
		c.Type, c.Hook, c.Priority = ptr(bc.kind), ptr(bc.hook), ptr(bc.priority)
		tx.Add(c)
	}
	for _, name := range fixedChains {
		c := r.chain(name)
		if name == chainReject {
			c.Comment = ptr("helper for @no-endpoint-services / @no-endpoint-nodeports")
		}
		tx.Add(c)
		tx.Flush(r.chain(name))
	}
}

// addFixedContainers adds the maps and sets, flushed unless keepElements
// (nodeport-ips, whose elements come from the Config, always).
func (r *renderer) addFixedContainers(tx txWriter, keepElements bool) {
	addMap := func(name, typ, comment string) {
		tx.Add(&knftables.Map{Family: r.family, Table: r.table, Name: name, Type: typ, Comment: &comment})
		if !keepElements {
			tx.Flush(&knftables.Map{Family: r.family, Table: r.table, Name: name})
		}
	}
	addSet := func(name, comment string, flush bool) {
		tx.Add(&knftables.Set{Family: r.family, Table: r.table, Name: name, Type: r.addrType, Comment: &comment})
		if flush {
			tx.Flush(&knftables.Set{Family: r.family, Table: r.table, Name: name})
		}
	}
	addrProtoPort := r.addrType + " . inet_proto . inet_service : verdict"
	addSet(setClusterIPs, "Active ClusterIPs", !keepElements)
	if len(r.cfg.NodePortAddresses) > 0 {
		addSet(setNodePortIPs, "IPs that accept NodePort traffic", true)
	}
	addMap(mapNoEndpointServices, addrProtoPort, "vmap to drop or reject packets to services with no endpoints")
	addMap(mapNoEndpointNodePorts, "inet_proto . inet_service : verdict", "vmap to drop or reject packets to service nodeports with no endpoints")
	addMap(mapFirewallIPs, addrProtoPort, "destinations that are subject to LoadBalancerSourceRanges")
	addMap(mapServiceIPs, addrProtoPort, "ClusterIP, ExternalIP and LoadBalancer IP traffic")
	addMap(mapServiceNodePorts, "inet_proto . inet_service : verdict", "NodePort traffic")
}

// addFixedRules adds the rules of the fixed chains but the node-port ones:
// the jumps from the base chains, masquerading, the cluster IP checks and
// the map lookups.
func (r *renderer) addFixedRules(tx txWriter) {
	for _, j := range jumps {
		if j.newOnly {
			r.addRule(tx, j.from, "", model.CtNew{}, model.Jump(j.to))
		} else {
			r.addRule(tx, j.from, "", model.Jump(j.to))
		}
	}

	mark := r.cfg.Mark()
	r.addRule(tx, chainMarkMasq, "", model.MarkOr{Bits: mark, Keywords: true})
	r.addRule(tx, chainMasquerading, "", model.MarkClear{Bits: mark, Keywords: true}, model.Return)
	r.addRule(tx, chainMasquerading, "", model.MarkXor{Bits: mark, Keywords: true})
	r.addRule(tx, chainMasquerading, "", model.Masquerade{})

	r.addRule(tx, chainClusterIPsCheck, "Reject traffic to invalid ports of ClusterIPs",
		model.InSet{Key: []model.Expr{r.daddr}, Set: setClusterIPs}, model.Reject)
	if len(r.cfg.ServiceCIDRs) > 0 {
		cidrs := make([]model.Datum, len(r.cfg.ServiceCIDRs))
		for i, p := range r.cfg.ServiceCIDRs {
			cidrs[i] = model.Network(p)
		}
		r.addRule(tx, chainClusterIPsCheck, "Drop traffic to unallocated ClusterIPs",
			model.AddrIn{Field: r.daddr, Values: cidrs, Braces: true}, model.Drop)
	}

	r.addRule(tx, chainReject, "", model.Reject)
	frontend := []model.Expr{r.daddr, model.L4Proto, model.THDport}
	r.addRule(tx, chainServiceEPCheck, "", model.VmapLookup{Key: frontend, Map: mapNoEndpointServices})
	r.addRule(tx, chainFirewallCheck, "", model.VmapLookup{Key: frontend, Map: mapFirewallIPs})
	r.addRule(tx, chainServices, "", model.VmapLookup{Key: frontend, Map: mapServiceIPs})
}

// addNodePortRules adds the node-port lookups: on the listed node addresses
// (the elements of nodeport-ips), or on every local address except
// (unless asked) localhost.
func (r *renderer) addNodePortRules(tx txWriter) {
	var nodeDest, nodeDestLocal []model.Stmt
	switch {
	case len(r.cfg.NodePortAddresses) > 0:
		nodeDest = []model.Stmt{model.InSet{Key: []model.Expr{r.daddr}, Set: setNodePortIPs}}
		nodeDestLocal = nodeDest
	case r.localhostNodePorts():
		nodeDestLocal = []model.Stmt{model.FibLocal{}}
	default:
		nodeDest = []model.Stmt{model.AddrIn{Field: r.daddr, Values: []model.Datum{r.localhost}, Neg: true}}
		nodeDestLocal = append([]model.Stmt{model.FibLocal{}}, nodeDest...)
	}
	nodePort := []model.Expr{model.L4Proto, model.THDport}
	r.addRule(tx, chainNodePortEPCheck, "", append(slices.Clone(nodeDest), model.VmapLookup{Key: nodePort, Map: mapNoEndpointNodePorts})...)
	r.addRule(tx, chainServices, "", append(slices.Clone(nodeDestLocal), model.VmapLookup{Key: nodePort, Map: mapServiceNodePorts})...)

	for _, a := range r.cfg.NodePortAddresses {
		if a.IsLoopback() && !r.localhostNodePorts() {
			continue
		}
		tx.Add(&knftables.Element{Family: r.family, Table: r.table, Set: setNodePortIPs, Key: []string{a.String()}})
	}
}

// localhostNodePorts reports whether NodePorts are served on localhost:
// only for IPv4, when the Config asks for it.
func (r *renderer) localhostNodePorts() bool {
	return r.cfg.LocalhostNodePorts && r.cfg.Family == v1.IPv4Protocol
}
