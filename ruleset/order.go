package ruleset

import (
	"bytes"
	"cmp"
	"net/netip"
	"slices"
	"strconv"
)

// sortTargets puts ts in kube-proxy's order of a Service port's endpoints:
// by their text, "address:port" ("[address]:port" for IPv6), compared byte
// by byte, so that 198.18.64.10:80 comes before 198.18.64.2:80. The rules
// of both backends list the targets in this order, as kube-proxy's do.
func sortTargets(ts []Target) {
	if !slices.IsSortedFunc(ts, compareTargets) {
		slices.SortStableFunc(ts, compareTargets)
	}
}

func compareTargets(a, b Target) int { return compareEndpointText(a.Endpoint, b.Endpoint) }

// compareEndpointText compares the text of a and b without allocating: an
// IPv4 address octet by octet, a number against another by its digits (a
// shorter one first where a "." follows it, last where the ":" of the port
// does, as their bytes sort), IPv6 by its formatted text.
func compareEndpointText(a, b netip.AddrPort) int {
	if !a.Addr().Is4() || !b.Addr().Is4() {
		var ta, tb [64]byte
		return bytes.Compare(a.AppendTo(ta[:0]), b.AppendTo(tb[:0]))
	}
	oa, ob := a.Addr().As4(), b.Addr().As4()
	for i := range oa {
		if oa[i] != ob[i] {
			sep := byte('.')
			if i == 3 {
				sep = ':'
			}
			return compareDecimal(uint64(oa[i]), uint64(ob[i]), sep)
		}
	}
	return compareDecimal(uint64(a.Port()), uint64(b.Port()), 0)
}

// compareDecimal compares the texts of x and y, each followed by sep (none
// when sep is 0: the end of the text).
func compareDecimal(x, y uint64, sep byte) int {
	if digits(x) == digits(y) {
		return cmp.Compare(x, y)
	}
	var tx, ty [24]byte
	bx, by := strconv.AppendUint(tx[:0], x, 10), strconv.AppendUint(ty[:0], y, 10)
	if sep != 0 {
		bx, by = append(bx, sep), append(by, sep)
	}
	return bytes.Compare(bx, by)
}

func digits(x uint64) int {
	n := 1
	for ; x >= 10; x /= 10 {
		n++
	}
	return n
}
