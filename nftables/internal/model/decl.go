package model

import (
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
)

// Type is an nft data type, by which a set or map is declared when it is
// not declared by the expressions its keys come from (Set.KeyType).
type Type uint8

const (
	TypeIPv4Addr Type = iota + 1
	TypeIPv6Addr
	TypeInetProto
	TypeInetService
	// TypeVerdict is the value type of a verdict map.
	TypeVerdict
)

var typeNames = [...]string{
	TypeIPv4Addr: "ipv4_addr", TypeIPv6Addr: "ipv6_addr", TypeInetProto: "inet_proto",
	TypeInetService: "inet_service", TypeVerdict: "verdict",
}

// String is nft's name of the type.
func (t Type) String() string { return typeNames[t] }

// declaration is what declares s, as nft reads it: `type K : V` or
// `typeof K : V`, without the keyword.
func (s *Set) declaration() (keyword, types string) {
	if len(s.KeyType) > 0 {
		types = join(s.KeyType)
		if len(s.ValueType) > 0 {
			types += " : " + join(s.ValueType)
		}
		return "type", types
	}
	types = Concat(s.Key).String()
	if len(s.Value) > 0 {
		types += " : " + Concat(s.Value).String()
	}
	return "typeof", types
}

// flags are the set's flags, in the order nft prints them.
func (s *Set) flags() []knftables.SetFlag {
	var flags []knftables.SetFlag
	if s.Interval {
		flags = append(flags, knftables.IntervalFlag)
	}
	if s.Dynamic {
		flags = append(flags, knftables.DynamicFlag)
	}
	if s.Expiring || s.Timeout != 0 {
		flags = append(flags, knftables.TimeoutFlag)
	}
	return flags
}

// writeBody writes the declaration of s between its braces, as knftables
// writes it: ` type … ; flags … ; timeout …s ; size … ; comment "…" ;`.
func (s *Set) writeBody(b *strings.Builder) {
	keyword, types := s.declaration()
	b.WriteString(" " + keyword + " " + types + " ;")
	if flags := s.flags(); len(flags) > 0 {
		b.WriteString(" flags ")
		for i, f := range flags {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(string(f))
		}
		b.WriteString(" ;")
	}
	if s.Timeout != 0 {
		b.WriteString(" timeout " + strconv.FormatInt(int64(s.Timeout.Seconds()), 10) + "s ;")
	}
	if s.Size > 0 {
		b.WriteString(" size " + strconv.FormatUint(uint64(s.Size), 10) + " ;")
	}
	b.WriteString(commentClause(s.Comment))
}

// KeyBytes is the netlink encoding of an element key (or data value): the
// fields' encodings concatenated, each padded to 4 bytes; for a prefix,
// its first address.
func KeyBytes(ds []Datum) []byte { return appendFields(nil, false, ds, nil) }
