package ebpf

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// Addr is an address as the maps hold it: 16 bytes, an IPv4 address in its
// IPv4-mapped IPv6 form (::ffff:a.b.c.d).
type Addr [16]byte

// AddrOf is a's map form; the zero Addr for an invalid a.
func AddrOf(a netip.Addr) Addr {
	if !a.IsValid() {
		return Addr{}
	}
	return a.Unmap().As16()
}

// Netip is the address a holds, IPv4 when it is IPv4-mapped.
func (a Addr) Netip() netip.Addr { return netip.AddrFrom16(a).Unmap() }

// Protocol numbers of the keys (IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP).
const (
	ProtoTCP  = 6
	ProtoUDP  = 17
	ProtoSCTP = 132
)

// protoOf is the IP protocol number of p, 0 for an unknown one.
func protoOf(p v1.Protocol) uint8 {
	switch p {
	case v1.ProtocolTCP:
		return ProtoTCP
	case v1.ProtocolUDP:
		return ProtoUDP
	case v1.ProtocolSCTP:
		return ProtoSCTP
	}
	return 0
}

// ServiceKey is a key of the services map: a frontend's address, port (in
// host byte order) and protocol. A node port has the zero Addr: it is
// served on every address of the node_addrs map. Its layout is struct
// svc_key of bpf/sock.c.
type ServiceKey struct {
	Addr  Addr
	Port  uint16
	Proto uint8
	Pad   uint8
}

// String is "198.19.0.10:80/6", or "node port 30080/6 (IPv4)" for a
// node port key.
func (k ServiceKey) String() string {
	a := k.Addr.Netip()
	if a.IsUnspecified() {
		family := "IPv6"
		if a.Is4() {
			family = "IPv4"
		}
		return fmt.Sprintf("node port %d/%d (%s)", k.Port, k.Proto, family)
	}
	return fmt.Sprintf("%s/%d", netip.AddrPortFrom(a, k.Port), k.Proto)
}

// Flags of a ServiceValue: what the programs do instead of translating.
const (
	// FlagReject: the Service has no usable endpoint anywhere; connect()
	// and sendmsg() fail with ECONNREFUSED (kube-proxy rejects).
	FlagReject = 1 << iota
	// FlagDrop: a Local traffic policy applies and this node has no
	// endpoint, or the address is an unallocated one of the Service
	// CIDRs; connect() and sendmsg() fail with EHOSTUNREACH (kube-proxy
	// drops: a socket cannot be left to time out).
	FlagDrop
	// FlagFirewall: the load-balancer source-range firewall lets none of
	// the node's addresses through; connect() and sendmsg() fail with
	// EPERM.
	FlagFirewall
)

// ServiceValue is a value of the services map. With no flag, a flow goes
// to one of Count backends (BackendKey{ID, 0} … {ID, Count−1}), each with
// probability 1/Count, and with Affinity > 0 the same client (network
// namespace) returns to its backend within Affinity seconds. Its layout
// is struct svc_value of bpf/sock.c.
type ServiceValue struct {
	ID       uint32
	Count    uint32
	Flags    uint32
	Affinity uint32
}

// BackendKey names slot Slot of the group ID. The backends map holds a
// group's slots in chunks of 8 (struct be_key and struct be_chunk of
// bpf/sock.c: element {ID, Slot/8} holds slot Slot at Slot%8); Maps and
// Ops list slots, and an executor packs them into elements.
type BackendKey struct {
	ID   uint32
	Slot uint32
}

// BackendValue is an endpoint in a backend slot (struct be_value of
// bpf/sock.c; the zero BackendValue is an empty slot).
type BackendValue struct {
	Addr Addr
	Port uint16
	Pad  uint16
}

// AddrPort is the endpoint v holds.
func (v BackendValue) AddrPort() netip.AddrPort { return netip.AddrPortFrom(v.Addr.Netip(), v.Port) }

// CIDRKey is a key of the service_cidrs LPM trie: a prefix of an Addr
// (an IPv4 prefix of length n has length 96+n). Its layout is struct
// cidr_key of bpf/sock.c.
type CIDRKey struct {
	Prefixlen uint32
	Addr      Addr
}

// cidrKeyOf is p's key.
func cidrKeyOf(p netip.Prefix) CIDRKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return CIDRKey{Prefixlen: uint32(bits), Addr: AddrOf(p.Masked().Addr())}
}

// Maps is the contents of the maps, as the programs read them: what an
// executor writes and what CheckState reads back. The one-byte values of
// the sets are 1.
type Maps struct {
	Services map[ServiceKey]ServiceValue
	Backends map[BackendKey]BackendValue
	// NodeAddrs are the node's addresses on which node ports are served.
	NodeAddrs map[Addr]uint8
	// ClusterAddrs are the cluster IPs: a flow to one on a port no
	// Service port serves is rejected.
	ClusterAddrs map[Addr]uint8
	// ServiceCIDRs are the Service CIDRs: a flow to an address in them
	// that is no cluster IP is dropped.
	ServiceCIDRs map[CIDRKey]uint8
}

// NewMaps returns empty Maps.
func NewMaps() *Maps {
	return &Maps{
		Services:     map[ServiceKey]ServiceValue{},
		Backends:     map[BackendKey]BackendValue{},
		NodeAddrs:    map[Addr]uint8{},
		ClusterAddrs: map[Addr]uint8{},
		ServiceCIDRs: map[CIDRKey]uint8{},
	}
}

// empty reports whether m has no element.
func (m *Maps) empty() bool {
	return len(m.Services)+len(m.Backends)+len(m.NodeAddrs)+len(m.ClusterAddrs)+len(m.ServiceCIDRs) == 0
}
