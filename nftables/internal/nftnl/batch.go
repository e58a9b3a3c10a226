// Package nftnl encodes nf_tables netlink messages for both layouts of
// the nftables backend: kube-proxy's incremental syncs as one Batch
// (chains, rules, named and anonymous sets, set elements), sent to the
// kernel over a NETLINK_NETFILTER socket (Conn), and the flat layout's
// element messages (ElementsMessage, FlushSetMessage), which package model
// sends. Every attribute is written with nftables/internal/nlattr.
//
// It exists because the nft CLI reads every chain and set of a table into
// its cache before each transaction, so that even a one-element update
// costs time in proportion to the table; a batch sent here costs what the
// kernel does with it. The encoding follows what nft 1.0.6 sends for the
// same statements, user data included, so that `nft list table` prints a
// table written here exactly as one written by nft.
//
// Encoding (Batch) is pure; Conn does the I/O.
package nftnl

import (
	"slices"
	"strconv"

	"github.com/svcproxy/svcproxy/nftables/internal/nlattr"
)

// Family is the address family of a table: unix.AF_INET or unix.AF_INET6.
type Family uint8

// The two families the nftables backend uses.
const (
	IPv4 Family = 2
	IPv6 Family = 10
)

// nf_tables message types (NFT_MSG_*), within NFNL_SUBSYS_NFTABLES.
const (
	msgNewChain   = 3
	msgDelChain   = 5
	msgNewRule    = 6
	msgDelRule    = 8
	msgNewSet     = 9
	msgDelSet     = 11
	msgNewSetElem = 12
	msgDelSetElem = 14
)

// Netlink header flags.
const (
	flagRequest = 0x1
	flagAck     = 0x4
	flagCreate  = 0x400
	flagAppend  = 0x800
)

// Attribute types.
const (
	attrTableName = 1

	attrChainTable = 1
	attrChainName  = 3

	attrRuleTable    = 1
	attrRuleChain    = 2
	attrRuleExprs    = 4
	attrRuleUserdata = 7

	attrListElem = 1
	attrExprName = 1
	attrExprData = 2

	attrSetTable    = 1
	attrSetName     = 2
	attrSetFlags    = 3
	attrSetKeyType  = 4
	attrSetKeyLen   = 5
	attrSetDataType = 6
	attrSetDataLen  = 7
	attrSetDesc     = 9
	attrSetID       = 10
	attrSetTimeout  = 11
	attrSetUserdata = 13
	attrSetDescSize = 1

	attrElemListTable = 1
	attrElemListSet   = 2
	attrElemListElems = 3
	attrElemListSetID = 4

	attrElemKey      = 1
	attrElemData     = 2
	attrElemFlags    = 3
	attrElemUserdata = 6

	attrDataValue   = 1
	attrDataVerdict = 2

	attrVerdictCode  = 1
	attrVerdictChain = 2
)

// Set flags (NFT_SET_*).
const (
	SetAnonymous = 0x1
	SetConstant  = 0x2
	SetInterval  = 0x4
	SetMap       = 0x8
	SetTimeout   = 0x10
	SetEval      = 0x20
)

// Set key and data types: nft's datatype numbers.
const (
	TypeInteger  = 4
	TypeIPv4Addr = 7
	TypeIPv6Addr = 8
	// TypeVerdict is NFT_DATA_VERDICT, the data type of verdict maps.
	TypeVerdict = 0xffffff00
)

// Verdict codes.
const (
	VerdictDrop   int32 = 0
	VerdictAccept int32 = 1
	VerdictJump   int32 = -3
	VerdictGoto   int32 = -4
	VerdictReturn int32 = -5
)

// Verdict is a verdict: a code and, for jump and goto, a chain.
type Verdict struct {
	Code  int32
	Chain string
}

// Element is one set or map element.
type Element struct {
	Key []byte
	// Verdict is the element's data in a verdict map; nil in a set.
	Verdict *Verdict
	// Data is the element's value in a data map; nil otherwise.
	Data []byte
	// IntervalEnd marks the end of an interval in an interval set.
	IntervalEnd bool
	// IntervalOpen marks the start of an interval that runs to the last
	// key, which has no end element.
	IntervalOpen bool
	// Comment is stored as the element's user data, as nft stores it.
	Comment string
}

// Set describes a named set, or an anonymous one (Flags has
// SetAnonymous) that a rule's Lookup carries.
type Set struct {
	// Name is the set's name; anonymous sets get one from the kernel.
	Name     string
	Flags    uint32
	KeyType  uint32
	KeyLen   uint32
	DataType uint32 // with SetMap
	// DataLen is the length of a data map's values; 0 for a verdict map.
	DataLen uint32
	// TimeoutMS is the default element timeout, with SetTimeout.
	TimeoutMS uint64
	// Userdata is what nft stores with the set (byte order, typeof);
	// nft reads it back to print the set.
	Userdata []byte
	// Elements are the elements of an anonymous set.
	Elements []Element
	// Size is the size the set is declared with when it is constant; 0
	// means the number of Elements.
	Size uint32
}

// message is one encoded nf_tables message, without its netlink header.
type message struct {
	typ   uint16
	flags uint16
	body  []byte
	// what names the operation in errors.
	what string
}

// Batch is one transaction on one table: the kernel applies all of its
// messages or none. The zero value is not usable; see NewBatch.
type Batch struct {
	family Family
	table  string
	msgs   []message
	// setID numbers the sets that the batch creates, so that rules can
	// refer to them before the kernel names them.
	setID uint32
	// anonPrefix names the anonymous sets; "" lets the kernel name them.
	anonPrefix string
}

// NewBatch returns an empty batch on the table of a family.
func NewBatch(family Family, table string) *Batch {
	return &Batch{family: family, table: table}
}

// NameAnonymousSets names the anonymous sets of b's rules prefix followed
// by their set id, instead of asking the kernel for a name as nft does
// ("__set%d"): to find a free number the kernel reads the name of every set
// of the table, work that grows with the table for every set added.
// Names must be unique in the table: the prefix must be one that no other
// batch used while the sets it named may still exist, and should start with
// "__", which marks anonymous sets. `nft list` does not show them: it
// prints anonymous sets inline, whatever their names.
func (b *Batch) NameAnonymousSets(prefix string) { b.anonPrefix = prefix }

// Len is the number of operations in b.
func (b *Batch) Len() int { return len(b.msgs) }

func (b *Batch) add(typ, flags uint16, what string, body func(*attrs)) {
	a := &attrs{buf: []byte{byte(b.family), 0, 0, 0}} // nfgenmsg: family, version, resource id
	body(a)
	b.msgs = append(b.msgs, message{typ: typ, flags: flags, body: a.buf, what: what})
}

// AddChain adds a regular chain; like `nft add chain`, an existing one is
// not an error.
func (b *Batch) AddChain(name string) {
	b.add(msgNewChain, flagCreate, "add chain "+name, func(a *attrs) {
		a.str(attrChainTable, b.table)
		a.str(attrChainName, name)
	})
}

// DelChain deletes a chain, which must be empty and unreferenced.
func (b *Batch) DelChain(name string) {
	b.add(msgDelChain, 0, "delete chain "+name, func(a *attrs) {
		a.str(attrChainTable, b.table)
		a.str(attrChainName, name)
	})
}

// FlushChain deletes every rule of a chain.
func (b *Batch) FlushChain(name string) {
	b.add(msgDelRule, 0, "flush chain "+name, func(a *attrs) {
		a.str(attrRuleTable, b.table)
		a.str(attrRuleChain, name)
	})
}

// AddRule appends a rule to a chain. Anonymous sets that its Lookups carry
// are created first, in the same batch. A non-empty comment is stored as the
// rule's user data, as nft stores it.
func (b *Batch) AddRule(chain string, exprs []Expr, comment string) {
	exprs = slices.Clone(exprs)
	for i, e := range exprs {
		if l, ok := e.(Lookup); ok && l.Anonymous != nil {
			l.Set, l.setID = b.newSet(*l.Anonymous)
			exprs[i] = l
		}
	}
	b.add(msgNewRule, flagCreate|flagAppend, "add rule to chain "+chain, func(a *attrs) {
		a.str(attrRuleTable, b.table)
		a.str(attrRuleChain, chain)
		a.nest(attrRuleExprs, func(a *attrs) {
			for _, e := range exprs {
				a.nest(attrListElem, func(a *attrs) {
					a.str(attrExprName, e.name())
					a.nest(attrExprData, e.encode)
				})
			}
		})
		if comment != "" {
			a.bytes(attrRuleUserdata, appendUdataString(nil, 0, comment))
		}
	})
}

// AddSet adds a named set; like `nft add set`, an existing identical one is
// not an error.
func (b *Batch) AddSet(s Set) {
	b.newSet(s)
}

func (b *Batch) newSet(s Set) (string, uint32) {
	b.setID++
	id := b.setID
	switch {
	case s.Flags&SetAnonymous == 0:
	case b.anonPrefix != "":
		s.Name = b.anonPrefix + strconv.FormatUint(uint64(id), 10)
	case s.Flags&SetMap != 0:
		s.Name = "__map%d"
	default:
		s.Name = "__set%d"
	}
	b.add(msgNewSet, flagCreate, "add set "+s.Name, func(a *attrs) {
		a.str(attrSetTable, b.table)
		a.str(attrSetName, s.Name)
		a.u32(attrSetFlags, s.Flags)
		a.u32(attrSetKeyType, s.KeyType)
		a.u32(attrSetKeyLen, s.KeyLen)
		if s.Flags&SetMap != 0 {
			a.u32(attrSetDataType, s.DataType)
			a.u32(attrSetDataLen, s.DataLen)
		}
		a.u32(attrSetID, id)
		if s.Flags&SetTimeout != 0 && s.TimeoutMS != 0 {
			a.u64(attrSetTimeout, s.TimeoutMS)
		}
		if s.Flags&SetConstant != 0 {
			size := s.Size
			if size == 0 {
				size = uint32(len(s.Elements))
			}
			a.nest(attrSetDesc, func(a *attrs) { a.u32(attrSetDescSize, size) })
		}
		if len(s.Userdata) > 0 {
			a.bytes(attrSetUserdata, s.Userdata)
		}
	})
	if len(s.Elements) > 0 {
		b.elements(msgNewSetElem, flagCreate, "add elements to set "+s.Name, s.Name, id, s.Elements)
	}
	return s.Name, id
}

// DelSet deletes a named set and its elements.
func (b *Batch) DelSet(name string) {
	b.add(msgDelSet, 0, "delete set "+name, func(a *attrs) {
		a.str(attrSetTable, b.table)
		a.str(attrSetName, name)
	})
}

// AddElements adds elements to a named set or map; like `nft add element`,
// an existing identical element is not an error.
func (b *Batch) AddElements(set string, elems []Element) {
	b.elements(msgNewSetElem, flagCreate, "add elements to "+set, set, 0, elems)
}

// DelElements deletes the elements with these keys from a named set or
// map.
func (b *Batch) DelElements(set string, keys [][]byte) {
	elems := make([]Element, len(keys))
	for i, k := range keys {
		elems[i] = Element{Key: k}
	}
	b.elements(msgDelSetElem, 0, "delete elements from "+set, set, 0, elems)
}

func (b *Batch) elements(typ, flags uint16, what, set string, id uint32, elems []Element) {
	b.add(typ, flags, what, func(a *attrs) {
		a.str(attrElemListTable, b.table)
		a.str(attrElemListSet, set)
		if id != 0 {
			a.u32(attrElemListSetID, id)
		}
		a.nest(attrElemListElems, func(a *attrs) {
			for _, e := range elems {
				a.nest(attrListElem, func(a *attrs) {
					if e.IntervalEnd {
						a.u32(attrElemFlags, 1)
					}
					a.data(attrElemKey, e.Key)
					if e.Verdict != nil {
						a.nest(attrElemData, func(a *attrs) { a.verdict(*e.Verdict) })
					}
					if e.Data != nil {
						a.data(attrElemData, e.Data)
					}
					switch {
					case e.Comment != "":
						a.bytes(attrElemUserdata, appendUdataString(nil, 0, e.Comment))
					case e.IntervalOpen:
						a.bytes(attrElemUserdata, udataIntervalOpen())
					}
				})
			}
		})
	})
}

// attrs builds netlink attributes (with nlattr): native-endian 16-bit
// length and type, values padded to 4 bytes; numbers inside are
// big-endian, as nf_tables wants.
type attrs struct{ buf []byte }

func (a *attrs) bytes(typ uint16, v []byte) { a.buf = nlattr.Bytes(a.buf, typ, v) }

func (a *attrs) str(typ uint16, s string) { a.buf = nlattr.String(a.buf, typ, s) }

func (a *attrs) u32(typ uint16, v uint32) { a.buf = nlattr.U32(a.buf, typ, v) }

func (a *attrs) u64(typ uint16, v uint64) { a.buf = nlattr.U64(a.buf, typ, v) }

func (a *attrs) nest(typ uint16, body func(*attrs)) {
	var start int
	a.buf, start = nlattr.Start(a.buf, typ|nlattr.Nested)
	body(a)
	a.buf = nlattr.End(a.buf, start)
}

// data is an nft_data attribute holding a value.
func (a *attrs) data(typ uint16, v []byte) { a.buf = appendData(a.buf, typ, v) }

func (a *attrs) verdict(v Verdict) {
	a.nest(attrDataVerdict, func(a *attrs) {
		a.u32(attrVerdictCode, uint32(v.Code))
		if v.Chain != "" {
			a.str(attrVerdictChain, v.Chain)
		}
	})
}
