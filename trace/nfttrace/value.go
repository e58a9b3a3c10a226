package nfttrace

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/internal/prefix"
)

// dataType is the type of a selector's value and of a set's key field.
type dataType uint8

const (
	typeIPv4 dataType = iota + 1
	typeIPv6
	typeProto
	typePort
	typeMark
	typeInt // numgen's values
)

func (t dataType) String() string {
	switch t {
	case typeIPv4:
		return "ipv4_addr"
	case typeIPv6:
		return "ipv6_addr"
	case typeProto:
		return "inet_proto"
	case typePort:
		return "inet_service"
	case typeMark:
		return "mark"
	case typeInt:
		return "integer"
	}
	return fmt.Sprintf("dataType(%d)", uint8(t))
}

// dataTypes are the set key types of `type A . B : verdict` that the
// evaluator knows.
var dataTypes = map[string]dataType{
	"ipv4_addr": typeIPv4, "ipv6_addr": typeIPv6, "inet_proto": typeProto,
	"inet_service": typePort, "mark": typeMark, "integer": typeInt,
}

// datum is one value: an address, or a number (protocol, port, mark,
// numgen value).
type datum struct {
	addr netip.Addr
	num  uint64
}

func (d datum) compare(o datum) int {
	if c := d.addr.Compare(o.addr); c != 0 {
		return c
	}
	switch {
	case d.num < o.num:
		return -1
	case d.num > o.num:
		return 1
	}
	return 0
}

// interval is a closed range of data, one value when lo == hi.
type interval struct{ lo, hi datum }

func (iv interval) contains(d datum) bool { return iv.lo.compare(d) <= 0 && d.compare(iv.hi) <= 0 }

var protocols = map[string]uint64{"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58, "sctp": 132}

// parseLiteral reads one value of type t: an address, prefix or address
// range; a protocol name or number; a port, port range or number.
func parseLiteral(t dataType, s string) (interval, error) {
	switch t {
	case typeIPv4, typeIPv6:
		return parseAddrs(t, s)
	case typeProto:
		if n, ok := protocols[s]; ok {
			return interval{datum{num: n}, datum{num: n}}, nil
		}
	}
	base := 10
	if t == typeMark {
		base = 0 // 0x00004000
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, errA := strconv.ParseUint(lo, base, 32)
		b, errB := strconv.ParseUint(hi, base, 32)
		if errA != nil || errB != nil || a > b {
			return interval{}, fmt.Errorf("%q is not a range of %s", s, t)
		}
		return interval{datum{num: a}, datum{num: b}}, nil
	}
	n, err := strconv.ParseUint(s, base, 32)
	if err != nil || (t == typePort && n > 65535) || (t == typeProto && n > 255) {
		return interval{}, fmt.Errorf("%q is not a %s", s, t)
	}
	return interval{datum{num: n}, datum{num: n}}, nil
}

// parseAddrs reads an address, a prefix or a range "a-b" of family t.
func parseAddrs(t dataType, s string) (interval, error) {
	check := func(a netip.Addr) bool { return a.Is4() == (t == typeIPv4) }
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, errA := netip.ParseAddr(lo)
		b, errB := netip.ParseAddr(hi)
		if errA != nil || errB != nil || !check(a) || !check(b) || b.Less(a) {
			return interval{}, fmt.Errorf("%q is not a range of %s", s, t)
		}
		return interval{datum{addr: a}, datum{addr: b}}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !check(p.Addr()) {
			return interval{}, fmt.Errorf("%q is not a prefix of %s", s, t)
		}
		p = p.Masked()
		return interval{datum{addr: p.Addr()}, datum{addr: prefix.Last(p)}}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !check(a) {
		return interval{}, fmt.Errorf("%q is not an %s", s, t)
	}
	return interval{datum{addr: a}, datum{addr: a}}, nil
}

// parseDuration reads nft's durations: "600s", "10m", "1h30m", "1d", "500ms".
func parseDuration(s string) (time.Duration, error) {
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		j := i
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		unit, ok := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[rest[i:j]]
		if !ok {
			return 0, fmt.Errorf("duration %q: unknown unit %q", s, rest[i:j])
		}
		total += time.Duration(n) * unit
		rest = rest[j:]
	}
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	return total, nil
}

// verdictKind is what a rule or a map element does with the packet.
type verdictKind uint8

const (
	verdictNone verdictKind = iota // go on with the next rule
	verdictAccept
	verdictDrop
	verdictReject
	verdictReturn
	verdictJump
	verdictGoto
)

// verdict is a verdict with its chain, for jump and goto.
type verdict struct {
	kind  verdictKind
	chain string
}

func (v verdict) String() string {
	switch v.kind {
	case verdictAccept:
		return "accept"
	case verdictDrop:
		return "drop"
	case verdictReject:
		return "reject"
	case verdictReturn:
		return "return"
	case verdictJump:
		return "jump " + v.chain
	case verdictGoto:
		return "goto " + v.chain
	}
	return "continue"
}

// parseVerdict reads a verdict at the start of toks and returns it with the
// number of tokens it took; ok is false when toks start with none.
func parseVerdict(toks []token) (v verdict, n int, ok bool, err error) {
	if len(toks) == 0 || toks[0].quoted {
		return verdict{}, 0, false, nil
	}
	switch toks[0].text {
	case "accept":
		return verdict{kind: verdictAccept}, 1, true, nil
	case "drop":
		return verdict{kind: verdictDrop}, 1, true, nil
	case "return":
		return verdict{kind: verdictReturn}, 1, true, nil
	case "continue":
		return verdict{kind: verdictNone}, 1, true, nil
	case "jump", "goto":
		if len(toks) < 2 || toks[1].quoted || strings.ContainsAny(toks[1].text, "{},;") {
			return verdict{}, 0, false, fmt.Errorf("%s without a chain", toks[0].text)
		}
		kind := verdictJump
		if toks[0].text == "goto" {
			kind = verdictGoto
		}
		return verdict{kind: kind, chain: toks[1].text}, 2, true, nil
	}
	return verdict{}, 0, false, nil
}
