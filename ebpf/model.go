package ebpf

import (
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// Translation is what the programs' lookups give for one destination.
type Translation struct {
	// Verdict is what the programs do with the call: VerdictForward
	// rewrites the destination to a backend; VerdictReject fails it with
	// ECONNREFUSED (no endpoints, or a cluster IP on a port no Service port
	// serves), VerdictDrop with EHOSTUNREACH (a Local policy without local
	// endpoints, or an unallocated address of the Service CIDRs),
	// VerdictFirewall with EPERM (the source-range firewall lets no address
	// of the node through); VerdictNotServed leaves it alone.
	Verdict ruleset.Verdict
	// ID is the backend group, Backends its backends in slot order (an
	// invalid AddrPort for a slot the backends map lacks), and Affinity
	// the ClientIP affinity timeout, when Verdict is VerdictForward.
	ID       uint32
	Backends []netip.AddrPort
	Affinity time.Duration
}

// Lookup is a model, in Go, of the programs' lookups (bpf/sock.c,
// lookup()) for a connect() or sendmsg() to dst with protocol proto
// (ProtoTCP, ProtoUDP): the services map at dst; else, when dst is in
// node_addrs, the node port key of its family; else a cluster IP
// (cluster_addrs) is rejected; else an address of the Service CIDRs is
// dropped; else the destination is not a Service. A nil m has no
// elements.
func (m *Maps) Lookup(proto uint8, dst netip.AddrPort) Translation {
	if m == nil {
		return Translation{}
	}
	a := AddrOf(dst.Addr())
	v, ok := m.Services[ServiceKey{Addr: a, Port: dst.Port(), Proto: proto}]
	if !ok {
		if m.NodeAddrs[a] != 0 {
			family := AddrOf(netip.IPv6Unspecified())
			if dst.Addr().Unmap().Is4() {
				family = AddrOf(netip.IPv4Unspecified())
			}
			v, ok = m.Services[ServiceKey{Addr: family, Port: dst.Port(), Proto: proto}]
		}
	}
	switch {
	case !ok && m.ClusterAddrs[a] != 0:
		return Translation{Verdict: ruleset.VerdictReject}
	case !ok && m.inServiceCIDRs(a):
		return Translation{Verdict: ruleset.VerdictDrop}
	case !ok:
		return Translation{}
	case v.Flags&FlagReject != 0:
		return Translation{Verdict: ruleset.VerdictReject}
	case v.Flags&FlagDrop != 0:
		return Translation{Verdict: ruleset.VerdictDrop}
	case v.Flags&FlagFirewall != 0:
		return Translation{Verdict: ruleset.VerdictFirewall}
	case v.Count == 0:
		return Translation{Verdict: ruleset.VerdictReject}
	}
	t := Translation{Verdict: ruleset.VerdictForward, ID: v.ID, Affinity: time.Duration(v.Affinity) * time.Second, Backends: make([]netip.AddrPort, v.Count)}
	for i := range v.Count {
		if b, ok := m.Backends[BackendKey{v.ID, i}]; ok {
			t.Backends[i] = b.AddrPort()
		}
	}
	return t
}

// inServiceCIDRs is the LPM trie's lookup of a.
func (m *Maps) inServiceCIDRs(a Addr) bool {
	for k := range m.ServiceCIDRs {
		p, err := netip.AddrFrom16(k.Addr).Prefix(int(k.Prefixlen))
		if err == nil && p.Contains(netip.AddrFrom16(a)) {
			return true
		}
	}
	return false
}

// Sticky is a client's entry in the affinity map: the slot and backend it
// was last sent to, and when (the kernel's monotonic clock).
type Sticky struct {
	Slot    uint32
	Backend netip.AddrPort
	Last    time.Duration
}

// Pick is the programs' choice of a backend for a Forward translation,
// given rnd (bpf_get_prandom_u32()), the client's affinity entry (nil when
// it has none) and now: the entry's backend when affinity applies, the
// entry is younger than the timeout and its slot still holds that
// backend; else slot rnd mod the number of backends. It returns the
// backend and the client's new entry (nil without affinity). Each of N
// backends is picked for 1/N of the values of rnd, up to 2^32 mod N of
// them.
func (t Translation) Pick(rnd uint32, sticky *Sticky, now time.Duration) (netip.AddrPort, *Sticky) {
	if t.Verdict != ruleset.VerdictForward || len(t.Backends) == 0 {
		return netip.AddrPort{}, nil
	}
	if t.Affinity == 0 {
		return t.Backends[rnd%uint32(len(t.Backends))], nil
	}
	if sticky != nil && now-sticky.Last < t.Affinity && now >= sticky.Last &&
		sticky.Slot < uint32(len(t.Backends)) && t.Backends[sticky.Slot] == sticky.Backend {
		return sticky.Backend, &Sticky{sticky.Slot, sticky.Backend, now}
	}
	slot := rnd % uint32(len(t.Backends))
	return t.Backends[slot], &Sticky{slot, t.Backends[slot], now}
}

// TraceOptions are the trace.Options whose outcomes the programs give: a
// cluster IP on a port no Service port serves is rejected, and an
// unallocated address of the Service CIDRs dropped, as kube-proxy's
// nftables mode does; the firewall applies to flows that reach the
// Service's rules (FirewallFirst off).
var TraceOptions = trace.Options{RejectUnknownPorts: true, DropUnallocated: true}
