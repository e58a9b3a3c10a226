package iptables

import (
	"net/netip"
	"strconv"
	"strings"
)

// Comments longer than this are cut: the kernel's limit is 256 bytes with
// the terminating NUL (XT_MAX_COMMENT_LEN).
const maxCommentLen = 255

// Text helpers. Everything variable that reaches the output goes through
// addr, prefix, comment or a number formatter, or is a chain name made by
// Names.

func (r *renderer) str(s string) { r.b = append(r.b, s...) }

func (r *renderer) declare(chain string) {
	r.b = append(r.b, ':')
	r.b = append(r.b, chain...)
	r.b = append(r.b, " - [0:0]\n"...)
}

func (r *renderer) rule(chain string) {
	r.b = append(r.b, "-A "...)
	r.b = append(r.b, chain...)
}

func (r *renderer) jump(target string) {
	r.b = append(r.b, " -j "...)
	r.b = append(r.b, target...)
	r.b = append(r.b, '\n')
}

func (r *renderer) proto(proto string) {
	r.b = append(r.b, " -m "...)
	r.b = append(r.b, proto...)
	r.b = append(r.b, " -p "...)
	r.b = append(r.b, proto...)
}

func (r *renderer) dst(ip netip.Addr, port uint16) {
	r.str(" -d ")
	r.addr(ip)
	r.dport(port)
}

func (r *renderer) dport(port uint16) {
	r.str(" --dport ")
	r.b = strconv.AppendUint(r.b, uint64(port), 10)
}

func (r *renderer) addr(ip netip.Addr) { r.b = ip.WithZone("").AppendTo(r.b) }

func (r *renderer) prefix(p netip.Prefix) { r.b = p.Masked().AppendTo(r.b) }

func (r *renderer) addrPort(ap netip.AddrPort) {
	r.b = netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port()).AppendTo(r.b)
}

func addrPortString(ap netip.AddrPort) string {
	return netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port()).String()
}

// comment writes "-m comment --comment TEXT", TEXT being the parts joined.
// Bytes other than letters, digits and " ./:_-[]>;," become '_', so
// nothing in TEXT can end the argument, the rule or the line; the text is
// cut to the kernel's limit and double-quoted when it holds a space.
func (r *renderer) comment(parts ...string) {
	total, quote := 0, false
	for _, p := range parts {
		total += len(p)
		quote = quote || strings.IndexByte(p, ' ') >= 0
	}
	left := min(total, maxCommentLen)
	if left < total { // the cut may drop the only space
		quote = false
		rest := left
		for _, p := range parts {
			if i := strings.IndexByte(p, ' '); i >= 0 && i < rest {
				quote = true
				break
			}
			rest -= min(rest, len(p))
		}
	}
	quote = quote || total == 0
	r.b = append(r.b, " -m comment --comment "...)
	if quote {
		r.b = append(r.b, '"')
	}
	for _, p := range parts {
		for i := 0; i < len(p) && left > 0; i++ {
			c := p[i]
			if !safeCommentByte(c) {
				c = '_'
			}
			r.b = append(r.b, c)
			left--
		}
	}
	if quote {
		r.b = append(r.b, '"')
	}
}

// endpointComment is comment for the rules whose number grows with the
// endpoints: the two of each endpoint chain, and those of a policy chain
// that jump to one. In large-cluster mode it writes nothing, as kube-proxy
// writes no comment there.
func (r *renderer) endpointComment(parts ...string) {
	if !r.largeCluster {
		r.comment(parts...)
	}
}

func safeCommentByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte(" ./:_-[]>;,", c) >= 0
}
