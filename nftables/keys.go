package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// parseElementKey is the key of an element of one of the maps and sets
// that hold Service ports' elements, as knftables lists it; ok is false
// for the elements of other sets.
func (r *renderer) parseElementKey(e *knftables.Element) (k elemKey, ok bool, err error) {
	name := e.Set + e.Map
	in := slices.Index(containerNames[:], name)
	if in < 0 {
		return elemKey{}, false, nil
	}
	k.in = container(in)
	fields := e.Key
	if k.in == inHairpin {
		// ADDR . ADDR . PROTO . PORT, the address twice.
		if len(fields) != 4 || fields[0] != fields[1] {
			return elemKey{}, false, fmt.Errorf("nftables: element %q of %s: not one of ours", e.Key, name)
		}
		fields = fields[1:]
	}
	addr, proto, port, err := parseKeyFields(fields, r.cfg.Family == v1.IPv6Protocol)
	nodePort := k.in == inServiceNodePorts || k.in == inNoEndpointNodePorts
	if err != nil || (k.in == inClusterIPs) != (proto == "") || nodePort == addr.IsValid() || k.in == inHairpin && proto == "" {
		return elemKey{}, false, fmt.Errorf("nftables: element %q of %s: not one of ours", e.Key, name)
	}
	k.addr, k.port = addr, port
	if proto != "" {
		k.proto = v1.Protocol(strings.ToUpper(proto))
	}
	return k, true, nil
}

// parseKeyFields parses the key of an element of the backend's maps and
// sets, as knftables holds it: an address, a protocol and a port, or
// both. proto is "" when the key has no protocol and port, addr invalid
// when it has no address.
func parseKeyFields(fields []string, v6 bool) (addr netip.Addr, proto string, port uint16, err error) {
	bad := fmt.Errorf("key %q", fields)
	rest := fields
	if len(fields) != 2 {
		if len(fields) == 0 {
			return netip.Addr{}, "", 0, bad
		}
		if addr, err = netip.ParseAddr(fields[0]); err != nil || !familyAddr(addr, v6) {
			return netip.Addr{}, "", 0, bad
		}
		rest = fields[1:]
	}
	switch len(rest) {
	case 0:
		return addr, "", 0, nil
	case 2:
		p, err := strconv.ParseUint(rest[1], 10, 16)
		if _, ok := protoNumbers[rest[0]]; !ok || err != nil {
			return netip.Addr{}, "", 0, bad
		}
		return addr, rest[0], uint16(p), nil
	}
	return netip.Addr{}, "", 0, bad
}

var protoNumbers = map[string]byte{"tcp": 6, "udp": 17, "sctp": 132}
