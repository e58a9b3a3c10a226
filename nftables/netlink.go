package nftables

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// errNotNetlink says that an operation is outside what the netlink path
// encodes; the transaction then goes through nft.
var errNotNetlink = errors.New("not encodable for netlink")

// netlinkBatch encodes ops, as RenderChanges writes them, as one nftnl
// batch for the table of a family, the same objects nft would make of
// them. Anonymous sets are named anonPrefix and a number when anonPrefix
// is not "" (see nftnl.Batch.NameAnonymousSets). It returns an error
// wrapping errNotNetlink for any operation it does not know.
func netlinkBatch(family knftables.Family, table string, ops []op, anonPrefix string) (*nftnl.Batch, error) {
	enc := newEncoder(family)
	b := nftnl.NewBatch(enc.family, table)
	b.NameAnonymousSets(anonPrefix)
	for _, o := range ops {
		if err := enc.op(b, o); err != nil {
			return nil, fmt.Errorf("%w: %w", errNotNetlink, err)
		}
	}
	return b, nil
}

type encoder struct {
	v6     bool
	family nftnl.Family
}

// newEncoder returns the encoder for a table of family.
func newEncoder(family knftables.Family) encoder {
	if family == knftables.IPv6Family {
		return encoder{v6: true, family: nftnl.IPv6}
	}
	return encoder{family: nftnl.IPv4}
}

// op encodes one operation into b; it returns an error for any operation
// outside what the netlink path knows.
func (enc encoder) op(b *nftnl.Batch, o op) error {
	switch o.kind {
	case kindChain:
		return enc.chain(b, o)
	case kindRule:
		exprs, err := enc.rule(o.rule.rule.Stmts)
		if err != nil {
			return fmt.Errorf("rule %q: %w", o.rule.text, err)
		}
		b.AddRule(o.chain.Name, exprs, o.rule.rule.Comment)
		return nil
	case kindSet:
		switch o.verb {
		case opAdd:
			s, err := enc.affinitySet(o.set)
			if err != nil {
				return err
			}
			b.AddSet(s)
		case opDelete:
			b.DelSet(o.set.Name)
		default:
			return fmt.Errorf("flush of set %s", o.set.Name)
		}
		return nil
	case kindMap:
		if o.verb != opDelete {
			return fmt.Errorf("map %s other than a delete", o.set.Name)
		}
		b.DelSet(o.set.Name)
		return nil
	case kindSetElement, kindMapElement:
		return enc.element(b, o)
	}
	return fmt.Errorf("operation on the table")
}

// chain encodes an add, flush or delete of a regular chain.
func (enc encoder) chain(b *nftnl.Batch, o op) error {
	c := o.chain
	if o.verb == opAdd && (c.Base != nil || c.Comment != "") {
		return fmt.Errorf("base chain or chain comment %s", c.Name)
	}
	switch o.verb {
	case opAdd:
		b.AddChain(c.Name)
	case opFlush:
		b.FlushChain(c.Name)
	case opDelete:
		b.DelChain(c.Name)
	}
	return nil
}

// element encodes an add or a delete of a map or set element from its
// typed key and verdict.
func (enc encoder) element(b *nftnl.Batch, o op) error {
	e := o.elem
	key, err := enc.elementKey(e.Key)
	if err != nil {
		return fmt.Errorf("element of %s: %w", e.Set, err)
	}
	switch o.verb {
	case opAdd:
		if len(e.Value) > 0 || (e.Verdict != nil) != (o.kind == kindMapElement) {
			return fmt.Errorf("element of %s: value other than a verdict of a verdict map", e.Set)
		}
		ne := nftnl.Element{Key: key, Comment: e.Comment}
		if e.Verdict != nil {
			v, err := netlinkVerdict(*e.Verdict)
			if err != nil {
				return fmt.Errorf("element of %s: %w", e.Set, err)
			}
			ne.Verdict = &v
		}
		b.AddElements(e.Set, []nftnl.Element{ne})
	case opDelete:
		b.DelElements(e.Set, [][]byte{key})
	default:
		return fmt.Errorf("flush of an element of %s", e.Set)
	}
	return nil
}

// affinitySet encodes the sets that RenderChanges adds: per-endpoint
// affinity sets of client addresses, with a timeout in whole milliseconds.
func (enc encoder) affinitySet(s *model.Set) (nftnl.Set, error) {
	addr := model.TypeIPv4Addr
	if enc.v6 {
		addr = model.TypeIPv6Addr
	}
	if !slices.Equal(s.KeyType, []model.Type{addr}) || len(s.Key)+len(s.Value)+len(s.ValueType) > 0 || s.Interval ||
		!s.Dynamic || s.Timeout <= 0 || s.Comment != "" || s.Timeout.Truncate(time.Millisecond) != s.Timeout {
		return nftnl.Set{}, fmt.Errorf("set %s other than an affinity set", s.Name)
	}
	return nftnl.Set{
		Name: s.Name, Flags: nftnl.SetTimeout | nftnl.SetEval,
		KeyType: enc.addrType(), KeyLen: uint32(enc.addrLen()),
		TimeoutMS: uint64(s.Timeout.Milliseconds()),
		Userdata:  udataKeyBigEndian,
	}, nil
}

// User data that nft 1.0.6 stores with sets (libnftnl's NFTNL_UDATA_SET_*
// TLVs), which it reads back to print them: the key's byte order, and for
// the anonymous sets of rules how their key and data were written.
var (
	// KEYBYTEORDER big endian: named address sets.
	udataKeyBigEndian = []byte{0, 4, 2, 0, 0, 0}
	// KEYBYTEORDER big endian, MERGE_ELEMENTS, KEY_TYPEOF "ip saddr": the
	// interval sets of `ip saddr { … }`.
	udataSaddrSet4 = []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 12, 0, 0, 0, 1, 4, 11, 0, 0, 0}
	// The same for "ip6 saddr".
	udataSaddrSet6 = []byte{0, 4, 2, 0, 0, 0, 2, 4, 1, 0, 0, 0, 3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 13, 0, 0, 0, 1, 4, 8, 0, 0, 0}
	// KEYBYTEORDER host, DATABYTEORDER, DATA_TYPEOF verdict,
	// DATA_INTERVAL no: the verdict maps of `numgen random mod N vmap`.
	udataNumgenMap = []byte{0, 4, 1, 0, 0, 0, 1, 4, 0, 0, 0, 0, 4, 8, 0, 4, 1, 0, 0, 0, 1, 0, 6, 4, 0, 0, 0, 0}
)

func (enc encoder) addrType() uint32 {
	if enc.v6 {
		return nftnl.TypeIPv6Addr
	}
	return nftnl.TypeIPv4Addr
}

func (enc encoder) addrLen() int {
	if enc.v6 {
		return 16
	}
	return 4
}

func (enc encoder) ipX() string {
	if enc.v6 {
		return "ip6"
	}
	return "ip"
}

// familyAddr reports whether a is a plain address of the family: no zone,
// not IPv4-mapped.
func familyAddr(a netip.Addr, v6 bool) bool {
	return a.Is6() == v6 && a.Zone() == "" && !a.Is4In6()
}

// elementKey encodes the key of an element of the backend's maps and
// sets: an address (cluster-ips), protocol . port (the node-port maps) or
// address . protocol . port, each field padded to 4 bytes. An address of
// the other family is an error.
func (enc encoder) elementKey(key []model.Datum) ([]byte, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("empty key")
	}
	for _, d := range key {
		if p, ok := d.AsPrefix(); ok && (!familyAddr(p.Addr(), enc.v6) || p.Bits() != p.Addr().BitLen()) {
			return nil, fmt.Errorf("address %s in a table of family %s", d, enc.ipX())
		}
	}
	return model.KeyBytes(key), nil
}
