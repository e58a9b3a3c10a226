package flat

import (
	"fmt"
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// The flat layout holds, in one table per IP family:
//
//   - per target group G, endpoint count N and protocol P (tcp, udp,
//     sctp) in use, a set G-N-P of the frontends of protocol P whose
//     traffic goes to N targets, a map G-N-P-targets from frontend . index
//     (0…N−1) to endpoint address . port (typed "P dport": nft cannot
//     delete elements from a map whose value is typed "th dport"), and in
//     chain G the rule(s) "meta l4proto P frontend @G-N-P … dnat to
//     frontend . numgen random mod N map @G-N-P-targets": each target gets
//     exactly 1/N of new flows, and each rule matches its protocol
//     explicitly, since nft makes a rule that uses a map typed "P dport"
//     match protocol P only. The groups
//     are cluster (cluster IPs), external (external and load-balancer IPs
//     under externalTrafficPolicy Cluster: masqueraded), shortcircuit
//     (those of Local ports, from pods or from the node, to the
//     cluster-wide targets), local (Local ports from outside, to the node's
//     targets), and the same three for node ports (nodeport-…), keyed by
//     protocol . port;
//   - the sets no-endpoint-reject and no-endpoint-drop (and their nodeport-
//     twins), checked after DNAT at filter priority; cluster-ips (other
//     ports of a cluster IP are rejected) and service-cidrs (dropped);
//     firewall and firewall-allow (address . protocol . port . source
//     range), the load-balancer source-range firewall, before DNAT;
//     cluster-cidrs (the pod networks); hairpin (address . address .
//     protocol . port of the targets on this node, kube-proxy 1.37's
//     hairpin-connections key: a flow DNATed to its own source is
//     masqueraded when that source, with the flow's protocol and port, is
//     a target on this node of some Service port, as in kube-proxy 1.37's
//     nftables mode).
//
// The base chains hook as kube-proxy's do (see baseChains); the chains
// services and nodeports jump to the group chains in a fixed order, so that
// a group's rules can be rewritten alone.
//
// Every element of a Service port carries the port's name as its comment
// ("ns/name:port/TCP"); hairpin elements (shared by the ports of an
// endpoint) and the configuration's (pod networks, Service ranges, node
// addresses) carry none. When two ports claim one frontend, its owner
// (ruleset.Ruleset.Owner) gets it and the other is named in a warning, as
// in kube-proxy's layout.
//
// ClientIP session affinity lives in a dynamic map per protocol that the
// packet path fills, with lookups in the group chains and a check after
// DNAT (see affinity.go). An IPv6 port whose endpoints listen on
// different ports is served without it, and named in a warning.

// flatGroup is a target group: the frontends of one kind whose traffic
// goes, under the same conditions, to one list of targets.
type flatGroup uint8

const (
	groupCluster flatGroup = iota
	groupExternal
	groupShortCircuit
	groupLocal
	groupNodePortExternal
	groupNodePortShortCircuit
	groupNodePortLocal
	numGroups
)

var groupNames = [numGroups]string{"cluster", "external", "shortcircuit", "local", "nodeport-external", "nodeport-shortcircuit", "nodeport-local"}

func (g flatGroup) String() string { return groupNames[g] }
func (g flatGroup) nodePort() bool { return g >= groupNodePortExternal }

// groupN is a group with an endpoint count and a protocol: one set, one
// map, a rule or two.
type groupN struct {
	group flatGroup
	n     int
	proto uint8 // IP protocol number (protoNumber)
}

func (k groupN) set() string {
	return k.group.String() + "-" + strconv.Itoa(k.n) + "-" + model.ProtoName(k.proto)
}
func (k groupN) targets() string { return k.set() + "-targets" }

// The flat layout's fixed chains and sets.
const (
	flatServices          = "services"
	flatNodePorts         = "nodeports"
	flatFirewallCheck     = "firewall-check"
	flatEndpointCheck     = "endpoint-check"
	flatNodePortCheck     = "nodeport-check"
	flatClusterIPsCheck   = "cluster-ips-check"
	flatMasquerading      = "masquerading"
	flatSetClusterIPs     = "cluster-ips"
	flatSetServiceCIDRs   = "service-cidrs"
	flatSetClusterCIDRs   = "cluster-cidrs"
	flatSetNodePortIPs    = "nodeport-ips"
	flatSetReject         = "no-endpoint-reject"
	flatSetDrop           = "no-endpoint-drop"
	flatSetNodePortReject = "no-endpoint-nodeport-reject"
	flatSetNodePortDrop   = "no-endpoint-nodeport-drop"
	flatSetFirewall       = "firewall"
	flatSetFirewallAllow  = "firewall-allow"
	flatSetHairpin        = "hairpin"
)

// flatRenderer holds what rendering one Config in the flat layout needs.
type flatRenderer struct {
	cfg          ruleset.Config
	family       model.Family
	table        string
	daddr, saddr model.Field
	mark         uint32
	// setNames holds the names of the groups' sets and maps met so far.
	setNames map[groupN]groupSetNames
}

// groupSetNames are the names of a group's set and targets map.
type groupSetNames struct{ set, targets string }

// names are the names of k's set and targets map.
func (r *flatRenderer) names(k groupN) groupSetNames {
	n, ok := r.setNames[k]
	if !ok {
		n = groupSetNames{set: k.set(), targets: k.targets()}
		r.setNames[k] = n
	}
	return n
}

func newFlatRenderer(cfg ruleset.Config, opts Options) *flatRenderer {
	r := &flatRenderer{cfg: cfg, family: model.IPv4, table: opts.Table, daddr: model.IPDaddr, saddr: model.IPSaddr, mark: cfg.Mark(), setNames: map[groupN]groupSetNames{}}
	if cfg.Family == v1.IPv6Protocol {
		r.family, r.daddr, r.saddr = model.IPv6, model.IP6Daddr, model.IP6Saddr
	}
	if r.table == "" {
		r.table = DefaultTable
	}
	return r
}

// addrKey is the key of an address frontend; nodePortKey of a node port.
func (r *flatRenderer) addrKey() []model.Expr {
	return []model.Expr{r.daddr, model.L4Proto, model.THDport}
}

func (r *flatRenderer) nodePortKey() []model.Expr { return []model.Expr{model.L4Proto, model.THDport} }

func (r *flatRenderer) groupKey(g flatGroup) []model.Expr {
	if g.nodePort() {
		return r.nodePortKey()
	}
	return r.addrKey()
}

// groupSets are the set and the map of a group and count.
func (r *flatRenderer) groupSets(k groupN) []*model.Set {
	key := r.groupKey(k.group)
	mapKey := append(append([]model.Expr{}, key...), model.Numgen{Mod: uint32(k.n)})
	return []*model.Set{
		{Name: k.set(), Key: key, Comment: fmt.Sprintf("%s %s frontends spread over %d targets", k.group, model.ProtoName(k.proto), k.n)},
		{Name: k.targets(), Key: mapKey, Value: []model.Expr{r.daddr, model.DportField(k.proto)}},
	}
}

// variant is one rule of a group: extra matches, and whether it marks the
// flow for masquerading.
type variant struct {
	match      []model.Stmt
	masquerade bool
}

// variants are the rules of a group, in order: the masquerade decisions of
// ruleset.Ruleset.Decide by source (pod network, node, elsewhere).
func (r *flatRenderer) variants(g flatGroup) []variant {
	fromPods := model.InSet{Key: []model.Expr{r.saddr}, Set: flatSetClusterCIDRs}
	hasPods := len(r.cfg.ClusterCIDRs) > 0
	switch g {
	case groupCluster:
		switch {
		case r.cfg.MasqueradeAll:
			return []variant{{masquerade: true}}
		case hasPods:
			notPods := fromPods
			notPods.Neg = true
			return []variant{{match: []model.Stmt{notPods}, masquerade: true}, {}}
		}
		return []variant{{}}
	case groupExternal, groupNodePortExternal:
		return []variant{{masquerade: true}}
	case groupShortCircuit, groupNodePortShortCircuit:
		var vs []variant
		if hasPods {
			vs = append(vs, variant{match: []model.Stmt{fromPods}})
		}
		return append(vs, variant{match: []model.Stmt{model.FibLocal{Saddr: true}}, masquerade: true})
	}
	return []variant{{}}
}

// groupRules are the rules of one group and count.
func (r *flatRenderer) groupRules(k groupN) []model.Rule {
	key := r.groupKey(k.group)
	mapKey := append(append([]model.Expr{}, key...), model.Numgen{Mod: uint32(k.n)})
	var rules []model.Rule
	for _, v := range r.variants(k.group) {
		stmts := append([]model.Stmt{
			model.Equal{Field: model.L4Proto, Value: model.Proto(k.proto)},
			model.InSet{Key: key, Set: k.set()},
		}, v.match...)
		if v.masquerade {
			stmts = append(stmts, model.MarkOr{Bits: r.mark})
		}
		stmts = append(stmts, model.DNATMap{Family: r.family, Key: mapKey, Map: k.targets()})
		rules = append(rules, model.Rule{Stmts: stmts})
	}
	return rules
}

// groupChain is the chain of a group with the rules of the counts in use.
func (r *flatRenderer) groupChain(g flatGroup, counts map[groupN]int) *model.Chain {
	c := &model.Chain{Name: g.String()}
	for _, k := range sortedGroups(counts) {
		if k.group == g {
			c.Rules = append(c.Rules, r.groupRules(k)...)
		}
	}
	return c
}

func maxPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
