package model

import (
	"fmt"
	"strconv"
)

// CtOriginal is a field of a connection's original direction, as conntrack
// recorded it before any NAT: after a DNAT, the address and port that the
// client asked for.
type CtOriginal uint8

const (
	// CtOrigIPDaddr is `ct original ip daddr`.
	CtOrigIPDaddr CtOriginal = iota + 1
	// CtOrigIP6Daddr is `ct original ip6 daddr`.
	CtOrigIP6Daddr
	// CtOrigProtoDst is `ct original proto-dst`, the original destination
	// port; nft types it only in a rule that matches `meta l4proto`
	// first.
	CtOrigProtoDst
)

var ctOriginalNames = [...]string{
	CtOrigIPDaddr: "ct original ip daddr", CtOrigIP6Daddr: "ct original ip6 daddr", CtOrigProtoDst: "ct original proto-dst",
}

func (c CtOriginal) String() string { return ctOriginalNames[c] }

// UpdateMap adds the element Key : Value to the dynamic map Map with a
// timeout of Timeout seconds, or, when Map holds Key already, keeps its
// value and restarts its timeout
// (`update @m { KEY timeout 600s : VALUE }`).
type UpdateMap struct {
	Map     string
	Key     []Expr
	Timeout uint32
	Value   []Expr
}

func (s UpdateMap) String() string { return string(s.appendText(nil)) }

func (s UpdateMap) appendText(b []byte) []byte {
	b = appendExprs(append(append(append(b, "update @"...), s.Map...), " { "...), s.Key)
	b = strconv.AppendUint(append(b, " timeout "...), uint64(s.Timeout), 10)
	return append(appendExprs(append(b, "s : "...), s.Value), " }"...)
}

// DeleteMap deletes the element Key from the dynamic map Map, if it is
// there (`delete @m { KEY : VALUE }`). The kernel takes a dynamic-map
// statement only with a value; a deletion ignores it.
type DeleteMap struct {
	Map   string
	Key   []Expr
	Value []Expr
}

func (s DeleteMap) String() string { return string(s.appendText(nil)) }

func (s DeleteMap) appendText(b []byte) []byte {
	b = appendExprs(append(append(append(b, "delete @"...), s.Map...), " { "...), s.Key)
	return append(appendExprs(append(b, " : "...), s.Value), " }"...)
}

// JHash is the kernel's jhash of Key's bytes (each field padded to 4
// bytes) with Seed, scaled to 32 bits
// (`jhash ip6 saddr . ip6 daddr . th dport mod 4294967295 seed 0x1`). Two
// rules that hash the same bytes with the same seed get the same value.
type JHash struct {
	Key  []Expr
	Seed uint32
}

func (h JHash) String() string {
	return fmt.Sprintf("jhash %s mod 4294967295 seed %#x", Concat(h.Key), h.Seed)
}

// DNATMaps rewrites the destination address to the value that AddrKey has
// in the map AddrMap and the port to the value that PortKey has in the map
// PortMap (`dnat ip6 to K map @a : K2 map @p`); a key that either map does
// not hold ends the rule.
type DNATMaps struct {
	Family           Family
	AddrKey, PortKey []Expr
	AddrMap, PortMap string
}

func (s DNATMaps) String() string {
	return fmt.Sprintf("dnat %s to %s map @%s : %s map @%s", s.Family, Concat(s.AddrKey), s.AddrMap, Concat(s.PortKey), s.PortMap)
}

// size is the datum's own length in bytes, outside a concatenation.
func (d Datum) size() int {
	switch d.kind {
	case datumPort:
		return 2
	case datumProto:
		return 1
	case datumAddr, datumPrefix:
		return len(d.ipBytes())
	}
	return 4
}
