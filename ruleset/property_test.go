package ruleset_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Property: the Ruleset does not depend on the order in which objects
// arrived, nor on updates and deletes that a later event overrode.
func TestPropDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		h := genHistory(t, family)
		cfg := genConfig(t, family)
		b, err := ruleset.NewBuilder(cfg)
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		ss1, es1 := feed(family, h.Order(t, "order1"))
		ss2, es2 := feed(family, h.Order(t, "order2"))
		ss3, es3 := feed(family, h.Final())
		rs1, w1 := b.Build(ss1, es1)
		rs2, w2 := b.Build(ss2, es2)
		rs3, w3 := b.Build(ss3, es3)
		if diff := cmp.Diff(values(rs1.Services()), values(rs2.Services()), cmpOpts); diff != "" {
			t.Fatalf("two arrival orders give different Rulesets (-order1 +order2):\n%s", diff)
		}
		if diff := cmp.Diff(values(rs1.Services()), values(rs3.Services()), cmpOpts); diff != "" {
			t.Fatalf("history and final state give different Rulesets (-history +final):\n%s", diff)
		}
		if ch := ruleset.Diff(rs1, rs2); !ch.Empty() {
			t.Fatalf("Diff of the two orders = %+v, want empty", ch)
		}
		if ch := ruleset.Diff(rs3, rs1); !ch.Empty() {
			t.Fatalf("Diff of final and history = %+v, want empty", ch)
		}
		if diff := cmp.Diff(w1, w2); diff != "" {
			t.Fatalf("Build warnings differ between orders (-order1 +order2):\n%s", diff)
		}
		if diff := cmp.Diff(w1, w3); diff != "" {
			t.Fatalf("Build warnings differ (-history +final):\n%s", diff)
		}
	})
}

// Property: Build never panics, and each ServicePort of the snapshot appears
// exactly once in the Ruleset when the families match, and not at all, with a
// warning naming its Service, when they do not.
func TestPropEveryServicePortOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		trackerFamily := genFamily(t, "trackerFamily")
		ruleFamily := genFamily(t, "rulesetFamily")
		h := genHistory(t, trackerFamily)
		b, err := ruleset.NewBuilder(genConfig(t, ruleFamily))
		if err != nil {
			t.Fatalf("NewBuilder: %v", err)
		}
		ss, es := feed(trackerFamily, h.Order(t, "order"))
		rs, warnings := b.Build(ss, es)

		var want, got []servicemap.PortName
		for _, sp := range ss.Ports() {
			want = append(want, sp.Name)
		}
		for _, s := range rs.Services() {
			got = append(got, s.Name)
			if s.Family != ruleFamily {
				t.Fatalf("%v: family %s in an %s Ruleset", s.Name, s.Family, ruleFamily)
			}
			if found, ok := rs.Service(s.Name); !ok || found != s {
				t.Fatalf("Service(%v) does not find it", s.Name)
			}
		}
		if trackerFamily != ruleFamily {
			if len(got) != 0 {
				t.Fatalf("Ruleset of %s holds %s ports %v", ruleFamily, trackerFamily, got)
			}
			var skipped []servicemap.PortName
			for _, w := range warnings {
				for _, name := range want {
					if w.Kind == "Service" && w.Namespace == name.Namespace && w.Name == name.Name &&
						w.Reason == fmt.Sprintf("port %q is %s, the ruleset is %s: skipped", name.Port, trackerFamily, ruleFamily) {
						skipped = append(skipped, name)
					}
				}
			}
			if diff := cmp.Diff(want, skipped); diff != "" {
				t.Fatalf("skipped-port warnings (-want +got):\n%s", diff)
			}
			return
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Ruleset ports differ from the snapshot's (-snapshot +ruleset):\n%s", diff)
		}
		for _, w := range warnings {
			if w.Kind != "Service" || !slices.ContainsFunc(want, func(n servicemap.PortName) bool {
				return n.Namespace == w.Namespace && n.Name == w.Name
			}) {
				t.Fatalf("warning %v does not name a Service of the snapshot", w)
			}
		}
	})
}

// Property: the structure of every Service is consistent.
func TestPropServiceInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, ss, rs, warnings := genBuilt(t)
		for _, s := range rs.Services() {
			checkService(t, cfg, s, ss, warnings)
		}
	})
}

func checkService(t *rapid.T, cfg ruleset.Config, s *ruleset.Service, ss servicemap.Snapshot, warnings []svcproxy.Warning) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%v: %s\n%+v", s.Name, fmt.Sprintf(format, args...), summarize(s))
	}
	switch s.Internal {
	case ruleset.RouteCluster, ruleset.RouteLocal, ruleset.RouteReject, ruleset.RouteDrop:
	default:
		fail("Internal route %v", s.Internal)
	}
	if (s.External == ruleset.RouteNone) != !s.ExternallyAccessible() {
		fail("External %v, externally accessible %v", s.External, s.ExternallyAccessible())
	}
	for _, r := range []ruleset.Route{s.Internal, s.External} {
		switch r {
		case ruleset.RouteCluster:
			if len(s.ClusterTargets) == 0 {
				fail("route cluster without ClusterTargets")
			}
		case ruleset.RouteLocal:
			if len(s.LocalTargets) == 0 {
				fail("route local without LocalTargets")
			}
		case ruleset.RouteReject:
			if len(s.ClusterTargets)+len(s.LocalTargets) != 0 {
				fail("route reject with targets")
			}
		case ruleset.RouteDrop:
			if len(s.LocalTargets) != 0 {
				fail("route drop with LocalTargets")
			}
		}
	}
	// Internal and external traffic agree on whether the Service has
	// endpoints at all.
	if s.External != ruleset.RouteNone && (s.Internal == ruleset.RouteReject) != (s.External == ruleset.RouteReject) {
		fail("internal %v but external %v", s.Internal, s.External)
	}
	if (s.Internal == ruleset.RouteLocal) != (s.InternalPolicyLocal && len(s.LocalTargets) > 0) {
		fail("internal route %v with internalTrafficPolicy Local %v", s.Internal, s.InternalPolicyLocal)
	}
	if s.ExternalPolicyLocal && !s.ExternallyAccessible() {
		fail("ExternalPolicyLocal on a port that is not externally accessible")
	}

	// Endpoints: sorted, each once, exactly the endpoints targets point at.
	var fromTargets []string
	for _, tg := range slices.Concat(s.ClusterTargets, s.LocalTargets) {
		fromTargets = append(fromTargets, tg.Endpoint.String())
	}
	for i := 1; i < len(s.Endpoints); i++ {
		if s.Endpoints[i-1].Compare(&s.Endpoints[i]) >= 0 {
			fail("Endpoints not sorted or duplicated at %d", i)
		}
	}
	var eps []string
	for _, e := range s.Endpoints {
		eps = append(eps, e.String())
	}
	for _, e := range fromTargets {
		if !slices.Contains(eps, e) {
			fail("target %s is not in Endpoints", e)
		}
	}
	for _, e := range eps {
		if !slices.Contains(fromTargets, e) {
			fail("endpoint %s is no target's", e)
		}
	}

	for _, list := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
		for _, tg := range list {
			j := slices.IndexFunc(s.Endpoints, func(e endpoints.Endpoint) bool { return e.AddrPort() == tg.Endpoint })
			e := s.Endpoints[j]
			if want := cfg.Node.Name != "" && e.NodeName == cfg.Node.Name; tg.Local != want {
				fail("target %s Local %v, endpoint on node %q", tg.Endpoint, tg.Local, e.NodeName)
			}
			if !e.Ready && !(e.Serving && e.Terminating) {
				fail("target %s is not usable: %+v", tg.Endpoint, e)
			}
			if tg.Endpoint.Addr().Is4() != (cfg.Family == v1.IPv4Protocol) {
				fail("target %s of the wrong family", tg.Endpoint)
			}
		}
	}
	for _, tg := range s.LocalTargets {
		if !tg.Local {
			fail("LocalTargets holds %s, not local", tg.Endpoint)
		}
	}

	// ExternalIPs: those of the snapshot, restricted when asked to.
	sp, ok := ss.Get(s.Name)
	if !ok {
		fail("not in the snapshot")
	}
	for _, ip := range sp.ExternalIPs {
		allowed := !cfg.RestrictExternalIPs || slices.ContainsFunc(cfg.AllowedExternalIPs, func(p netip.Prefix) bool { return p.Contains(ip) })
		if slices.Contains(s.ExternalIPs, ip) != allowed {
			fail("externalIP %s served %v, allowed %v", ip, !allowed, allowed)
		}
		warned := slices.Contains(warnings, svcproxy.Warning{
			Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
			Reason: fmt.Sprintf("externalIP %s is not allowed: not served", ip),
		})
		if warned == allowed {
			fail("externalIP %s allowed %v, warned %v", ip, allowed, warned)
		}
	}
}
