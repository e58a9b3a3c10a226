package nftables

import (
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// claim is an element's value: which Service port owns it, and what it
// does.
type claim struct {
	owner   *ruleset.Service
	verdict verdict
}

// same reports whether two claims render identical elements: the same
// owner (by name: two Rulesets hold different copies) and verdict.
func (c claim) same(o claim) bool {
	return c.verdict == o.verdict && c.owner.Name == o.owner.Name
}

// claimedElem is an element and its claim.
type claimedElem struct {
	key   elemKey
	claim claim
}

// owners finds, for each of keys, its first claimant in rs: the first
// Service port, in name order, that puts it in the table. Only the Service
// ports on the key's Frontend can (see frontend), so it looks at those
// alone: O(log n) time per key, not O(n).
func owners(r *renderer, rs *ruleset.Ruleset, keys []elemKey) map[elemKey]claim {
	claims := make(map[elemKey]claim, len(keys))
	for _, k := range keys {
		for _, name := range rs.ServicesAt(k.frontend()) {
			if !safeName(name) {
				continue
			}
			s, ok := rs.Service(name)
			if !ok {
				continue
			}
			if v, ok := r.elementVerdict(s, k); ok {
				claims[k] = claim{s, v}
				break
			}
		}
	}
	return claims
}

// elementVerdict returns the verdict of s's first element with key k, if s has
// one.
func (r *renderer) elementVerdict(s *ruleset.Service, k elemKey) (verdict, bool) {
	var v verdict
	found := false
	r.elements(s, func(e elemKey, ev verdict) {
		if !found && e == k {
			v, found = ev, true
		}
	})
	return v, found
}

func conflictWarning(s *ruleset.Service, k elemKey, owner *ruleset.Service) svcproxy.Warning {
	var what string
	if k.addr.IsValid() {
		what = fmt.Sprintf("%s %s", netip.AddrPortFrom(k.addr, k.port), k.proto)
	} else {
		what = fmt.Sprintf("node port %d/%s", k.port, k.proto)
	}
	return svcproxy.Warning{
		Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
		Reason: fmt.Sprintf("port %q/%s: %s (%s) is already used by %s: not served there", s.Name.Port, s.Name.Protocol, what, containerNames[k.in], owner.Name),
	}
}
