// Package model is a typed representation of nftables tables, into which
// both layouts of the nftables backend are rendered, and from which their
// nft text and netlink messages are made.
//
// # What is on the model
//
// Everything either layout writes:
//
//   - the table: family, name, comment (Table);
//   - chains: base chains with their type, hook and priority, regular
//     chains, comments (Chain, Hook);
//   - rules: lists of typed statements (Stmt) over typed expressions (Expr:
//     packet fields, numgen, concatenations), with comments (Rule);
//   - named sets and maps (Set), declared by the expressions their keys and
//     values come from (Key, Value: nft's typeof, which the flat layout
//     needs, a numgen field having no type name) or by type names
//     (KeyType, ValueType: kube-proxy's `type ipv4_addr . inet_proto .
//     inet_service : verdict`), with interval, dynamic and timeout flags,
//     the timeout, comments;
//   - elements (Element): keys and data values of typed fields (Datum:
//     addresses, prefixes for intervals, protocols, ports, integers; a
//     concatenation is a list of them), verdicts of verdict maps (`goto
//     service-…`, `drop`), comments.
//
// The flat layout renders a whole Table. Kube-proxy's layout (the default;
// nftables/render.go and the files it calls) renders transactions that
// also flush and delete, which a Table cannot say: a list of operations on
// these same objects (nftables/ops.go), each made into a knftables object
// by this package (TableObject, ChainObject, SetObject, PrintedRuleObject,
// ElementObject, and for flushes and deletes ChainName, SetName and
// ElementKey) or encoded for netlink from its typed values.
//
// No rule or element text is built by concatenating strings that
// something later splits again: every field of an element and every
// expression of a rule is a value with a type, printed once. Comments
// cannot end their string: a double quote in one is written as a single
// quote.
//
// # Writers
//
//   - Objects: knftables objects (the nft text of knftables transactions,
//     --dry-run and knftables' Fake);
//   - Script: one `nft -f` script that replaces the table, each set's
//     elements in one statement; Definitions and Redefinitions: the same
//     without the elements that Conn sends, for a table that does not
//     exist yet or for one that holds them;
//   - Conn: element additions, deletions and set flushes as netlink
//     messages, in as few transactions as the socket takes, written by
//     nftables/internal/nftnl as github.com/google/nftables encodes them.
//
// # Netlink
//
// nftables/internal/nftnl writes every nf_tables message of both layouts:
// kube-proxy's (chains, rules with anonymous sets, affinity sets, verdict
// elements; nftables/netlink.go turns the typed statements into its
// expressions) and the flat layout's elements, which Conn gives it row by
// row from the typed Elements, straight into one buffer per message
// (TestMessagesAsGoogleNftables compares the bytes with
// github.com/google/nftables', TestKernelFlatNetlinkMatchesNFT the listing
// with nft's). The flat layout's sets, chains and rules are written with
// nft, which writes their typeof user data; its rules change only when an
// endpoint count appears or goes. Elements of one-field interval sets
// (configuration: pod networks, Service ranges) also stay with nft, which
// writes them as pairs of interval ends; Conn refuses them, and verdicts,
// which the flat layout has none of.
//
// The package is internal: only the nftables renderers use it. It holds no
// policy, and does no I/O but in Conn.
package model

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/internal/prefix"
)

// Family is the address family of a table.
type Family uint8

const (
	IPv4 Family = iota + 1
	IPv6
)

// String is nft's name of the family: "ip" or "ip6".
func (f Family) String() string {
	if f == IPv6 {
		return "ip6"
	}
	return "ip"
}

// Table is one table with everything it holds, in the order it is written.
type Table struct {
	Family  Family
	Name    string
	Comment string
	Sets    []*Set
	Chains  []*Chain
	// Elements are the elements of the named sets and maps.
	Elements []Element
}

// Hook makes a chain a base chain.
type Hook struct {
	Type     string // "filter" or "nat"
	Hook     string // "prerouting", "input", "forward", "output", "postrouting"
	Priority string // "dstnat", "dstnat-10", "filter", "srcnat", …
}

// Chain is a chain and its rules, in order.
type Chain struct {
	Name    string
	Base    *Hook
	Comment string
	Rules   []Rule
}

// Rule is a list of statements, run in order, with an optional comment.
type Rule struct {
	Stmts   []Stmt
	Comment string
}

// Set is a named set (Value nil) or data map (Value set), declared by the
// expressions its keys and values are taken from (nft's typeof).
type Set struct {
	Name     string
	Key      []Expr
	Value    []Expr
	Interval bool
	Comment  string
	// KeyType and ValueType declare the set by nft's type names instead
	// (`type ipv4_addr . inet_proto . inet_service : verdict`); Key and
	// Value are then nil.
	KeyType, ValueType []Type
	// Dynamic lets rules add elements (`flags dynamic`).
	Dynamic bool
	// Expiring makes elements expire (`flags timeout`), each after the
	// timeout it was added with; a Timeout implies it.
	Expiring bool
	// Timeout, when not zero, is the lifetime of elements that rules add
	// without one of their own (`timeout 10800s`), in whole seconds.
	Timeout time.Duration
	// Size bounds the number of elements (0: the kernel's default, 65,535
	// for a dynamic set); the packet path adds none beyond it.
	Size uint32
}

// IsMap reports whether s is a map.
func (s *Set) IsMap() bool { return len(s.Value) > 0 || len(s.ValueType) > 0 }

// Element is one element of a named set or map: one Datum per field of the
// set's Key (and of its Value for a data map, or a Verdict for a verdict
// map). In an interval set, the last key field may be a prefix.
//
// An Element with Rows above 0 is a block: it stands for Rows elements of
// Set, each with the block's Comment (or, when its Source has RowComments,
// a comment of its own), whose keys all start with Key. Its Source makes
// each row: the rest of the row's key, and its value. A block
// has no Value or Verdict, and is not in a one-field interval set. A
// renderer writes many elements that differ in a field or two (a
// frontend's targets, numbered 0…N−1) as one block whose rows it makes
// from data of its own, instead of an element each; Expand makes elements
// of the rows.
type Element struct {
	Set     string
	Key     []Datum
	Value   []Datum
	Comment string
	// Verdict is the value of an element of a verdict map (Value nil).
	// Renderers may share one Verdict between elements: it is not
	// modified.
	Verdict *Verdict
	Rows    int
	Source  RowSource
}

// RowSource makes the rows of a block as they are read, for a renderer
// that holds them in a form of its own, cheaper than data: a frontend's
// targets as the Ruleset holds them. The rows it makes do not change while
// a table holds its block.
type RowSource interface {
	// Widths are the data of each row's part of the key and of its value.
	Widths() (key, value int)
	// AppendRow appends row i's part of the key, then its value, to dst.
	AppendRow(dst []Datum, i int) []Datum
}

// RowComments is a RowSource whose rows have comments of their own: a
// block of the elements of many Service ports, each with its port's
// comment. The block's Comment is then not used.
type RowComments interface {
	RowSource
	// RowComment is row i's comment.
	RowComment(i int) string
	// MaxCommentLen bounds the length of every row's comment.
	MaxCommentLen() int
}

// Datum is one field of an element key or value. It holds no pointer, so
// that the garbage collector does not scan the large arrays of them that a
// table's elements are.
type Datum struct {
	kind datumKind
	// bits is the length of a prefix.
	bits uint8
	// withLen prints a prefix's length even when it covers one address.
	withLen bool
	// is4 marks an IPv4 address in ip (its first 4 bytes); zoned an
	// address that had a zone, which a Datum does not keep.
	is4, zoned bool
	// ip is an address, or a protocol, port or integer (num) in its first
	// 4 bytes: a Datum is 21 bytes, and a table's elements hold hundreds
	// of thousands of them.
	ip [16]byte
}

func numDatum(k datumKind, n uint32) Datum {
	var d Datum
	d.setNum(k, n)
	return d
}

// setNum makes *d the datum of kind k with number n.
func (d *Datum) setNum(k datumKind, n uint32) {
	*d = Datum{kind: k}
	binary.LittleEndian.PutUint32(d.ip[:4], n)
}

// num is a protocol, port or integer datum's number.
func (d Datum) num() uint32 { return binary.LittleEndian.Uint32(d.ip[:4]) }

type datumKind uint8

const (
	datumAddr datumKind = iota + 1
	datumPrefix
	datumProto
	datumPort
	datumInt
)

// Addr is an IPv4 or IPv6 address. An address's zone is not kept: nft has
// none.
func Addr(a netip.Addr) Datum { return withAddr(Datum{kind: datumAddr}, a) }

// Prefix is a network: an interval of addresses.
func Prefix(p netip.Prefix) Datum {
	p = p.Masked()
	return withAddr(Datum{kind: datumPrefix, bits: uint8(p.Bits())}, p.Addr())
}

func withAddr(d Datum, a netip.Addr) Datum {
	d.putAddr(a)
	return d
}

// putAddr puts address a in *d.
func (d *Datum) putAddr(a netip.Addr) {
	d.is4, d.zoned = a.Is4(), a.Zone() != ""
	if d.is4 {
		b := a.As4()
		copy(d.ip[:], b[:])
	} else {
		d.ip = a.As16()
	}
}

// AppendAddrProtoPort appends Addr(a), Proto(proto) and Port(port) to
// dst, a frontend's key. It writes them in place: making each Datum in a
// temporary and copying it costs a flat layout's render more than the
// rest of the key.
func AppendAddrProtoPort(dst []Datum, a netip.Addr, proto uint8, port uint16) []Datum {
	n := len(dst)
	dst = slices.Grow(dst, 3)[:n+3]
	dst[n] = Datum{kind: datumAddr}
	dst[n].putAddr(a)
	dst[n+1].setNum(datumProto, uint32(proto))
	dst[n+2].setNum(datumPort, uint32(port))
	return dst
}

// addr is the datum's address (without its zone).
func (d Datum) addr() netip.Addr {
	if d.is4 {
		return netip.AddrFrom4([4]byte(d.ip[:4]))
	}
	return netip.AddrFrom16(d.ip)
}

// ipBytes is the datum's address in network byte order: 4 or 16 bytes.
func (d Datum) ipBytes() []byte {
	if d.is4 {
		return d.ip[:4]
	}
	return d.ip[:]
}

// Network is a prefix like Prefix that prints its length even when it
// covers one address (198.18.0.1/32).
func Network(p netip.Prefix) Datum {
	d := Prefix(p)
	d.withLen = true
	return d
}

// Proto is a transport protocol number (6 TCP, 17 UDP, 132 SCTP).
func Proto(p uint8) Datum { return numDatum(datumProto, uint32(p)) }

// Port is a transport port.
func Port(p uint16) Datum { return numDatum(datumPort, uint32(p)) }

// Int is a 32-bit integer in host byte order (a numgen value).
func Int(n uint32) Datum { return numDatum(datumInt, n) }

var protoNames = map[uint32]string{6: "tcp", 17: "udp", 132: "sctp"}

// String is the datum as nft prints it.
func (d Datum) String() string { return string(d.appendTo(nil)) }

// appendTo appends the datum as nft prints it.
func (d Datum) appendTo(b []byte) []byte {
	switch d.kind {
	case datumAddr:
		return d.addr().AppendTo(b)
	case datumPrefix:
		a := d.addr()
		b = a.AppendTo(b)
		if int(d.bits) == a.BitLen() && !d.withLen {
			return b
		}
		return strconv.AppendUint(append(b, '/'), uint64(d.bits), 10)
	case datumProto:
		if n, ok := protoNames[d.num()]; ok {
			return append(b, n...)
		}
		return strconv.AppendUint(b, uint64(d.num()), 10)
	case datumPort, datumInt:
		return strconv.AppendUint(b, uint64(d.num()), 10)
	}
	return b
}

// appendBytes appends the datum's netlink encoding, padded to 4 bytes as
// a field of a concatenation; for a prefix, its first address, or its
// last when last is set.
func (d Datum) appendBytes(b []byte, last bool) []byte {
	switch d.kind {
	case datumAddr:
		return append(b, d.ipBytes()...)
	case datumPrefix:
		start := len(b)
		b = append(b, d.ipBytes()...)
		if last {
			prefix.FillHost(b[start:], int(d.bits))
		}
		return b
	case datumProto:
		return append(b, byte(d.num()), 0, 0, 0)
	case datumPort:
		return append(binary.BigEndian.AppendUint16(b, uint16(d.num())), 0, 0)
	case datumInt:
		return binary.NativeEndian.AppendUint32(b, d.num())
	}
	return b
}

// dataBytes is the length of ds's netlink encoding: each field padded to
// 4 bytes.
func dataBytes(ds []Datum) int {
	n := 0
	for _, d := range ds {
		if (d.kind == datumAddr || d.kind == datumPrefix) && !d.is4 {
			n += 16
		} else {
			n += 4
		}
	}
	return n
}

// appendData appends fields joined by " . ".
func appendData(b []byte, ds []Datum) []byte {
	for i, d := range ds {
		if i > 0 {
			b = append(b, " . "...)
		}
		b = d.appendTo(b)
	}
	return b
}

// Expr is an expression that yields a value: a packet field, metadata, a
// random number or a concatenation of those.
type Expr interface {
	String() string
}

// Field is a field of the packet or its metadata.
type Field uint8

const (
	IPDaddr Field = iota + 1
	IPSaddr
	IP6Daddr
	IP6Saddr
	THDport
	// TCPDport is "tcp dport": as a map's typeof value, the type of a
	// port (nft 1.0.6 refuses rules on a map whose typeof value "ip daddr
	// . th dport" it read back from the kernel).
	TCPDport
	L4Proto
	Mark
	// UDPDport and SCTPDport are "udp dport" and "sctp dport": as a map's
	// typeof value, the type of a port (see TCPDport) of that protocol.
	UDPDport
	SCTPDport
)

var fieldNames = [...]string{
	IPDaddr: "ip daddr", IPSaddr: "ip saddr", IP6Daddr: "ip6 daddr", IP6Saddr: "ip6 saddr",
	THDport: "th dport", TCPDport: "tcp dport", L4Proto: "meta l4proto", Mark: "meta mark",
	UDPDport: "udp dport", SCTPDport: "sctp dport",
}

func (f Field) String() string { return fieldNames[f] }

// Numgen is a random number below Mod (`numgen random mod N`).
type Numgen struct{ Mod uint32 }

func (n Numgen) String() string { return fmt.Sprintf("numgen random mod %d", n.Mod) }

// Concat is the concatenation of expressions.
type Concat []Expr

func (c Concat) String() string { return join(c) }

func join[E fmt.Stringer](es []E) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return strings.Join(parts, " . ")
}

// Matches reports whether v, a value from a packet (an address, protocol,
// port or integer), falls in d: equal to it, or inside it for a prefix.
func (d Datum) Matches(v Datum) bool {
	if d.kind == datumPrefix && v.kind == datumAddr {
		return netip.PrefixFrom(d.addr(), int(d.bits)).Contains(v.addr())
	}
	return d == v
}

// AsPrefix is an address, as the prefix of its full length, or a prefix;
// false for the other data and for an address with a zone, which a prefix
// cannot hold.
func (d Datum) AsPrefix() (netip.Prefix, bool) {
	if d.zoned {
		return netip.Prefix{}, false
	}
	switch d.kind {
	case datumAddr:
		a := d.addr()
		return netip.PrefixFrom(a, a.BitLen()), true
	case datumPrefix:
		return netip.PrefixFrom(d.addr(), int(d.bits)), true
	}
	return netip.Prefix{}, false
}

// Uint is a protocol, port or integer; false for the other data.
func (d Datum) Uint() (uint32, bool) {
	switch d.kind {
	case datumProto, datumPort, datumInt:
		return d.num(), true
	}
	return 0, false
}

// bySet looks up a value per set name for elements one after another:
// those of one set mostly come in runs, and a run's names are one string,
// which compares equal without reading its bytes, so a run costs one map
// lookup.
type bySet[V any] struct {
	m          map[string]V
	last       string
	v          V
	ok, cached bool
}

func lookupBySet[V any](m map[string]V) *bySet[V] { return &bySet[V]{m: m} }

// get is m[set] and whether set is in m.
func (l *bySet[V]) get(set string) (V, bool) {
	if !l.cached || set != l.last {
		l.last, l.cached = set, true
		l.v, l.ok = l.m[set]
	}
	return l.v, l.ok
}
