package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

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
	switch obj := o.obj.(type) {
	case *knftables.Chain:
		if obj.Type != nil || obj.Hook != nil || obj.Comment != nil {
			return fmt.Errorf("base chain or chain comment %s", obj.Name)
		}
		switch o.verb {
		case opAdd:
			b.AddChain(obj.Name)
		case opFlush:
			b.FlushChain(obj.Name)
		case opDelete:
			b.DelChain(obj.Name)
		}
		return nil
	case *knftables.Rule:
		if o.verb != opAdd || obj.Index != nil || obj.Handle != nil {
			return fmt.Errorf("rule operation other than append in chain %s", obj.Chain)
		}
		if o.stmts == nil {
			return fmt.Errorf("rule %q without its statements", obj.Rule)
		}
		exprs, err := enc.rule(o.stmts)
		if err != nil {
			return fmt.Errorf("rule %q: %w", obj.Rule, err)
		}
		comment := ""
		if obj.Comment != nil {
			comment = *obj.Comment
		}
		b.AddRule(obj.Chain, exprs, comment)
		return nil
	case *knftables.Set:
		switch o.verb {
		case opAdd:
			s, err := enc.affinitySet(obj)
			if err != nil {
				return err
			}
			b.AddSet(s)
		case opDelete:
			b.DelSet(obj.Name)
		default:
			return fmt.Errorf("flush of set %s", obj.Name)
		}
		return nil
	case *knftables.Map:
		if o.verb != opDelete {
			return fmt.Errorf("map %s other than a delete", obj.Name)
		}
		b.DelSet(obj.Name)
		return nil
	case *knftables.Element:
		return enc.element(b, o, obj)
	}
	return fmt.Errorf("object %T", o.obj)
}

// element encodes an add or a delete of a map or set element from its
// typed key and verdict.
func (enc encoder) element(b *nftnl.Batch, o op, obj *knftables.Element) error {
	name := obj.Set + obj.Map
	if o.elem == nil {
		return fmt.Errorf("element of %s without its typed key", name)
	}
	key, err := enc.elementKey(o.elem.key)
	if err != nil {
		return fmt.Errorf("element of %s: %w", name, err)
	}
	switch o.verb {
	case opAdd:
		e := nftnl.Element{Key: key}
		if obj.Map != "" {
			v, err := netlinkVerdict(o.elem.verdict)
			if err != nil {
				return fmt.Errorf("element of %s: %w", name, err)
			}
			e.Verdict = &v
		}
		if obj.Comment != nil {
			e.Comment = *obj.Comment
		}
		b.AddElements(name, []nftnl.Element{e})
	case opDelete:
		b.DelElements(name, [][]byte{key})
	default:
		return fmt.Errorf("flush of an element of %s", name)
	}
	return nil
}

// affinitySet encodes the sets that RenderChanges adds: per-endpoint
// affinity sets of client addresses, with a timeout.
func (enc encoder) affinitySet(s *knftables.Set) (nftnl.Set, error) {
	wantType := "ipv4_addr"
	if enc.v6 {
		wantType = "ipv6_addr"
	}
	if s.Type != wantType || s.TypeOf != "" || s.Timeout == nil || s.Comment != nil || s.Size != nil || s.Policy != nil ||
		!slices.Equal(s.Flags, []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}) || s.Timeout.Truncate(time.Millisecond) != *s.Timeout {
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

// elementKey encodes the keys of the backend's maps and sets: an
// address (cluster-ips), protocol . port (the node-port maps) or
// address . protocol . port, each field padded to 4 bytes.
func (enc encoder) elementKey(k elemKey) ([]byte, error) {
	var key []byte
	if k.addr.IsValid() {
		if !familyAddr(k.addr, enc.v6) {
			return nil, fmt.Errorf("address %s in a table of family %s", k.addr, enc.ipX())
		}
		key = k.addr.AsSlice()
	}
	if k.in == inClusterIPs {
		return key, nil
	}
	proto, ok := protoNumbers[strings.ToLower(string(k.proto))]
	if !ok {
		return nil, fmt.Errorf("protocol %q", k.proto)
	}
	key = append(key, proto, 0, 0, 0)
	return append(binary.BigEndian.AppendUint16(key, k.port), 0, 0), nil
}
