package flat

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// ClientIP session affinity in the flat layout lives in data, like the
// rest of the layout: the number of rules grows with the protocols,
// groups and timeouts in use, never with the Service ports.
//
//   - A dynamic map affinity-P per protocol P (flags dynamic,timeout)
//     holds, per client and frontend (client . address . protocol . port;
//     for a node port, the node address the client used), the endpoint the
//     client is bound to (in IPv6 tables, keyed by a hash: see
//     affinityMaps). Only the packet path writes it.
//   - In a group's chain, before its numgen rules, a frontend in the set
//     G-P-affinity (its group's frontends with affinity) whose client is
//     in affinity-P goes to the endpoint found there
//     (`dnat ip to ip saddr . ip daddr . meta l4proto . th dport map
//     @affinity-tcp`), with the group's masquerade rules; a client without
//     an entry gets the group's numgen choice, exactly 1/N each.
//   - After DNAT, in the filter hooks (endpoint-check jumps to
//     affinity-check for `ct status dnat`), a new flow to a frontend with
//     affinity is checked against the frontend's current targets for its
//     source (affinity-targets-internal for sources in the pod networks
//     or on the node, affinity-targets-external for the others, and their
//     nodeport- twins): the targets of the group that serves that source,
//     so that a Local policy's clients are held to local endpoints. A
//     flow to a current target restarts the client's timeout, or records
//     the client's endpoint (`update @affinity-P { … timeout Ns : ip
//     daddr . tcp dport }`, N from the set affinity-Ns that holds the
//     frontend). A flow to an endpoint that is no longer a target (a
//     remembered endpoint that was removed, or that is not a target for
//     that source any more) is dropped and the client's entry deleted:
//     the client's next attempt (for TCP, the SYN's retransmission) gets
//     a fresh choice. A removed endpoint
//     thus receives no new connection, and a client keeps its endpoint for
//     its timeout after its last new connection while the endpoint stays a
//     target.
//
// Unlike kube-proxy's per-endpoint sets, an entry binds a client to one
// frontend (address, protocol and port; for a node port, the node address
// too), not to the Service port across its frontends. A full sync replaces
// the table, and with it the clients' entries.

// affinityMapSize bounds the clients of all frontends of one protocol
// that an affinity map holds. The kernel's default for a dynamic set,
// 65,535, is what kube-proxy's layout has per endpoint; here one map holds
// the entries of every frontend. Beyond the bound a new client is served
// without affinity until entries expire.
const affinityMapSize = 1 << 20

// affinityClass is what a frontend with affinity needs from the table
// beyond its own elements: the group whose chain looks its clients up,
// its protocol, and its timeout in seconds.
type affinityClass struct {
	group   flatGroup
	proto   uint8
	timeout uint32
}

// Names of the flat layout's affinity chains and sets.
const (
	flatAffinityCheck    = "affinity-check"
	flatAffinityInternal = "affinity-internal"
	flatAffinityExternal = "affinity-external"
	flatAffinityRecord   = "affinity-record"
)

// sourceClass is where a flow comes from, as the target groups tell
// sources apart: internal (the pod networks or the node) or external.
type sourceClass uint8

const (
	sourceInternal sourceClass = iota
	sourceExternal
)

func (c sourceClass) String() string { return [...]string{"internal", "external"}[c] }

// sourceClasses are the sources that group g serves.
func (g flatGroup) sourceClasses() []sourceClass {
	switch g {
	case groupShortCircuit, groupNodePortShortCircuit:
		return []sourceClass{sourceInternal}
	case groupLocal, groupNodePortLocal:
		return []sourceClass{sourceExternal}
	}
	return []sourceClass{sourceInternal, sourceExternal}
}

func affinityMapName(proto uint8) string { return "affinity-" + model.ProtoName(proto) }

func affinityGateSet(g flatGroup, proto uint8) string {
	return fmt.Sprintf("%s-%s-affinity", g, model.ProtoName(proto))
}

func nodePortPrefix(nodePort bool) string {
	if nodePort {
		return "nodeport-"
	}
	return ""
}

func affinityTargetSet(nodePort bool, c sourceClass) string {
	return nodePortPrefix(nodePort) + "affinity-targets-" + c.String()
}

func affinityTimeoutSet(nodePort bool, timeout uint32) string {
	return fmt.Sprintf("%saffinity-%ds", nodePortPrefix(nodePort), timeout)
}

// rendersAffinity reports whether the frontends of s get ClientIP
// affinity: s asks for it and, in an IPv6 table, its targets all listen on
// one port (see affinitySets).
func (r *flatRenderer) rendersAffinity(s *ruleset.Service) bool {
	return s.Affinity.Enabled() && (r.family == model.IPv4 || targetPort(s) != 0)
}

// targetPort is the port that every target of s listens on; 0 when they
// differ or s has none.
func targetPort(s *ruleset.Service) uint16 {
	var port uint16
	for _, t := range slices.Concat(s.ClusterTargets, s.LocalTargets) {
		if port != 0 && t.Endpoint.Port() != port {
			return 0
		}
		port = t.Endpoint.Port()
	}
	return port
}

// affinityRows make the rows of an affinity targets block from a
// Service's targets (a Ruleset's, which do not change): row i is the
// address and port of target i, the end of the key.
type affinityRows []ruleset.Target

func (*affinityRows) Widths() (key, value int) { return 2, 0 }

func (t *affinityRows) AppendRow(dst []model.Datum, i int) []model.Datum {
	ep := (*t)[i].Endpoint
	return append(dst, model.Addr(ep.Addr()), model.Port(ep.Port()))
}

// affinityWarnings name a Service port whose affinity is not rendered.
func (r *flatRenderer) affinityWarnings(s *ruleset.Service) []svcproxy.Warning {
	if !s.Affinity.Enabled() || r.rendersAffinity(s) || len(s.ClusterTargets)+len(s.LocalTargets) == 0 {
		return nil
	}
	return []svcproxy.Warning{r.warn(s, "ClientIP session affinity is not rendered by the flat nftables layout for IPv6 endpoints that listen on different ports: served without it")}
}

// affinityTargets adds what a frontend of s with affinity needs, besides
// its group's elements: its gate in the group, its current targets
// (targets: s's ClusterTargets or LocalTargets) for the sources that the
// group serves, and its timeout.
func (r *flatRenderer) affinityTargets(p *flatPort, s *ruleset.Service, g flatGroup, key []model.Datum, targets *[]ruleset.Target, comment string) {
	proto := model.ProtoNumber(s.Name.Protocol)
	timeout := uint32(s.Affinity.Seconds())
	p.affinity = append(p.affinity, affinityClass{group: g, proto: proto, timeout: timeout})
	p.elements = append(p.elements, model.Element{Set: affinityGateSet(g, proto), Key: key, Comment: comment})
	for _, c := range g.sourceClasses() {
		p.elements = append(p.elements, model.Element{Set: affinityTargetSet(g.nodePort(), c), Key: key,
			Rows: len(*targets), Source: (*affinityRows)(targets), Comment: comment})
	}
	once := []model.Element{{Set: affinityTimeoutSet(g.nodePort(), timeout), Key: key, Comment: comment}}
	if r.family == model.IPv6 {
		once = append(once, model.Element{Set: affinityPortsMap(g.nodePort(), proto), Key: portKey(key),
			Value: []model.Datum{model.Port(targetPort(s))}, Comment: comment})
	}
	for _, el := range once { // a frontend of two groups (Local policies) has them once
		if !slices.ContainsFunc(p.elements[p.frontendStart:], func(e model.Element) bool { return e.Set == el.Set && slices.Equal(e.Key, el.Key) }) {
			p.elements = append(p.elements, el)
		}
	}
}

// portKey is a frontend's key without its protocol: the key of the IPv6
// affinity ports maps.
func portKey(key []model.Datum) []model.Datum {
	return slices.Delete(slices.Clone(key), len(key)-2, len(key)-1)
}

func affinityPortsMap(nodePort bool, proto uint8) string {
	return nodePortPrefix(nodePort) + "affinity-ports-" + model.ProtoName(proto)
}

// affinitySeed is the seed of the IPv6 affinity maps' hash: the lookup
// and the update must hash alike.
const affinitySeed = 0x5eed

// affinityUse is the affinity structure in use: the classes, and what
// they imply.
type affinityUse struct {
	classes  []affinityClass
	protos   []uint8
	timeouts []uint32
	gates    map[flatGroup][]uint8
}

func newAffinityUse(classes map[affinityClass]int) affinityUse {
	u := affinityUse{gates: map[flatGroup][]uint8{}}
	u.classes = slices.SortedFunc(maps.Keys(classes), func(a, b affinityClass) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.proto, b.proto), cmp.Compare(a.timeout, b.timeout))
	})
	for _, c := range u.classes {
		u.protos = append(u.protos, c.proto)
		u.timeouts = append(u.timeouts, c.timeout)
		if gs := u.gates[c.group]; len(gs) == 0 || gs[len(gs)-1] != c.proto {
			u.gates[c.group] = append(gs, c.proto)
		}
	}
	slices.Sort(u.protos)
	slices.Sort(u.timeouts)
	u.protos, u.timeouts = slices.Compact(u.protos), slices.Compact(u.timeouts)
	return u
}

func (u affinityUse) inUse() bool { return len(u.classes) > 0 }

// affinitySets are the sets and maps of u.
func (r *flatRenderer) affinitySets(u affinityUse) []*model.Set {
	if !u.inUse() {
		return nil
	}
	addr, np := r.addrKey(), r.nodePortKey()
	target := []model.Expr{r.daddr, model.THDport}
	var sets []*model.Set
	for _, p := range u.protos {
		sets = append(sets, r.affinityMaps(p)...)
	}
	for g := range numGroups {
		for _, p := range u.gates[g] {
			sets = append(sets, &model.Set{Name: affinityGateSet(g, p), Key: r.groupKey(g), Comment: fmt.Sprintf("%s %s frontends with ClientIP affinity", g, model.ProtoName(p))})
		}
	}
	for _, nodePort := range []bool{false, true} {
		key := addr
		if nodePort {
			key = np
		}
		for _, c := range []sourceClass{sourceInternal, sourceExternal} {
			sets = append(sets, &model.Set{Name: affinityTargetSet(nodePort, c), Key: slices.Concat(key, target),
				Comment: fmt.Sprintf("current targets of frontends with ClientIP affinity, for %s sources", c)})
		}
		for _, t := range u.timeouts {
			sets = append(sets, &model.Set{Name: affinityTimeoutSet(nodePort, t), Key: key, Comment: fmt.Sprintf("frontends whose ClientIP affinity lasts %ds", t)})
		}
	}
	return sets
}

// affinityMaps are the maps of protocol p's clients. In an IPv4 table,
// one: client . frontend : endpoint . port. nft 1.0.6 cannot write the
// packet path's update of that map in IPv6 (it runs out of registers for a
// dynamic-set statement whose key or value concatenates more than 16
// bytes: an assertion in netlink_linearize.c), so an IPv6 table keys it
// by a 32-bit hash of client . frontend (typed by a numgen's typeof: nft
// 1.0.6 lists a map typed by a jhash's typeof with a crash) and holds the
// endpoint's address only; the port comes from a second map, frontend :
// the port every target listens on. Two clients whose hashes collide
// share an entry: the check after DNAT drops the flow that the other's
// endpoint does not serve, and the client's next attempt gets a fresh
// choice.
func (r *flatRenderer) affinityMaps(p uint8) []*model.Set {
	comment := "the endpoints of clients with ClientIP affinity (written by the packet path)"
	if r.family == model.IPv4 {
		return []*model.Set{{Name: affinityMapName(p), Key: append([]model.Expr{r.saddr}, r.addrKey()...),
			Value: []model.Expr{r.daddr, model.DportField(p)}, Dynamic: true, Expiring: true, Size: affinityMapSize, Comment: comment}}
	}
	return []*model.Set{
		{Name: affinityMapName(p), Key: []model.Expr{model.Numgen{Mod: 2}}, Value: []model.Expr{r.daddr}, Dynamic: true, Expiring: true, Size: affinityMapSize, Comment: comment},
		{Name: affinityPortsMap(false, p), Key: []model.Expr{r.daddr, model.THDport}, Value: []model.Expr{model.DportField(p)}, Comment: "the port of the targets of frontends with ClientIP affinity"},
		{Name: affinityPortsMap(true, p), Key: []model.Expr{model.THDport}, Value: []model.Expr{model.DportField(p)}, Comment: "the port of the targets of node ports with ClientIP affinity"},
	}
}

// affinityDNAT sends a client of group g to the endpoint its entry in
// protocol p's affinity map holds.
func (r *flatRenderer) affinityDNAT(g flatGroup, p uint8) model.Stmt {
	if r.family == model.IPv4 {
		return model.DNATMap{Family: r.family, Key: append([]model.Expr{r.saddr}, r.addrKey()...), Map: affinityMapName(p)}
	}
	portKey := []model.Expr{r.daddr, model.THDport}
	if g.nodePort() {
		portKey = []model.Expr{model.THDport}
	}
	return model.DNATMaps{Family: r.family, AddrKey: []model.Expr{model.JHash{Key: []model.Expr{r.saddr, r.daddr, model.THDport}, Seed: affinitySeed}},
		AddrMap: affinityMapName(p), PortKey: portKey, PortMap: affinityPortsMap(g.nodePort(), p)}
}

// affinityValue is what the packet path records for a client of
// protocol p: the endpoint and its port (IPv4) or the endpoint (IPv6).
func (r *flatRenderer) affinityValue(p uint8) []model.Expr {
	if r.family == model.IPv4 {
		return []model.Expr{r.daddr, model.DportField(p)}
	}
	return []model.Expr{r.daddr}
}

// affinityLookups are the rules that send a group's clients with an entry
// to their endpoint: one per protocol with affinity in the group and
// masquerade variant.
func (r *flatRenderer) affinityLookups(g flatGroup, u affinityUse) []model.Rule {
	var rules []model.Rule
	for _, p := range u.gates[g] {
		for _, v := range r.variants(g) {
			stmts := append([]model.Stmt{
				model.Equal{Field: model.L4Proto, Value: model.Proto(p)},
				model.InSet{Key: r.groupKey(g), Set: affinityGateSet(g, p)},
			}, v.match...)
			if v.masquerade {
				stmts = append(stmts, model.MarkOr{Bits: r.mark})
			}
			stmts = append(stmts, r.affinityDNAT(g, p))
			rules = append(rules, model.Rule{Stmts: stmts})
		}
	}
	return rules
}

// affinityChains are the chains that check and record the flows of u
// after DNAT.
func (r *flatRenderer) affinityChains(u affinityUse) []*model.Chain {
	if !u.inUse() {
		return nil
	}
	check := &model.Chain{Name: flatAffinityCheck}
	if len(r.cfg.ClusterCIDRs) > 0 {
		check.Rules = append(check.Rules, model.Rule{Stmts: []model.Stmt{model.InSet{Key: []model.Expr{r.saddr}, Set: flatSetClusterCIDRs}, model.Goto(flatAffinityInternal)}})
	}
	check.Rules = append(check.Rules,
		model.Rule{Stmts: []model.Stmt{model.FibLocal{Saddr: true}, model.Goto(flatAffinityInternal)}},
		model.Rule{Stmts: []model.Stmt{model.Goto(flatAffinityExternal)}})
	return []*model.Chain{
		check,
		{Name: flatAffinityInternal, Rules: r.affinityValidation(u, sourceInternal)},
		{Name: flatAffinityExternal, Rules: r.affinityValidation(u, sourceExternal)},
		{Name: flatAffinityRecord, Rules: r.affinityRecords(u)},
	}
}

// origKeys are a frontend's key as conntrack recorded it before DNAT, for
// address frontends and node ports; clientKey is a client's key in the
// affinity maps, read after DNAT.
func (r *flatRenderer) origKeys() (addr, nodePort []model.Expr) {
	daddr := model.CtOrigIPDaddr
	if r.family == model.IPv6 {
		daddr = model.CtOrigIP6Daddr
	}
	return []model.Expr{daddr, model.L4Proto, model.CtOrigProtoDst}, []model.Expr{model.L4Proto, model.CtOrigProtoDst}
}

func (r *flatRenderer) clientKey() []model.Expr {
	if r.family == model.IPv6 {
		return []model.Expr{model.JHash{Key: []model.Expr{r.saddr, model.CtOrigIP6Daddr, model.CtOrigProtoDst}, Seed: affinitySeed}}
	}
	addr, _ := r.origKeys()
	return append([]model.Expr{r.saddr}, addr...)
}

// affinityValidation are the rules for flows from sources of class c:
// those to a current target go on to be recorded; those to another
// endpoint are dropped, and their client's entry deleted.
func (r *flatRenderer) affinityValidation(u affinityUse, c sourceClass) []model.Rule {
	addr, np := r.origKeys()
	target := []model.Expr{r.daddr, model.THDport}
	var rules []model.Rule
	for _, p := range u.protos {
		proto := model.Equal{Field: model.L4Proto, Value: model.Proto(p)}
		for _, nodePort := range []bool{false, true} {
			key := addr
			if nodePort {
				key = np
			}
			rules = append(rules, model.Rule{Stmts: []model.Stmt{proto, model.InSet{Key: slices.Concat(key, target), Set: affinityTargetSet(nodePort, c)}, model.Goto(flatAffinityRecord)}})
		}
	}
	return append(rules, r.perTimeout(u, func(p uint8, value []model.Expr, _ uint32) []model.Stmt {
		return []model.Stmt{model.DeleteMap{Map: affinityMapName(p), Key: r.clientKey(), Value: value}, model.Drop}
	}, "the endpoint is no longer a target for this client")...)
}

// affinityRecords are the rules that record a client's endpoint, or
// restart its timeout, with the frontend's timeout.
func (r *flatRenderer) affinityRecords(u affinityUse) []model.Rule {
	return r.perTimeout(u, func(p uint8, value []model.Expr, t uint32) []model.Stmt {
		return []model.Stmt{model.UpdateMap{Map: affinityMapName(p), Key: r.clientKey(), Timeout: t, Value: value}, model.Return}
	}, "")
}

// perTimeout is a rule for each protocol, kind of frontend (address or node
// port) and timeout of u, matching the flows of that protocol whose
// original frontend has that timeout, and ending in the statements that
// then returns for the protocol, its affinity map's value and the timeout.
func (r *flatRenderer) perTimeout(u affinityUse, then func(p uint8, value []model.Expr, timeout uint32) []model.Stmt, comment string) []model.Rule {
	addr, np := r.origKeys()
	var rules []model.Rule
	for _, p := range u.protos {
		proto := model.Equal{Field: model.L4Proto, Value: model.Proto(p)}
		value := r.affinityValue(p)
		for _, nodePort := range []bool{false, true} {
			key := addr
			if nodePort {
				key = np
			}
			for _, t := range u.timeouts {
				match := []model.Stmt{proto, model.InSet{Key: key, Set: affinityTimeoutSet(nodePort, t)}}
				rules = append(rules, model.Rule{Stmts: append(match, then(p, value, t)...), Comment: comment})
			}
		}
	}
	return rules
}

// affinityJump is the rule of endpoint-check that sends translated flows
// to affinity-check.
func affinityJump() model.Rule {
	return model.Rule{Stmts: []model.Stmt{model.CtDNAT{}, model.Jump(flatAffinityCheck)}}
}

// groupChain is the chain of group g with its affinity lookups first.
func (st *State) groupChain(g flatGroup) *model.Chain {
	c := st.r.groupChain(g, st.counts)
	if rules := st.r.affinityLookups(g, newAffinityUse(st.affinity)); len(rules) > 0 {
		c.Rules = append(rules, c.Rules...)
	}
	return c
}

// addAffinity adds the affinity structure in use to t, whose group chains
// st.groupChain wrote.
func (st *State) addAffinity(t *model.Table) {
	u := newAffinityUse(st.affinity)
	if !u.inUse() {
		return
	}
	t.Sets = append(t.Sets, st.r.affinitySets(u)...)
	for _, c := range t.Chains {
		if c.Name == flatEndpointCheck {
			c.Rules = append(c.Rules, affinityJump())
		}
	}
	t.Chains = append(t.Chains, st.r.affinityChains(u)...)
}

// endpointCheck is the chain endpoint-check as t holds it.
func endpointCheck(t *model.Table) *model.Chain {
	for _, c := range t.Chains {
		if c.Name == flatEndpointCheck {
			return c
		}
	}
	return nil
}

// affinityKeys are the classes in use, to compare before and after a
// change.
func (st *State) affinityKeys() map[affinityClass]int { return maps.Clone(st.affinity) }

// affinityChanged reports whether the affinity structure differs between
// two sets of classes in use.
func affinityChanged(before, after map[affinityClass]int) bool {
	if len(before) != len(after) {
		return true
	}
	for k := range before {
		if after[k] == 0 {
			return true
		}
	}
	return false
}

// addAffinityObjects adds to tx the affinity sets and chains that t
// holds (those that exist already stay as they are), before elements go
// into them.
func (st *State) addAffinityObjects(tx *knftables.Transaction, t *model.Table) {
	u := newAffinityUse(st.affinity)
	for _, s := range st.r.affinitySets(u) {
		tx.Add(t.SetObject(s))
	}
	for _, c := range st.r.affinityChains(u) {
		tx.Add(t.ChainObject(c))
	}
}

// rewriteAffinity writes into tx the rules of the chains that the
// affinity structure shapes, as t holds them, then deletes the chains and
// sets of before that t no longer has.
func (st *State) rewriteAffinity(tx *knftables.Transaction, t *model.Table, before map[affinityClass]int) {
	u := newAffinityUse(st.affinity)
	chains := append([]*model.Chain{endpointCheck(t)}, st.r.affinityChains(u)...)
	for g := range numGroups {
		chains = append(chains, st.groupChain(g))
	}
	for _, c := range chains {
		tx.Flush(t.ChainObject(c))
		for _, o := range t.RuleObjects(c) {
			tx.Add(o)
		}
	}
	old := newAffinityUse(before)
	keep := map[string]bool{}
	for _, c := range st.r.affinityChains(u) {
		keep[c.Name] = true
	}
	for _, c := range st.r.affinityChains(old) {
		if !keep[c.Name] {
			tx.Flush(t.ChainObject(c))
			tx.Delete(t.ChainObject(c))
		}
	}
	for _, s := range st.r.affinitySets(u) {
		keep[s.Name] = true
	}
	for _, s := range st.r.affinitySets(old) {
		if !keep[s.Name] {
			tx.Delete(t.SetObject(s))
		}
	}
}
