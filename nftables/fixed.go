package nftables

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
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

// jumps are the rules of the base chains.
var jumps = []struct{ from, match, to string }{
	// reject only works in input, forward and output before kernel 5.9.
	{chainFilterInput, "ct state new", chainNodePortEPCheck},
	{chainFilterInput, "ct state new", chainServiceEPCheck},
	{chainFilterForward, "ct state new", chainServiceEPCheck},
	{chainFilterOutput, "ct state new", chainServiceEPCheck},
	{chainFilterPreroutingPre, "ct state new", chainFirewallCheck},
	{chainFilterOutputPre, "ct state new", chainFirewallCheck},
	{chainNATOutput, "", chainServices},
	{chainNATPrerouting, "", chainServices},
	{chainNATPostrouting, "", chainMasquerading},
	{chainFilterForward, "ct state new", chainClusterIPsCheck},
	{chainFilterOutput, "ct state new", chainClusterIPsCheck},
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
		rule := "jump " + j.to
		if j.match != "" {
			rule = j.match + " " + rule
		}
		tx.Add(r.rule(j.from, rule, ""))
	}

	tx.Add(r.rule(chainMarkMasq, "mark set mark or "+r.mark, ""))
	tx.Add(r.rule(chainMasquerading, "mark and "+r.mark+" == 0 return", ""))
	tx.Add(r.rule(chainMasquerading, "mark set mark xor "+r.mark, ""))
	tx.Add(r.rule(chainMasquerading, "masquerade fully-random", ""))

	tx.Add(r.rule(chainClusterIPsCheck, r.ipX+" daddr @"+setClusterIPs+" reject", "Reject traffic to invalid ports of ClusterIPs"))
	if len(r.cfg.ServiceCIDRs) > 0 {
		cidrs := make([]string, len(r.cfg.ServiceCIDRs))
		for i, p := range r.cfg.ServiceCIDRs {
			cidrs[i] = p.Masked().String()
		}
		tx.Add(r.rule(chainClusterIPsCheck, r.ipX+" daddr { "+strings.Join(cidrs, " , ")+" } drop", "Drop traffic to unallocated ClusterIPs"))
	}

	tx.Add(r.rule(chainReject, "reject", ""))
	tx.Add(r.rule(chainServiceEPCheck, r.ipX+" daddr . meta l4proto . th dport vmap @"+mapNoEndpointServices, ""))
	tx.Add(r.rule(chainFirewallCheck, r.ipX+" daddr . meta l4proto . th dport vmap @"+mapFirewallIPs, ""))
	tx.Add(r.rule(chainServices, r.ipX+" daddr . meta l4proto . th dport vmap @"+mapServiceIPs, ""))
}

// addNodePortRules adds the node-port lookups: on the listed node addresses
// (the elements of nodeport-ips), or on every local address except
// (unless asked) localhost.
func (r *renderer) addNodePortRules(tx txWriter) {
	var nodeDest, nodeDestLocal string
	switch {
	case len(r.cfg.NodePortAddresses) > 0:
		nodeDest = r.ipX + " daddr @" + setNodePortIPs + " "
		nodeDestLocal = nodeDest
	case r.localhostNodePorts():
		nodeDestLocal = "fib daddr type local "
	default:
		nodeDest = r.ipX + " daddr != " + r.localhost + " "
		nodeDestLocal = "fib daddr type local " + nodeDest
	}
	tx.Add(r.rule(chainNodePortEPCheck, nodeDest+"meta l4proto . th dport vmap @"+mapNoEndpointNodePorts, ""))
	tx.Add(r.rule(chainServices, nodeDestLocal+"meta l4proto . th dport vmap @"+mapServiceNodePorts, ""))

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
