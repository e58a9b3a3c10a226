package nftnl

// Expr is one nf_tables expression of a rule.
type Expr interface {
	name() string
	encode(*attrs)
}

// Registers: the verdict register, the first two 16-byte data registers
// and the second 4-byte one (the second word of Reg1), the ones nft uses
// for these rules.
const (
	RegVerdict = 0
	Reg1       = 1
	Reg2       = 2
	Reg32x01   = 9
)

// Payload bases.
const (
	BaseNetwork   = 1
	BaseTransport = 2
)

// Payload loads Len bytes at Offset from a header into a register.
type Payload struct {
	Dreg, Base, Offset, Len uint32
}

func (Payload) name() string { return "payload" }
func (e Payload) encode(a *attrs) {
	a.u32(1, e.Dreg)
	a.u32(2, e.Base)
	a.u32(3, e.Offset)
	a.u32(4, e.Len)
}

// Comparison operators.
const (
	CmpEq  = 0
	CmpNeq = 1
)

// Cmp compares a register with Data.
type Cmp struct {
	Sreg, Op uint32
	Data     []byte
}

func (Cmp) name() string { return "cmp" }
func (e Cmp) encode(a *attrs) {
	a.u32(1, e.Sreg)
	a.u32(2, e.Op)
	a.data(3, e.Data)
}

// Meta keys: the packet mark and the transport protocol.
const (
	MetaMark    = 3
	MetaL4Proto = 16
)

// Meta loads packet metadata into a register.
type Meta struct {
	Dreg, Key uint32
}

func (Meta) name() string { return "meta" }
func (e Meta) encode(a *attrs) {
	a.u32(2, e.Key)
	a.u32(1, e.Dreg)
}

// MetaSet sets packet metadata from a register.
type MetaSet struct {
	Key, Sreg uint32
}

func (MetaSet) name() string { return "meta" }
func (e MetaSet) encode(a *attrs) {
	a.u32(2, e.Key)
	a.u32(3, e.Sreg)
}

// Immediate loads data into a register.
type Immediate struct {
	Dreg uint32
	Data []byte
}

func (Immediate) name() string { return "immediate" }
func (e Immediate) encode(a *attrs) {
	a.u32(1, e.Dreg)
	a.data(2, e.Data)
}

// VerdictExpr sets the verdict: the immediate expression on the verdict
// register.
type VerdictExpr Verdict

func (VerdictExpr) name() string { return "immediate" }
func (e VerdictExpr) encode(a *attrs) {
	a.u32(1, RegVerdict)
	a.nest(2, func(a *attrs) { a.verdict(Verdict(e)) })
}

// Lookup looks a register up in a set: a match (inverted with Invert), or
// with IsMap the map's value, into Dreg (RegVerdict, 0, for a verdict
// map). The set is a named one (Set) or an
// anonymous one that the rule carries (Anonymous), which Batch.AddRule
// creates.
type Lookup struct {
	Sreg      uint32
	Set       string
	Anonymous *Set
	Invert    bool
	IsMap     bool
	Dreg      uint32
	// setID refers to a set created in the same batch.
	setID uint32
}

func (Lookup) name() string { return "lookup" }
func (e Lookup) encode(a *attrs) {
	a.str(1, e.Set)
	a.u32(2, e.Sreg)
	if e.IsMap {
		a.u32(3, e.Dreg)
	}
	if e.setID != 0 {
		a.u32(4, e.setID)
	}
	if e.Invert {
		a.u32(5, 1)
	}
}

// Numgen puts a random number below Modulus in a register.
type Numgen struct {
	Dreg, Modulus uint32
}

func (Numgen) name() string { return "numgen" }
func (e Numgen) encode(a *attrs) {
	a.u32(1, e.Dreg)
	a.u32(2, e.Modulus)
	a.u32(3, 1) // NFT_NG_RANDOM
	a.u32(4, 0)
}

// FibSaddrType puts the route type of the packet's source address in a
// register (`fib saddr type`).
type FibSaddrType struct {
	Dreg uint32
}

func (FibSaddrType) name() string { return "fib" }
func (e FibSaddrType) encode(a *attrs) {
	a.u32(1, e.Dreg)
	a.u32(2, 3) // NFT_FIB_RESULT_ADDRTYPE
	a.u32(3, 1) // NFTA_FIB_F_SADDR
}

// DynsetUpdate adds a register's value to a set, or refreshes its timeout
// (`update @set { … }`).
type DynsetUpdate struct {
	Sreg uint32
	Set  string
}

func (DynsetUpdate) name() string { return "dynset" }
func (e DynsetUpdate) encode(a *attrs) {
	a.str(1, e.Set)
	a.u32(3, 1) // NFT_DYNSET_OP_UPDATE
	a.u32(4, e.Sreg)
}

// DNAT rewrites the destination to the address and port in two registers.
type DNAT struct {
	Family            Family
	RegAddr, RegProto uint32
}

func (DNAT) name() string { return "nat" }
func (e DNAT) encode(a *attrs) {
	a.u32(1, 1) // NFT_NAT_DNAT
	a.u32(2, uint32(e.Family))
	a.u32(3, e.RegAddr)
	a.u32(5, e.RegProto)
	a.u32(7, 2) // NF_NAT_RANGE_PROTO_SPECIFIED
}

// Bitwise masks a register: dreg = (sreg & Mask) ^ Xor (zeros when
// Xor is nil).
type Bitwise struct {
	Sreg, Dreg uint32
	Mask, Xor  []byte
}

func (Bitwise) name() string { return "bitwise" }
func (e Bitwise) encode(a *attrs) {
	a.u32(1, e.Sreg)
	a.u32(2, e.Dreg)
	a.u32(3, uint32(len(e.Mask)))
	a.data(4, e.Mask)
	xor := e.Xor
	if xor == nil {
		xor = make([]byte, len(e.Mask))
	}
	a.data(5, xor)
}
