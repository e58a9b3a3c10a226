package model

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Stmt is one statement of a rule: a match, which ends the rule when the
// packet fails it, or an action.
type Stmt interface {
	String() string
}

// textAppender is a statement that appends its text to a buffer, which
// spares Rule.String a string per statement.
type textAppender interface {
	appendText(b []byte) []byte
}

// InSet matches when Key is (Neg: is not) an element of the named Set.
type InSet struct {
	Key []Expr
	Set string
	Neg bool
}

func (s InSet) String() string { return string(s.appendText(nil)) }

func (s InSet) appendText(b []byte) []byte {
	b = append(appendExprs(b, s.Key), ' ')
	if s.Neg {
		b = append(b, "!= "...)
	}
	return append(append(b, '@'), s.Set...)
}

// appendExprs appends expressions joined by " . ".
func appendExprs(b []byte, es []Expr) []byte {
	for i, e := range es {
		if i > 0 {
			b = append(b, " . "...)
		}
		if f, ok := e.(Field); ok {
			b = append(b, fieldNames[f]...)
		} else {
			b = append(b, e.String()...)
		}
	}
	return b
}

// Equal matches when Field equals (Neg: differs from) Value.
type Equal struct {
	Field Field
	Value Datum
	Neg   bool
}

func (s Equal) String() string { return string(s.appendText(nil)) }

func (s Equal) appendText(b []byte) []byte {
	b = append(append(b, fieldNames[s.Field]...), ' ')
	if s.Neg {
		b = append(b, "!= "...)
	}
	return s.Value.appendTo(b)
}

// FibLocal matches when the destination (or, with Saddr, the source)
// address is one of the node's own (`fib daddr type local`).
type FibLocal struct{ Saddr bool }

func (s FibLocal) String() string {
	if s.Saddr {
		return "fib saddr type local"
	}
	return "fib daddr type local"
}

// CtNew matches the first packet of a connection (`ct state new`).
type CtNew struct{}

func (CtNew) String() string { return "ct state new" }

// CtDNAT matches packets of connections whose destination was rewritten.
type CtDNAT struct{}

func (CtDNAT) String() string { return "ct status dnat" }

// MarkClear matches packets that do not carry any of Bits in their mark.
// With Keywords it prints as `mark and 0x004000 == 0`, otherwise as
// `meta mark & 0x004000 == 0`; both are the same statement.
type MarkClear struct {
	Bits     uint32
	Keywords bool
}

func (s MarkClear) String() string {
	if s.Keywords {
		return fmt.Sprintf("mark and %#08x == 0", s.Bits)
	}
	return fmt.Sprintf("meta mark & %#08x == 0", s.Bits)
}

// MarkAny matches packets that carry any of Bits in their mark
// (`mark and 0x00004000 != 0`).
type MarkAny struct{ Bits uint32 }

func (s MarkAny) String() string { return fmt.Sprintf("mark and %#08x != 0", s.Bits) }

// MarkOr sets Bits in the packet mark. With Keywords it prints as
// `mark set mark or 0x004000`.
type MarkOr struct {
	Bits     uint32
	Keywords bool
}

func (s MarkOr) String() string {
	if s.Keywords {
		return fmt.Sprintf("mark set mark or %#08x", s.Bits)
	}
	return fmt.Sprintf("meta mark set meta mark | %#08x", s.Bits)
}

// MarkXor flips Bits in the packet mark. With Keywords it prints as
// `mark set mark xor 0x004000`.
type MarkXor struct {
	Bits     uint32
	Keywords bool
}

func (s MarkXor) String() string {
	if s.Keywords {
		return fmt.Sprintf("mark set mark xor %#08x", s.Bits)
	}
	return fmt.Sprintf("meta mark set meta mark ^ %#08x", s.Bits)
}

// DNATMap rewrites the destination address and port to the value that Key
// has in the data Map (`dnat ip to KEY map @MAP`).
type DNATMap struct {
	Family Family
	Key    []Expr
	Map    string
}

func (s DNATMap) String() string {
	return fmt.Sprintf("dnat %s to %s map @%s", s.Family, Concat(s.Key), s.Map)
}

// Masquerade rewrites the source to the outgoing interface's address, with
// a fully random source port.
type Masquerade struct{}

func (Masquerade) String() string { return "masquerade fully-random" }

// Verdict ends the rule with a verdict: "accept", "drop", "reject",
// "return", or with Chain "jump" or "goto".
type Verdict struct {
	Kind  string
	Chain string
}

func (s Verdict) String() string { return string(s.appendText(nil)) }

func (s Verdict) appendText(b []byte) []byte {
	b = append(b, s.Kind...)
	if s.Chain != "" {
		b = append(append(b, ' '), s.Chain...)
	}
	return b
}

// Drop, Reject, Return and Jump are the verdicts the renderers use.
var (
	Drop   = Verdict{Kind: "drop"}
	Reject = Verdict{Kind: "reject"}
	Return = Verdict{Kind: "return"}
)

// Jump is a jump to chain.
func Jump(chain string) Verdict { return Verdict{Kind: "jump", Chain: chain} }

// Goto is a goto to chain.
func Goto(chain string) Verdict { return Verdict{Kind: "goto", Chain: chain} }

// AddrIn matches when the address Field is (Neg: is not) one of Values,
// addresses or networks. With one value and no Braces it is a comparison
// (`ip saddr 198.18.0.0/16`), otherwise an anonymous set
// (`ip saddr != { 198.18.0.0/16 , 198.19.0.1 }`).
type AddrIn struct {
	Field  Field
	Values []Datum
	Braces bool
	Neg    bool
}

func (s AddrIn) String() string { return string(s.appendText(nil)) }

func (s AddrIn) appendText(b []byte) []byte {
	b = append(append(b, fieldNames[s.Field]...), ' ')
	if s.Neg {
		b = append(b, "!= "...)
	}
	if len(s.Values) == 1 && !s.Braces {
		return s.Values[0].appendTo(b)
	}
	b = append(b, "{ "...)
	for i, v := range s.Values {
		if i > 0 {
			b = append(b, " , "...)
		}
		b = v.appendTo(b)
	}
	return append(b, " }"...)
}

// DportEq matches the transport protocol Proto (6, 17 or 132) with
// destination port Port (`tcp dport 80`).
type DportEq struct {
	Proto uint8
	Port  uint16
}

func (s DportEq) String() string { return string(s.appendText(nil)) }

func (s DportEq) appendText(b []byte) []byte {
	b = append(Proto(s.Proto).appendTo(b), " dport "...)
	return strconv.AppendUint(b, uint64(s.Port), 10)
}

// NumgenGoto picks one of Chains at random, each with the same chance,
// and goes to it (`numgen random mod 2 vmap { 0 : goto a , 1 : goto b }`).
// It ends the rule.
type NumgenGoto struct{ Chains []string }

func (s NumgenGoto) String() string { return string(s.appendText(nil)) }

func (s NumgenGoto) appendText(b []byte) []byte {
	b = strconv.AppendInt(append(b, "numgen random mod "...), int64(len(s.Chains)), 10)
	b = append(b, " vmap {"...)
	for i, c := range s.Chains {
		if i > 0 {
			// The space before the comma keeps the chain name a word of
			// its own for knftables' Fake.
			b = append(b, " ,"...)
		}
		b = strconv.AppendInt(append(b, ' '), int64(i), 10)
		b = append(append(b, " : goto "...), c...)
	}
	return append(b, " }"...)
}

// UpdateSet adds the value of Field to the named Set, or refreshes its
// timeout (`update @set { ip saddr }`).
type UpdateSet struct {
	Set   string
	Field Field
}

func (s UpdateSet) String() string { return string(s.appendText(nil)) }

func (s UpdateSet) appendText(b []byte) []byte {
	b = append(append(append(b, "update @"...), s.Set...), " { "...)
	return append(append(b, fieldNames[s.Field]...), " }"...)
}

// DNATTo rewrites the destination address and port (`dnat to ADDR:PORT`).
type DNATTo struct{ To netip.AddrPort }

func (s DNATTo) String() string { return string(s.appendText(nil)) }

func (s DNATTo) appendText(b []byte) []byte { return s.To.AppendTo(append(b, "dnat to "...)) }

// NumgenDNAT rewrites the destination address and port to one of Targets,
// picked at random, each with the same chance, through an anonymous map
// (`dnat ip addr . port to numgen random mod 2 map { 0 : 198.18.64.2 .
// 8080 , 1 : 198.18.65.2 . 8080 }`).
type NumgenDNAT struct {
	Family  Family
	Targets []netip.AddrPort
}

func (s NumgenDNAT) String() string { return string(s.appendText(nil)) }

func (s NumgenDNAT) appendText(b []byte) []byte {
	b = append(append(append(b, "dnat "...), s.Family.String()...), " addr . port to numgen random mod "...)
	b = strconv.AppendInt(b, int64(len(s.Targets)), 10)
	b = append(b, " map {"...)
	for i, t := range s.Targets {
		if i > 0 {
			b = append(b, " ,"...)
		}
		b = strconv.AppendInt(append(b, ' '), int64(i), 10)
		b = t.Addr().AppendTo(append(b, " : "...))
		b = strconv.AppendUint(append(b, " . "...), uint64(t.Port()), 10)
	}
	return append(b, " }"...)
}

// VmapLookup looks Key up in the verdict map Map and applies the verdict
// of the element it finds (`ip daddr . meta l4proto . th dport vmap @m`);
// a packet without an element goes on to the next rule.
type VmapLookup struct {
	Key []Expr
	Map string
}

func (s VmapLookup) String() string { return string(s.appendText(nil)) }

func (s VmapLookup) appendText(b []byte) []byte {
	return append(append(appendExprs(b, s.Key), " vmap @"...), s.Map...)
}
