package conntrack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Cleaner deletes the conntrack entries of one IP family that filters
// select. NetlinkCleaner is the real one; a proxy's tests can fake it.
type Cleaner interface {
	Clean(family v1.IPFamily, filters []Filter) (CleanResult, error)
}

var _ Cleaner = (*NetlinkCleaner)(nil)

// CleanResult says what one Clean did.
type CleanResult struct {
	// Scanned is the number of entries of the family listed.
	Scanned int
	// Matched is the number of entries the filters selected.
	Matched int
	// Deleted is the number of selected entries that are gone: deleted, or
	// already gone (expired) when the delete came.
	Deleted int
}

// NetlinkCleaner is a Cleaner that talks ctnetlink through
// github.com/vishvananda/netlink: it lists the table of the family once and
// deletes each selected entry. It holds no policy: which entries go is the
// filters' business.
//
// It cannot apply SCTP filters: netlink v1.3.1 does not decode the ports of
// SCTP entries. Clean reports SCTP filters as an error and applies the rest.
type NetlinkCleaner struct {
	h     *netlink.Handle
	owned bool
}

// CleanerConfig says which conntrack table a NetlinkCleaner cleans. The
// zero CleanerConfig is the table of the calling thread's network
// namespace.
type CleanerConfig struct {
	// NetNS, when not "", is the path of the network namespace whose table
	// is cleaned (/run/netns/NAME, /proc/PID/ns/net), as the executors'
	// ExecutorConfig.NetNS: give both the same path.
	NetNS string
	// Handle, when not nil, is the netlink handle to use instead, which
	// must have a NETLINK_NETFILTER socket (netlink.NewHandleAt(ns,
	// unix.NETLINK_NETFILTER) for another network namespace): a handle
	// without one would silently fall back to a socket in the calling
	// thread's namespace. It stays the caller's to close. It cannot be
	// given with NetNS.
	Handle *netlink.Handle
}

// NewNetlinkCleaner returns a NetlinkCleaner of the table that cfg names.
// The handle it opens (without cfg.Handle) is released by Close.
func NewNetlinkCleaner(cfg CleanerConfig) (*NetlinkCleaner, error) {
	switch {
	case cfg.Handle != nil && cfg.NetNS != "":
		return nil, errors.New("conntrack: both a netlink handle and a network namespace")
	case cfg.Handle != nil:
		if !cfg.Handle.SupportsNetlinkFamily(unix.NETLINK_NETFILTER) {
			return nil, errors.New("conntrack: netlink handle has no NETLINK_NETFILTER socket")
		}
		return &NetlinkCleaner{h: cfg.Handle}, nil
	case cfg.NetNS != "":
		ns, err := netns.GetFromPath(cfg.NetNS)
		if err != nil {
			return nil, fmt.Errorf("conntrack: opening network namespace %s: %w", cfg.NetNS, err)
		}
		defer ns.Close() // the handle's socket keeps the namespace
		h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
		if err != nil {
			return nil, fmt.Errorf("conntrack: netlink handle in %s: %w", cfg.NetNS, err)
		}
		return &NetlinkCleaner{h: h, owned: true}, nil
	}
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("conntrack: netlink handle: %w", err)
	}
	return &NetlinkCleaner{h: h, owned: true}, nil
}

// Close releases the handle if NewNetlinkCleaner opened it.
func (c *NetlinkCleaner) Close() {
	if c != nil && c.owned && c.h != nil {
		c.h.Close()
	}
}

// Clean lists the conntrack table of family once and deletes the entries that
// filters select (see Matcher). With no filters it does nothing. An
// interrupted dump (the table changed while it was listed) is reported as an
// error after the entries that were listed have been dealt with.
func (c *NetlinkCleaner) Clean(family v1.IPFamily, filters []Filter) (CleanResult, error) {
	if c == nil || c.h == nil {
		return CleanResult{}, errors.New("conntrack: NetlinkCleaner not made by NewNetlinkCleaner")
	}
	var nlFamily netlink.InetFamily
	switch family {
	case v1.IPv4Protocol:
		nlFamily = unix.AF_INET
	case v1.IPv6Protocol:
		nlFamily = unix.AF_INET6
	default:
		return CleanResult{}, fmt.Errorf("conntrack: unknown IP family %q", family)
	}
	var errs []error
	usable := make([]Filter, 0, len(filters))
	sctp := 0
	for _, f := range filters {
		if f.Protocol == v1.ProtocolSCTP {
			sctp++
			continue
		}
		usable = append(usable, f)
	}
	if sctp > 0 {
		errs = append(errs, fmt.Errorf("conntrack: %d SCTP filters not applied: the netlink library does not decode SCTP ports", sctp))
	}
	if len(usable) == 0 {
		return CleanResult{}, errors.Join(errs...)
	}
	m := &flowMatcher{m: NewMatcher(usable), v4: family == v1.IPv4Protocol}
	deleted, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, nlFamily, m)
	if err != nil {
		errs = append(errs, fmt.Errorf("conntrack: clean %s: %w", family, err))
	}
	return CleanResult{Scanned: m.scanned, Matched: m.matched, Deleted: int(deleted)}, errors.Join(errs...)
}

// flowMatcher adapts a Matcher to netlink's CustomConntrackFilter and counts.
type flowMatcher struct {
	m                *Matcher
	v4               bool
	scanned, matched int
}

func (a *flowMatcher) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	a.scanned++
	fl, ok := FlowFromNetlink(f)
	if !ok || fl.OrigDst.Addr().Is4() != a.v4 || !a.m.Matches(fl) {
		return false
	}
	a.matched++
	return true
}

// FlowFromNetlink converts a netlink conntrack entry. It reports false for
// protocols other than TCP, UDP and SCTP, and for entries whose addresses it
// cannot read.
func FlowFromNetlink(f *netlink.ConntrackFlow) (Flow, bool) {
	if f == nil {
		return Flow{}, false
	}
	var p v1.Protocol
	switch f.Forward.Protocol {
	case unix.IPPROTO_TCP:
		p = v1.ProtocolTCP
	case unix.IPPROTO_UDP:
		p = v1.ProtocolUDP
	case unix.IPPROTO_SCTP:
		p = v1.ProtocolSCTP
	default:
		return Flow{}, false
	}
	dst, ok1 := addrPort(f.Forward.DstIP, f.Forward.DstPort)
	src, ok2 := addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort)
	if !ok1 || !ok2 {
		return Flow{}, false
	}
	return Flow{Protocol: p, OrigDst: dst, ReplySrc: src}, true
}

func addrPort(ip net.IP, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Unmap(), port), true
}
