package nftnl

import (
	"encoding/binary"
	"fmt"
)

// Digest is what a check compares of a chain's rules or of a set's
// elements: how many there are, and a hash of their content. A chain's Sum
// depends on the order of its rules, a set's does not (it is the sum of
// its elements' ElementHash).
type Digest struct {
	N   int
	Sum uint64
}

// Add adds an element of hash h to d, or removes it with sign −1.
func (d *Digest) Add(h uint64, sign int) {
	d.N += sign
	d.Sum += uint64(int64(sign)) * h
}

// ElementHash hashes what the kernel holds of a set or map element and
// matches packets with: its key, the end of its interval (nil when it has
// none), its value in a data map (nil otherwise) and its verdict in a
// verdict map (nil otherwise). Comments, timeouts and flags are not
// hashed.
func ElementHash(key, keyEnd, data []byte, v *Verdict) uint64 {
	h := hashBytes(fnvOffset, 1, key)
	if keyEnd != nil {
		h = hashBytes(h, 2, keyEnd)
	}
	if data != nil {
		h = hashBytes(h, 3, data)
	}
	if v != nil {
		h = hashBytes(h, 4, binary.BigEndian.AppendUint32(nil, uint32(v.Code)))
		h = hashBytes(h, 5, []byte(v.Chain))
	}
	return mix(h)
}

// VerdictCode is the kernel's code of a verdict as nft writes it: "drop",
// "accept", "return", "jump" or "goto".
func VerdictCode(kind string) (int32, bool) {
	switch kind {
	case "drop":
		return VerdictDrop, true
	case "accept":
		return VerdictAccept, true
	case "return":
		return VerdictReturn, true
	case "jump":
		return VerdictJump, true
	case "goto":
		return VerdictGoto, true
	}
	return 0, false
}

// ElementDigest reads the elements of a set or map by a netlink dump and
// returns their Digest (each element's ElementHash), without the ends of
// intervals (the kernel stores an interval of a one-field interval set as
// two elements).
func (c *Conn) ElementDigest(family Family, table, set string) (Digest, error) {
	var d Digest
	err := c.dumpCounting(msgGetSetElem, family, func(a *attrs) {
		a.str(attrElemListTable, table)
		a.str(attrElemListSet, set)
	}, func() { d = Digest{} }, func(b []byte) error {
		walkAttrs(b, func(typ uint16, v []byte) {
			if typ != attrElemListElems {
				return
			}
			walkAttrs(v, func(typ uint16, elem []byte) {
				if typ != attrListElem {
					return
				}
				if h, ok := kernelElementHash(elem); ok {
					d.Add(h, 1)
				}
			})
		})
		return nil
	})
	if err != nil {
		return Digest{}, fmt.Errorf("nftnl: reading the elements of %s %s: %w", table, set, err)
	}
	return d, nil
}

// kernelElementHash is the ElementHash of an element as the kernel dumps
// it; false for the end of an interval.
func kernelElementHash(elem []byte) (uint64, bool) {
	var key, keyEnd, data []byte
	var verdict *Verdict
	var flags uint32
	walkAttrs(elem, func(typ uint16, v []byte) {
		switch typ {
		case attrElemFlags:
			if len(v) == 4 {
				flags = binary.BigEndian.Uint32(v)
			}
		case attrElemKey:
			key = dataValue(v)
		case attrElemKeyEnd:
			keyEnd = dataValue(v)
		case attrElemData:
			walkAttrs(v, func(typ uint16, v []byte) {
				switch typ {
				case attrDataValue:
					data = v
				case attrDataVerdict:
					verdict = &Verdict{}
					walkAttrs(v, func(typ uint16, v []byte) {
						switch typ {
						case attrVerdictCode:
							if len(v) == 4 {
								verdict.Code = int32(binary.BigEndian.Uint32(v))
							}
						case attrVerdictChain:
							verdict.Chain, _ = cString(v)
						}
					})
				}
			})
		}
	})
	if flags&elemIntervalEnd != 0 {
		return 0, false
	}
	return ElementHash(key, keyEnd, data, verdict), true
}

// dataValue is the value of a nested nft_data attribute holding one.
func dataValue(b []byte) []byte {
	var value []byte
	walkAttrs(b, func(typ uint16, v []byte) {
		if typ == attrDataValue {
			value = v
		}
	})
	return value
}

// RuleDigest reads the rules of one chain by a netlink dump that the
// kernel filters to that chain, and returns their Digest: their number,
// and a hash of their expressions in order, each expression's name and
// attributes as the kernel dumps them, but for the expressions that count
// or remember traffic (counter, limit, quota, last, connlimit), whose name
// only is hashed. Handles, positions and comments are not hashed. The hash
// is the kernel's form, not the one a rule was written in: a check
// compares it with one read right after the rule was written.
func (c *Conn) RuleDigest(family Family, table, chain string) (Digest, error) {
	var d Digest
	err := c.dumpCounting(msgGetRule, family, func(a *attrs) {
		a.str(attrRuleTable, table)
		a.str(attrRuleChain, chain)
	}, func() { d = Digest{Sum: fnvOffset} }, func(b []byte) error {
		var t, ch, exprs []byte
		walkAttrs(b, func(typ uint16, v []byte) {
			switch typ {
			case attrRuleTable:
				t = v
			case attrRuleChain:
				ch = v
			case attrRuleExprs:
				exprs = v
			}
		})
		if tn, ok := cString(t); !ok || tn != table {
			return nil
		}
		if cn, ok := cString(ch); !ok || cn != chain {
			return nil
		}
		d.N++
		d.Sum = mix(hashBytes(d.Sum, 6, nil))
		walkAttrs(exprs, func(typ uint16, e []byte) {
			if typ != attrListElem {
				return
			}
			var name, data []byte
			walkAttrs(e, func(typ uint16, v []byte) {
				switch typ {
				case attrExprName:
					name = v
				case attrExprData:
					data = v
				}
			})
			d.Sum = hashBytes(d.Sum, 7, name)
			if n, _ := cString(name); !stateful(n) {
				d.Sum = hashBytes(d.Sum, 8, data)
			}
		})
		return nil
	})
	if err != nil {
		return Digest{}, fmt.Errorf("nftnl: reading the rules of %s %s: %w", table, chain, err)
	}
	return d, nil
}

// stateful reports whether the attributes of the expression named name
// change with the traffic.
func stateful(name string) bool {
	switch name {
	case "counter", "limit", "quota", "last", "connlimit":
		return true
	}
	return false
}

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashBytes adds to FNV-1a hash h a tag and b, with its length.
func hashBytes(h uint64, tag byte, b []byte) uint64 {
	h = (h ^ uint64(tag)) * fnvPrime
	h = (h ^ uint64(len(b))) * fnvPrime
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// mix spreads the bits of h (SplitMix64's finalizer), so that sums of
// hashes of similar elements do not cancel out.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}
