package nftables

import (
	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/nftables/internal/names"
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
	if c.verdict == verdictHairpin || o.verdict == verdictHairpin {
		return c.verdict == o.verdict
	}
	return c.verdict == o.verdict && c.owner.Name == o.owner.Name
}

// claimedElem is an element and its claim.
type claimedElem struct {
	key   elemKey
	claim claim
}

// owns reports whether s puts its element with key k, for its frontend of
// kind, in the table: whether s owns that frontend in rs
// (ruleset.Ruleset.Owns).
func owns(rs *ruleset.Ruleset, s *ruleset.Service, k elemKey, kind ruleset.FrontendKind) bool {
	if k.in == inHairpin {
		return true
	}
	f := k.frontend()
	f.Kind = kind
	return rs.Owns(s, f)
}

// owners finds the claim on each of keys in rs: the owner of the key's
// frontend (ruleset.Ruleset.Owner), when its name is safe and it puts an
// element with that key in the table. It takes O(log n) time per key.
func owners(r *renderer, rs *ruleset.Ruleset, keys []elemKey) map[elemKey]claim {
	claims := make(map[elemKey]claim, len(keys))
	for _, k := range keys {
		if k.in == inHairpin {
			continue // see changePlan.claimHairpin
		}
		s, kind, ok := rs.Owner(k.frontend())
		if !ok || !names.Safe(s.Name) {
			continue
		}
		if v, ok := r.elementVerdict(s, k, kind); ok {
			claims[k] = claim{s, v}
		}
	}
	return claims
}

// elementVerdict returns the verdict of s's element with key k for its
// frontend of kind, if s has one.
func (r *renderer) elementVerdict(s *ruleset.Service, k elemKey, kind ruleset.FrontendKind) (verdict, bool) {
	var v verdict
	found := false
	r.elements(s, func(e elemKey, ev verdict, ek ruleset.FrontendKind) {
		if !found && e == k && ek == kind {
			v, found = ev, true
		}
	})
	return v, found
}

// notOwnedWarning is the warning for s's element with key k, for its
// frontend of kind, when another Service port of rs owns that frontend
// (nothing for the cluster-ips set, which many ports share).
func notOwnedWarning(rs *ruleset.Ruleset, s *ruleset.Service, k elemKey, kind ruleset.FrontendKind) (svcproxy.Warning, bool) {
	if k.in == inClusterIPs || k.in == inHairpin {
		return svcproxy.Warning{}, false
	}
	f := k.frontend()
	f.Kind = kind
	owner, _, ok := rs.Owner(f)
	if !ok || owner.Name == s.Name {
		return svcproxy.Warning{}, false
	}
	return conflictWarning(s, k, owner), true
}

func conflictWarning(s *ruleset.Service, k elemKey, owner *ruleset.Service) svcproxy.Warning {
	return ruleset.ConflictWarning(s.Name, k.frontend(), owner.Name)
}
