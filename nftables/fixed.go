package nftables

import (
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
)

// The base chains, as kube-proxy (1.34 and later) hooks them: the
// source-range firewall before DNAT, on the Service addresses; the
// endpoint and cluster-IP checks at filter priority, after DNAT, so that
// traffic DNATed to an endpoint (a short-circuit, say) is not refused by
// the entry of the address it was sent to; DNAT and SNAT. They are shared:
// nothing modifies them.
var baseChains = [...]model.Chain{
	{Name: chainFilterPreroutingPre, Base: &model.Hook{Type: "filter", Hook: "prerouting", Priority: "dstnat-10"}},
	{Name: chainFilterOutputPre, Base: &model.Hook{Type: "filter", Hook: "output", Priority: "dstnat-10"}},
	{Name: chainFilterInput, Base: &model.Hook{Type: "filter", Hook: "input", Priority: "filter"}},
	{Name: chainFilterForward, Base: &model.Hook{Type: "filter", Hook: "forward", Priority: "filter"}},
	{Name: chainFilterOutput, Base: &model.Hook{Type: "filter", Hook: "output", Priority: "filter"}},
	{Name: chainNATPrerouting, Base: &model.Hook{Type: "nat", Hook: "prerouting", Priority: "dstnat"}},
	{Name: chainNATOutput, Base: &model.Hook{Type: "nat", Hook: "output", Priority: "dstnat"}},
	{Name: chainNATPostrouting, Base: &model.Hook{Type: "nat", Hook: "postrouting", Priority: "srcnat"}},
}

// fixedChains are the regular chains every table has.
var fixedChains = []string{
	chainServices, chainServiceEPCheck, chainNodePortEPCheck, chainClusterIPsCheck,
	chainFirewallCheck, chainReject, chainMasquerading,
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

// fixedSetsAndMaps are the names of the sets and maps that do not depend on
// the Services (fixedKind tells which is which).
func (r *renderer) fixedSetsAndMaps() []string {
	names := []string{setClusterIPs, setHairpin, mapNoEndpointServices, mapNoEndpointNodePorts, mapFirewallIPs, mapServiceIPs, mapServiceNodePorts}
	if len(r.cfg.NodePortAddresses) > 0 || r.cfg.NoNodePortAddresses {
		names = append(names, setNodePortIPs)
	}
	return names
}

// fixedKind is "set" for a name of fixedSetsAndMaps that is a set, "map"
// for one that is a map.
func fixedKind(name string) string {
	if name == setClusterIPs || name == setNodePortIPs || name == setHairpin {
		return "set"
	}
	return "map"
}

// fixed adds the table and everything in it that does not depend on the
// Services. mayExist says which chains may already be in the table. The
// maps and the cluster-ips set are flushed, unless keepElements.
func (r *renderer) fixed(tx txWriter, mayExist func(chain string) bool, keepElements bool) {
	comment := defaultTableDescription
	if r.table != DefaultTable {
		comment = "Service proxy rules"
	}
	tx.write(op{verb: opAdd, kind: kindTable, table: &model.Table{Family: r.tableRef.Family, Name: r.table, Comment: comment}})
	r.addFixedChains(tx, mayExist)
	r.addFixedContainers(tx, keepElements)
	r.addFixedRules(tx)
	r.addNodePortRules(tx)
}

// addFixedChains adds the base chains, deleted first when they may exist (so
// that a changed hook or priority applies: nft refuses to change them on
// an existing chain), and the regular fixed chains, flushed.
func (r *renderer) addFixedChains(tx txWriter, mayExist func(chain string) bool) {
	for i := range baseChains {
		c := &baseChains[i]
		if mayExist(c.Name) {
			ref := chainRef(c.Name)
			tx.write(chainOp(opAdd, ref))
			tx.write(chainOp(opDelete, ref))
		}
		tx.write(chainOp(opAdd, c))
	}
	for _, name := range fixedChains {
		c := chainRef(name)
		if name == chainReject {
			c.Comment = "helper for @no-endpoint-services / @no-endpoint-nodeports"
		}
		tx.write(chainOp(opAdd, c))
		tx.write(chainOp(opFlush, c))
	}
}

// addFixedContainers adds the maps and sets, flushed unless keepElements
// (nodeport-ips, whose elements come from the Config, always).
func (r *renderer) addFixedContainers(tx txWriter, keepElements bool) {
	addrProtoPort := []model.Type{r.addrType[0], model.TypeInetProto, model.TypeInetService}
	protoPort := []model.Type{model.TypeInetProto, model.TypeInetService}
	verdict := []model.Type{model.TypeVerdict}
	add := func(s *model.Set, flush bool) {
		tx.write(setOp(opAdd, s, s.IsMap()))
		if flush {
			tx.write(setOp(opFlush, s, s.IsMap()))
		}
	}
	add(&model.Set{Name: setClusterIPs, KeyType: r.addrType, Comment: "Active ClusterIPs"}, !keepElements)
	add(&model.Set{Name: setHairpin, KeyType: []model.Type{r.addrType[0], r.addrType[0], model.TypeInetProto, model.TypeInetService},
		Comment: "service hairpin connections"}, !keepElements)
	if len(r.cfg.NodePortAddresses) > 0 || r.cfg.NoNodePortAddresses {
		add(&model.Set{Name: setNodePortIPs, KeyType: r.addrType, Comment: "IPs that accept NodePort traffic"}, true)
	}
	for _, m := range []*model.Set{
		{Name: mapNoEndpointServices, KeyType: addrProtoPort, ValueType: verdict, Comment: "vmap to drop or reject packets to services with no endpoints"},
		{Name: mapNoEndpointNodePorts, KeyType: protoPort, ValueType: verdict, Comment: "vmap to drop or reject packets to service nodeports with no endpoints"},
		{Name: mapFirewallIPs, KeyType: addrProtoPort, ValueType: verdict, Comment: "destinations that are subject to LoadBalancerSourceRanges"},
		{Name: mapServiceIPs, KeyType: addrProtoPort, ValueType: verdict, Comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic"},
		{Name: mapServiceNodePorts, KeyType: protoPort, ValueType: verdict, Comment: "NodePort traffic"},
	} {
		add(m, !keepElements)
	}
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

	// Masquerade what is marked, and the connections of an endpoint on
	// this node to itself through a Service (hairpin).
	mark := r.cfg.Mark()
	r.addRule(tx, chainMasquerading, "", model.MarkAny{Bits: mark}, model.MarkXor{Bits: mark, Keywords: true}, model.Masquerade{})
	r.addRule(tx, chainMasquerading, "", model.CtDNAT{},
		model.InSet{Key: []model.Expr{r.saddr, r.daddr, model.L4Proto, model.THDport}, Set: setHairpin}, model.Masquerade{})

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
	toClusterIP := model.InSet{Key: []model.Expr{r.daddr}, Set: setClusterIPs}
	switch {
	case r.cfg.MasqueradeAll:
		r.addRule(tx, chainServices, "masquerade all clusterIP traffic", toClusterIP, r.markMasq())
	case len(r.podNets) > 0:
		r.addRule(tx, chainServices, "masquerade clusterIP traffic from outside cluster",
			toClusterIP, model.AddrIn{Field: r.saddr, Values: r.podNets, Neg: true}, r.markMasq())
	}
	r.addRule(tx, chainServices, "", model.VmapLookup{Key: frontend, Map: mapServiceIPs})
}

// addNodePortRules adds the node-port lookups: on the listed node addresses
// (the elements of nodeport-ips), or on every local address except
// (unless asked) localhost.
func (r *renderer) addNodePortRules(tx txWriter) {
	var nodeDest, nodeDestLocal []model.Stmt
	switch {
	case len(r.cfg.NodePortAddresses) > 0 || r.cfg.NoNodePortAddresses:
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
		e := &model.Element{Set: setNodePortIPs, Key: []model.Datum{model.Addr(a)}}
		tx.write(elementOp(opAdd, e, false))
	}
}

// localhostNodePorts reports whether NodePorts are served on localhost:
// only for IPv4, when the Config asks for it.
func (r *renderer) localhostNodePorts() bool {
	return r.cfg.LocalhostNodePorts && r.cfg.Family == v1.IPv4Protocol
}
