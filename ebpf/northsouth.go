package ebpf

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/maglev"
	"github.com/svcproxy/svcproxy/ruleset"
)

// ExtValue is a value of the svcp_ext map of bpf/tc.c (struct ext_value):
// what a flow arriving from outside at an external frontend meets. With
// no flag it goes to the backend that Maglev table ID gives its flow
// hash, its source masqueraded to Masq unless that is the zero Addr.
type ExtValue struct {
	ID    uint32
	Flags uint32
	Masq  Addr
	// Firewall is the key of the frontend's source ranges in Ranges
	// (with FlagFirewall).
	Firewall uint32
}

// MaglevMax is the largest Maglev table the tc programs hold
// (MAGLEV_MAX of bpf/tc.c): maglev.DefaultSize.
const MaglevMax = maglev.DefaultSize

// MaglevTable is a value of the svcp_maglev map (struct mg_table of
// bpf/tc.c), whose key is the table's ID, the group ID of its targets:
// entry i is the slot, in that group of the backends map (the socket
// programs', shared), of the backend that flows hashed to i reach. The
// first NorthSouth.Size entries are used.
type MaglevTable [MaglevMax]uint16

// RangeKey is a key of the svcp_ranges LPM trie: source prefix Addr/n of
// the firewall ID, as Prefixlen 32+n with n counted in Addr's 16 bytes
// (an IPv4 prefix /m has n = 96+m).
type RangeKey struct {
	Prefixlen uint32
	ID        uint32
	Addr      Addr
}

// rangeKeyOf is the key of source prefix p under firewall id.
func rangeKeyOf(id uint32, p netip.Prefix) RangeKey {
	c := cidrKeyOf(p)
	return RangeKey{Prefixlen: 32 + c.Prefixlen, ID: id, Addr: c.Addr}
}

// NorthSouth is the contents of the maps of the tc programs (bpf/tc.c),
// which translate flows that arrive from outside at node ports, external
// IPs and load-balancer IPs, for one IP family: both families share the
// maps, told apart by the family of the keys' addresses and by the group
// IDs of the Maglev tables and source ranges (those of IPv6 have the
// v6Group bit).
type NorthSouth struct {
	Ext    map[ServiceKey]ExtValue
	Maglev map[uint32]*MaglevTable
	Ranges map[RangeKey]uint8
	// Size is the size of every Maglev table.
	Size int
	// slots are the slots each table was computed from.
	slots map[uint32][]netip.AddrPort
}

// newNorthSouth returns empty NorthSouth contents with tables of size.
func newNorthSouth(size int) *NorthSouth {
	return &NorthSouth{Ext: map[ServiceKey]ExtValue{}, Maglev: map[uint32]*MaglevTable{}, Ranges: map[RangeKey]uint8{}, Size: size,
		slots: map[uint32][]netip.AddrPort{}}
}

// RenderNorthSouth computes the tc maps of rs, a Ruleset whose
// socket maps c holds (its group IDs name the Maglev tables, whose
// entries are slots of its groups), with Maglev tables of size entries (a
// prime up to MaglevMax; maglev.DefaultSize for 0). For each external
// frontend a Service port owns, it holds what a flow from outside the
// cluster meets (ruleset.Ruleset.Decide for an arriving source outside
// the pod network): the Maglev table of its External route's targets,
// masquerading to the first of Config.NodePortAddresses of the Ruleset's
// family where the Service masquerades external traffic (kept when there
// is none), or a flag (rejected: a TCP SYN is answered with a reset,
// anything else with an ICMP or ICMPv6 port unreachable; dropped), and a
// load-balancer IP with source ranges lets only them through (and its own
// load-balancer IPs, where FirewallAllowsNode says so). IPv4 and IPv6
// Rulesets share the maps: their keys do not collide.
func RenderNorthSouth(rs *ruleset.Ruleset, c *Contents, size int) (*NorthSouth, error) {
	return renderNorthSouth(rs, c, size, nil)
}

// renderNorthSouth is RenderNorthSouth, taking from prev (the previous
// sync's contents, or nil) each Maglev table whose slots are unchanged
// rather than computing it again: a table of 16,381 entries costs about
// 2 ms, 2.6 s for the 1,350 tables of 10,000 generated Services.
func renderNorthSouth(rs *ruleset.Ruleset, c *Contents, size int, prev *NorthSouth) (*NorthSouth, error) {
	if size == 0 {
		size = maglev.DefaultSize
	}
	if size > MaglevMax {
		return nil, fmt.Errorf("ebpf: Maglev table size %d above %d", size, MaglevMax)
	}
	ns := newNorthSouth(size)
	if rs == nil || c == nil || c.family != rs.Config().Family {
		return ns, nil
	}
	family := rs.Config().Family
	var masq Addr
	if i := slices.IndexFunc(rs.Config().NodePortAddresses, func(a netip.Addr) bool { return a.Is6() == (family == v1.IPv6Protocol) }); i >= 0 {
		masq = AddrOf(rs.Config().NodePortAddresses[i])
	}
	tables := map[uint32]bool{}
	for _, s := range rs.Services() {
		p, ok := c.ports.Get(s.Name)
		proto := protoOf(s.Name.Protocol)
		if !ok || proto == 0 {
			continue
		}
		for _, f := range s.Frontends() {
			if f.Kind != ruleset.KindNodePort && f.Kind != ruleset.KindExternalIP && f.Kind != ruleset.KindLoadBalancerIP || !keyed(f) || !rs.Owns(s, f) {
				continue
			}
			v, ok := extValue(s, f.Kind, p, masq)
			if !ok {
				continue
			}
			k := ServiceKey{Addr: AddrOf(f.Addr), Port: f.Port, Proto: proto}
			if f.Kind == ruleset.KindNodePort {
				k = NodePortKey(family, f.Port, proto)
			}
			ns.Ext[k] = v
			if v.Flags&FlagFirewall != 0 {
				ns.addRanges(s, v.Firewall)
			}
			if v.Flags&(FlagReject|FlagDrop) == 0 && !tables[v.ID] {
				tables[v.ID] = true
				targets := p.cluster
				if v.ID == p.base+1 {
					targets = p.local
				}
				if err := ns.addTable(v.ID, targets, prev); err != nil {
					return nil, fmt.Errorf("ebpf: Maglev table of %s: %w", s.Name, err)
				}
			}
		}
	}
	return ns, nil
}

// extValue is the svcp_ext value of s's external frontends of kind, for a
// flow arriving from outside the pod network: the External route, read
// as ruleset.Ruleset.Decide reads it, masqueraded where
// ExternalTraffic.Masquerade says. The firewall applies first, to the
// flows that reach the Service's rules (ruleset.Service.Firewalled:
// ExternalTraffic.Steered).
func extValue(s *ruleset.Service, kind ruleset.FrontendKind, p *portEntries, masq Addr) (ExtValue, bool) {
	var v ExtValue
	if kind == ruleset.KindLoadBalancerIP && s.ExternalTraffic.Steered && s.UsesFirewall() {
		v.Flags, v.Firewall = FlagFirewall, p.base
	}
	sv, ok := routeValue(s.External, s, p, 0)
	if !ok {
		return ExtValue{}, false
	}
	v.Flags |= sv.Flags
	if sv.Flags != 0 {
		return v, true
	}
	v.ID = sv.ID
	if s.ExternalTraffic.Masquerade {
		v.Masq = masq
	}
	return v, true
}

// addRanges adds the source ranges of s (and, with FirewallAllowsNode, its
// load-balancer IPs) under firewall id.
func (ns *NorthSouth) addRanges(s *ruleset.Service, id uint32) {
	v6 := id&v6Group != 0
	for _, r := range s.LoadBalancerSourceRanges {
		if r.Addr().Is6() == v6 {
			ns.Ranges[rangeKeyOf(id, r)] = 1
		}
	}
	if s.FirewallAllowsNode {
		for _, ip := range s.LoadBalancerIPs {
			if ip.Is6() == v6 {
				ns.Ranges[rangeKeyOf(id, netip.PrefixFrom(ip, ip.BitLen()))] = 1
			}
		}
	}
}

// addTable adds the Maglev table id of slots, the targets of group id in
// slot order: prev's when prev computed it of the same slots and size.
func (ns *NorthSouth) addTable(id uint32, slots []netip.AddrPort, prev *NorthSouth) error {
	ns.slots[id] = slots
	if prev != nil && prev.Size == ns.Size && prev.Maglev[id] != nil && slices.Equal(prev.slots[id], slots) {
		ns.Maglev[id] = prev.Maglev[id]
		return nil
	}
	if len(slots) > 1<<16 {
		return fmt.Errorf("%d targets: a table holds slots up to %d", len(slots), 1<<16)
	}
	tab, err := maglev.New(slots, ns.Size)
	if err != nil {
		return err
	}
	slotOf := make(map[netip.AddrPort]uint16, len(slots))
	for i, at := range slots {
		slotOf[netip.AddrPortFrom(at.Addr().Unmap(), at.Port())] = uint16(i)
	}
	targets := tab.Targets()
	t := new(MaglevTable)
	for i, e := range tab.Entries() {
		t[i] = slotOf[targets[e]]
	}
	ns.Maglev[id] = t
	return nil
}

// ExtTranslation is the model's answer for a flow arriving from outside.
type ExtTranslation struct {
	Verdict ruleset.Verdict
	// Entries counts the Maglev table's entries per backend, and
	// Masquerade is the address the source becomes (invalid: kept), when
	// Verdict is VerdictForward.
	Entries    map[netip.AddrPort]int
	Masquerade netip.Addr
}

// Lookup is a model, in Go, of svcp_tc_in's lookups for a new flow from
// src to dst with protocol proto, given the socket maps m, whose
// node_addrs and backends the tc programs share: the frontend at dst,
// else the node port when dst is a node address; the source ranges; the
// reject and drop flags; the Maglev table and the backends in the slots
// it names.
func (ns *NorthSouth) Lookup(m *Maps, proto uint8, src netip.Addr, dst netip.AddrPort) ExtTranslation {
	if ns == nil || m == nil || !dst.IsValid() {
		return ExtTranslation{}
	}
	family := v1.IPv4Protocol
	if dst.Addr().Unmap().Is6() {
		family = v1.IPv6Protocol
	}
	k := ServiceKey{Addr: AddrOf(dst.Addr()), Port: dst.Port(), Proto: proto}
	v, ok := ns.Ext[k]
	if !ok && m.NodeAddrs[k.Addr] != 0 {
		v, ok = ns.Ext[NodePortKey(family, dst.Port(), proto)]
	}
	switch {
	case !ok:
		return ExtTranslation{}
	case v.Flags&FlagFirewall != 0 && !ns.allowed(v.Firewall, src):
		return ExtTranslation{Verdict: ruleset.VerdictFirewall}
	case v.Flags&FlagReject != 0:
		return ExtTranslation{Verdict: ruleset.VerdictReject}
	case v.Flags&FlagDrop != 0:
		return ExtTranslation{Verdict: ruleset.VerdictDrop}
	}
	t := ExtTranslation{Verdict: ruleset.VerdictForward, Entries: map[netip.AddrPort]int{}}
	if tab := ns.Maglev[v.ID]; tab != nil {
		for _, slot := range tab[:min(ns.Size, MaglevMax)] {
			if b, ok := m.Backends[BackendKey{v.ID, uint32(slot)}]; ok {
				t.Entries[b.AddrPort()]++
			}
		}
	}
	if v.Masq != (Addr{}) {
		t.Masquerade = v.Masq.Netip()
	}
	return t
}

// allowed is the svcp_ranges lookup of src under firewall id.
func (ns *NorthSouth) allowed(id uint32, src netip.Addr) bool {
	for k := range ns.Ranges {
		if k.ID != id {
			continue
		}
		p := netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)-32)
		if p.Contains(netip.AddrFrom16(AddrOf(src))) {
			return true
		}
	}
	return false
}
