package iptrace

import (
	"fmt"
	"math/big"
	"net/netip"
	"strconv"
	"strings"
)

// rule is one parsed rule.
type rule struct {
	chain string
	line  int
	text  string // "-A CHAIN args…", the arguments quoted as iptables-save does

	proto   string // "tcp", "udp", "sctp", or "" for any
	comment string
	conds   []cond
	// prob is the probability of a statistic random match, nil without one.
	prob *big.Rat
	// rcheck is the --seconds of a recent --rcheck match, 0 without one.
	rcheck int32
	target target
}

// cond is one match of a rule other than the statistic and recent ones.
type cond struct {
	neg   bool
	match func(*flow) bool
	// what is the option, for errors.
	what string
}

// targetKind is what a rule does when it matches.
type targetKind uint8

const (
	targetNone targetKind = iota // no -j: only counts
	targetJump
	targetGoto
	targetAccept
	targetDrop
	targetReject
	targetReturn
	targetMark
	targetDNAT
	targetMasquerade
)

// target is a rule's target and its options.
type target struct {
	kind  targetKind
	chain string // for targetJump and targetGoto
	// markValue and markMask: the MARK target sets mark to
	// (mark &^ markMask) ^ markValue.
	markValue, markMask uint32
	to                  netip.AddrPort // DNAT --to-destination
}

// optionModule names the match module each option belongs to.
var optionModule = map[string]string{
	"--comment": "comment",
	"--dport":   "port", "--destination-port": "port", "--sport": "port", "--source-port": "port",
	"--dst-type": "addrtype", "--src-type": "addrtype",
	"--mode": "statistic", "--probability": "statistic",
	"--name": "recent", "--mask": "recent", "--rcheck": "recent", "--set": "recent",
	"--seconds": "recent", "--reap": "recent", "--rsource": "recent",
	"--ctstate": "conntrack",
	"--mark":    "mark",
	// nfacct only counts the packets it sees: it always matches.
	"--nfacct-name": "nfacct",
}

// knownModules are the match modules Evaluate models, each with its bit in
// ruleParser.modules.
var knownModules = map[string]uint16{
	"comment": 1 << 0, "tcp": 1 << 1, "udp": 1 << 2, "sctp": 1 << 3, "addrtype": 1 << 4,
	"statistic": 1 << 5, "recent": 1 << 6, "conntrack": 1 << 7, "mark": 1 << 8,
	"nfacct": 1 << 9,
}

// ruleParser holds the state of parsing one rule.
type ruleParser struct {
	r       *rule
	args    []string
	i       int
	modules uint16 // the bits of the modules loaded (knownModules)
	recent  struct {
		rcheck, set bool
		seconds     int32
	}
}

// parseRule parses the arguments of a rule after its chain.
func parseRule(args []string) (*rule, error) {
	rp := &ruleParser{r: &rule{}, args: args}
	for rp.i < len(args) {
		neg := false
		if args[rp.i] == "!" {
			neg = true
			rp.i++
		}
		opt, err := rp.next("an option")
		if err != nil {
			return nil, err
		}
		if opt == "-j" || opt == "--jump" || opt == "-g" || opt == "--goto" {
			if neg {
				return nil, fmt.Errorf("! before %s", opt)
			}
			if err := rp.target(opt); err != nil {
				return nil, err
			}
			break
		}
		if err := rp.option(opt, neg); err != nil {
			return nil, err
		}
	}
	if rp.i < len(args) {
		return nil, fmt.Errorf("unexpected %q after the target", args[rp.i])
	}
	return rp.r, rp.finishRecent()
}

// next returns the next argument, or an error saying what was wanted.
func (rp *ruleParser) next(want string) (string, error) {
	if rp.i >= len(rp.args) {
		return "", fmt.Errorf("missing %s", want)
	}
	a := rp.args[rp.i]
	rp.i++
	return a, nil
}

// option parses one match option (after its "!", if any).
func (rp *ruleParser) option(opt string, neg bool) error {
	switch opt {
	case "-p", "--protocol":
		return rp.protocol(neg)
	case "-s", "--source", "-d", "--destination":
		return rp.address(opt, neg)
	case "-m", "--match":
		m, err := rp.next("a match name")
		if err != nil {
			return err
		}
		bit, ok := knownModules[m]
		if neg || !ok {
			return fmt.Errorf("match %q is not modelled", m)
		}
		rp.modules |= bit
		return nil
	}
	mod, ok := optionModule[opt]
	if !ok {
		return fmt.Errorf("option %q is not modelled", opt)
	}
	if mod == "port" {
		if rp.r.proto == "" {
			return fmt.Errorf("%s without -p tcp, udp or sctp", opt)
		}
	} else if rp.modules&knownModules[mod] == 0 {
		return fmt.Errorf("%s without -m %s", opt, mod)
	}
	return rp.moduleOption(mod, opt, neg)
}

func (rp *ruleParser) protocol(neg bool) error {
	p, err := rp.next("a protocol")
	if err != nil {
		return err
	}
	p = strings.ToLower(p)
	if neg || (p != "tcp" && p != "udp" && p != "sctp") {
		return fmt.Errorf("protocol %q is not modelled", p)
	}
	rp.r.proto = p
	return nil
}

func (rp *ruleParser) address(opt string, neg bool) error {
	s, err := rp.next("an address")
	if err != nil {
		return err
	}
	pfx, err := parsePrefix(s)
	if err != nil {
		return fmt.Errorf("%s %s: %w", opt, s, err)
	}
	src := opt == "-s" || opt == "--source"
	rp.addCond(neg, opt, func(f *flow) bool {
		if src {
			return pfx.Contains(f.src.Addr())
		}
		return pfx.Contains(f.dst.Addr())
	})
	return nil
}

// parsePrefix reads an address or a prefix; an address is a whole
// prefix (/32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (rp *ruleParser) addCond(neg bool, what string, match func(*flow) bool) {
	rp.r.conds = append(rp.r.conds, cond{neg: neg, match: match, what: what})
}

// moduleOption parses an option of a match module.
func (rp *ruleParser) moduleOption(mod, opt string, neg bool) error {
	if neg && mod != "port" && mod != "addrtype" && mod != "conntrack" && mod != "mark" {
		return fmt.Errorf("! before %s is not modelled", opt)
	}
	switch mod {
	case "comment":
		c, err := rp.next("a comment")
		rp.r.comment = c
		return err
	case "port":
		return rp.port(opt, neg)
	case "addrtype":
		return rp.addrtype(opt, neg)
	case "statistic":
		return rp.statistic(opt)
	case "recent":
		return rp.recentOption(opt)
	case "conntrack":
		return rp.ctstate(neg)
	case "nfacct":
		_, err := rp.next("an accounting object's name")
		return err
	}
	return rp.markMatch(neg)
}

func (rp *ruleParser) port(opt string, neg bool) error {
	s, err := rp.next("a port")
	if err != nil {
		return err
	}
	port, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return fmt.Errorf("%s %q: port ranges and names are not modelled", opt, s)
	}
	dst := opt == "--dport" || opt == "--destination-port"
	rp.addCond(neg, opt, func(f *flow) bool {
		if dst {
			return f.dst.Port() == uint16(port)
		}
		return f.src.Port() == uint16(port)
	})
	return nil
}

func (rp *ruleParser) addrtype(opt string, neg bool) error {
	typ, err := rp.next("an address type")
	if err != nil {
		return err
	}
	if typ != "LOCAL" {
		return fmt.Errorf("%s %s: only LOCAL is modelled", opt, typ)
	}
	if opt == "--src-type" {
		rp.addCond(neg, opt, func(f *flow) bool { return f.fromNode })
	} else {
		rp.addCond(neg, opt, (*flow).dstLocal)
	}
	return nil
}

func (rp *ruleParser) statistic(opt string) error {
	v, err := rp.next("a value")
	if err != nil {
		return err
	}
	if opt == "--mode" {
		if v != "random" {
			return fmt.Errorf("statistic mode %q is not modelled", v)
		}
		return nil
	}
	p, ok := new(big.Rat).SetString(v)
	if !ok || p.Sign() < 0 || p.Cmp(big.NewRat(1, 1)) > 0 {
		return fmt.Errorf("probability %q is not a number from 0 to 1", v)
	}
	rp.r.prob = p
	return nil
}

func (rp *ruleParser) recentOption(opt string) error {
	switch opt {
	case "--rcheck":
		rp.recent.rcheck = true
	case "--set":
		rp.recent.set = true
	case "--reap", "--rsource":
	case "--name", "--mask":
		_, err := rp.next("a value")
		return err
	case "--seconds":
		v, err := rp.next("seconds")
		if err != nil {
			return err
		}
		s, err := strconv.ParseInt(v, 10, 32)
		if err != nil || s <= 0 {
			return fmt.Errorf("--seconds %q is not a positive number", v)
		}
		rp.recent.seconds = int32(s)
	}
	return nil
}

// finishRecent checks the recent match as a whole: either --rcheck with
// --seconds (affinity applies; no earlier flow is known, so it does not
// match) or --set (records the client; always matches).
func (rp *ruleParser) finishRecent() error {
	rc := rp.recent
	switch {
	case rp.modules&knownModules["recent"] == 0:
		return nil
	case rc.rcheck && !rc.set && rc.seconds > 0:
		rp.r.rcheck = rc.seconds
	case rc.set && !rc.rcheck && rc.seconds == 0:
	default:
		return fmt.Errorf("recent: only --rcheck --seconds N or --set are modelled")
	}
	return nil
}

// ctStates are the conntrack states a new flow's first packet has: NEW,
// and DNAT once a DNAT rule translated it.
func (rp *ruleParser) ctstate(neg bool) error {
	v, err := rp.next("states")
	if err != nil {
		return err
	}
	states := strings.Split(v, ",")
	for _, s := range states {
		switch s {
		case "NEW", "ESTABLISHED", "RELATED", "INVALID", "UNTRACKED", "DNAT", "SNAT":
		default:
			return fmt.Errorf("conntrack state %q is not modelled", s)
		}
	}
	rp.addCond(neg, "--ctstate", func(f *flow) bool {
		for _, s := range states {
			if s == "NEW" || (s == "DNAT" && f.dnat) {
				return true
			}
		}
		return false
	})
	return nil
}

func (rp *ruleParser) markMatch(neg bool) error {
	v, err := rp.next("a mark")
	if err != nil {
		return err
	}
	value, mask, err := parseMark(v, 0xffffffff)
	if err != nil {
		return err
	}
	rp.addCond(neg, "--mark", func(f *flow) bool { return f.mark&mask == value })
	return nil
}

// parseMark reads "VALUE[/MASK]", hexadecimal or decimal; a missing mask
// is dflt.
func parseMark(s string, dflt uint32) (value, mask uint32, err error) {
	vs, ms, hasMask := strings.Cut(s, "/")
	v, err := strconv.ParseUint(vs, 0, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("mark %q: %w", s, err)
	}
	mask = dflt
	if hasMask {
		m, err := strconv.ParseUint(ms, 0, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("mark %q: %w", s, err)
		}
		mask = uint32(m)
	}
	return uint32(v), mask, nil
}

// target parses the target after -j or -g, and its options.
func (rp *ruleParser) target(opt string) error {
	name, err := rp.next("a target")
	if err != nil {
		return err
	}
	t := &rp.r.target
	if opt == "-g" || opt == "--goto" {
		t.kind, t.chain = targetGoto, name
		return nil
	}
	switch name {
	case "ACCEPT":
		t.kind = targetAccept
	case "DROP":
		t.kind = targetDrop
	case "RETURN":
		t.kind = targetReturn
	case "REJECT":
		t.kind = targetReject
		return rp.targetOptions(map[string]bool{"--reject-with": true}, nil)
	case "MASQUERADE":
		t.kind = targetMasquerade
		return rp.targetOptions(map[string]bool{"--random-fully": false, "--random": false}, nil)
	case "DNAT":
		t.kind = targetDNAT
		return rp.targetOptions(map[string]bool{"--to-destination": true}, rp.dnatTo)
	case "MARK":
		t.kind = targetMark
		return rp.targetOptions(map[string]bool{"--set-xmark": true, "--set-mark": true, "--or-mark": true, "--xor-mark": true, "--and-mark": true}, rp.markTarget)
	case "SNAT", "LOG", "NOTRACK", "CT", "TPROXY", "REDIRECT", "NFQUEUE", "CONNMARK", "TRACE":
		return fmt.Errorf("target %s is not modelled", name)
	default:
		if strings.HasPrefix(name, "-") {
			return fmt.Errorf("bad target %q", name)
		}
		t.kind, t.chain = targetJump, name
	}
	return nil
}

// targetOptions reads the rest of the arguments as options of the target:
// takesValue says which options exist and whether each takes a value;
// set, if not nil, receives each option and its value.
func (rp *ruleParser) targetOptions(takesValue map[string]bool, set func(opt, value string) error) error {
	seen := false
	for rp.i < len(rp.args) {
		opt := rp.args[rp.i]
		rp.i++
		hasValue, ok := takesValue[opt]
		if !ok {
			return fmt.Errorf("target option %q is not modelled", opt)
		}
		value := ""
		if hasValue {
			v, err := rp.next("a value for " + opt)
			if err != nil {
				return err
			}
			value = v
		}
		if set != nil {
			if err := set(opt, value); err != nil {
				return err
			}
			seen = true
		}
	}
	if set != nil && !seen {
		return fmt.Errorf("target without its options")
	}
	return nil
}

// dnatTo reads --to-destination ADDR:PORT ([ADDR]:PORT for IPv6).
func (rp *ruleParser) dnatTo(_, v string) error {
	ap, err := netip.ParseAddrPort(v)
	if err != nil {
		return fmt.Errorf("--to-destination %q: only ADDRESS:PORT is modelled: %w", v, err)
	}
	rp.r.target.to = ap
	return nil
}

// markTarget reads a MARK option as (mark &^ mask) ^ value.
func (rp *ruleParser) markTarget(opt, v string) error {
	t := &rp.r.target
	switch opt {
	case "--set-xmark":
		value, mask, err := parseMark(v, 0xffffffff)
		t.markValue, t.markMask = value, mask
		return err
	case "--set-mark":
		value, mask, err := parseMark(v, 0xffffffff)
		t.markValue, t.markMask = value, mask|value
		return err
	}
	value, _, err := parseMark(v, 0)
	switch opt {
	case "--or-mark":
		t.markValue, t.markMask = value, value
	case "--xor-mark":
		t.markValue, t.markMask = value, 0
	case "--and-mark":
		t.markValue, t.markMask = 0, ^value
	}
	return err
}
