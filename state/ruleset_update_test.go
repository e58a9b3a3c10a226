package state_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/internal/testkit/rapidgen"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// stateEvent is one event of a proxy's input, applied to a state.State.
type stateEvent struct {
	desc  string
	apply func(*state.State)
}

// stateEvents are the events of h, as a source would give them to a State.
func stateEvents(events []rapidgen.Event) []stateEvent {
	var out []stateEvent
	for _, ev := range events {
		switch {
		case ev.Svc != nil:
			out = append(out, stateEvent{"update Service " + ev.Key.String(), func(s *state.State) { s.UpdateService(ev.Svc) }})
		case ev.ES != nil:
			out = append(out, stateEvent{"update EndpointSlice " + ev.Key.String(), func(s *state.State) { s.UpdateSlice(ev.ES) }})
		case ev.IsSlice:
			out = append(out, stateEvent{"delete EndpointSlice " + ev.Key.String(), func(s *state.State) { s.DeleteSlice(ev.Key.Namespace, ev.Key.Name) }})
		default:
			out = append(out, stateEvent{"delete Service " + ev.Key.String(), func(s *state.State) { s.DeleteService(ev.Key.Namespace, ev.Key.Name) }})
		}
	}
	return out
}

// genNodeEvent draws an update or a delete of a Node, most often the
// proxy's own (node-a), with a zone and addresses of both families, some
// unusable.
func genNodeEvent(t *rapid.T) stateEvent {
	name := rapidgen.Draw(t, "nodeEventName", "node-a", "node-a", "node-b")
	if rapid.IntRange(0, 3).Draw(t, "nodeDelete") == 0 {
		return stateEvent{"delete Node " + name, func(s *state.State) { s.DeleteNode(name) }}
	}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if zone := rapidgen.Draw(t, "nodeEventZone", rapidgen.GenZones...); zone != "" {
		n.Labels[v1.LabelTopologyZone] = zone
	}
	for _, a := range rapidgen.Subset(t, "nodeAddresses", "198.18.0.1", "198.18.0.2", "2001:db8::1", "fe80::1%eth0", "bogus") {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	return stateEvent{fmt.Sprintf("update Node %s %v %v", name, n.Labels, n.Status.Addresses), func(s *state.State) {
		_ = s.UpdateNode(n) // malformed addresses on purpose; state's own tests check its warnings
	}}
}

// Property: a dual-stack state.State fed random event streams (Services,
// EndpointSlices and Nodes, in random order) and synced now and then gives,
// per family and after every sync, an Update from the Ruleset the caller
// kept that equals Build from the same Snapshot, with Changes equal to
// Diff. Some syncs fail: before building (the Snapshot is taken and lost)
// or after (the Ruleset is built and dropped); the caller keeps its
// previous Ruleset and the next sync retries from a later Snapshot. The
// node's zone and addresses come from the Snapshot, so a Node event
// changes the Builder's Config.
func TestPropStateUpdate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		families := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		st, err := state.New(families, "node-a", servicemap.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		base := map[v1.IPFamily]ruleset.Config{}
		for _, f := range families {
			base[f] = rapidgen.GenConfig(t, f)
		}
		kept := map[v1.IPFamily]*ruleset.Ruleset{}
		var log []string
		for step := range rapid.IntRange(1, 8).Draw(t, "syncs") {
			events := stateEvents(rapidgen.GenHistory(t, rapidgen.GenFamily(t, "historyFamily")).Order(t, "events"))
			for range rapid.IntRange(0, 2).Draw(t, "nodeEvents") {
				at := rapid.IntRange(0, len(events)).Draw(t, "nodeEventAt")
				events = append(events[:at], append([]stateEvent{genNodeEvent(t)}, events[at:]...)...)
			}
			for _, ev := range events {
				ev.apply(st)
				log = append(log, ev.desc)
			}
			snap := st.Snapshot()
			failure := rapidgen.Draw(t, "syncFailure", "none", "none", "beforeBuild", "afterBuild")
			log = append(log, fmt.Sprintf("sync %d: %s", step, failure))
			if failure == "beforeBuild" {
				continue
			}
			for _, fam := range snap.Families() {
				cfg := base[fam.IPFamily]
				cfg.Node, cfg.NodePortAddresses = snap.Node, fam.NodeAddresses
				b, err := ruleset.NewBuilder(cfg)
				if err != nil {
					t.Fatalf("sync %d, %s: the Snapshot's node makes a bad Config: %v", step, fam.IPFamily, err)
				}
				// Random objects warn: Build's warnings are the
				// reference for Update's.
				rs, ch, ws := b.Update(kept[fam.IPFamily], fam.Services, fam.Endpoints)
				built, builtWarnings := b.Build(fam.Services, fam.Endpoints)
				warnings.Within(t, ws, builtWarnings)
				checkSameRuleset(t, fmt.Sprintf("sync %d, %s", step, fam.IPFamily), built, rs, log)
				if diff := cmp.Diff(ruleset.Diff(kept[fam.IPFamily], built), ch, changesOpts); diff != "" {
					t.Fatalf("sync %d, %s: Update's Changes (-Diff from the kept Ruleset +Update):\n%s", step, fam.IPFamily, diff)
				}
				if failure == "none" {
					kept[fam.IPFamily] = rs
				}
			}
		}
	})
}

// checkSameRuleset fails t when rs differs from built, the Ruleset Build
// gives, in any field of any Service or in who owns which Frontend, or when
// either's Services are not in order; log is the history that led there.
// (The Ruleset's inner invariants, its trees and Frontend index, are
// checked by ruleset's own property tests, TestPropUpdate among them,
// which reach its internals.)
func checkSameRuleset(t *rapid.T, what string, built, rs *ruleset.Ruleset, log []string) {
	if diff := cmp.Diff(values(built.Services()), values(rs.Services()), cmpOpts); diff != "" {
		t.Fatalf("%s: Update differs from Build (-Build +Update):\n%s\nevents:\n%v", what, diff, log)
	}
	for _, r := range []struct {
		name string
		rs   *ruleset.Ruleset
	}{{"Update", rs}, {"Build", built}} {
		all := r.rs.Services()
		if len(all) != r.rs.Len() || !slices.IsSortedFunc(all, func(a, b *ruleset.Service) int { return a.Name.Compare(b.Name) }) {
			t.Fatalf("%s: %s result: Services() not sorted or not Len() long", what, r.name)
		}
	}
	for _, f := range frontendsOf(rs, built) {
		if diff := cmp.Diff(built.ServicesAt(f), rs.ServicesAt(f)); diff != "" {
			t.Fatalf("%s: ServicesAt(%v) (-Build +Update):\n%s", what, f, diff)
		}
		bs, bk, bok := built.Owner(f)
		us, uk, uok := rs.Owner(f)
		if !bok || !uok || bs.Name != us.Name || bk != uk {
			t.Fatalf("%s: Owner(%v): Build %v, Update %v", what, f, ownerName(bs), ownerName(us))
		}
	}
}

// cmpOpts compares the net/netip and affinity values inside Services by value.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b affinity.Policy) bool { return a == b }),
}

var changesOpts = cmpopts.EquateEmpty()

// values dereferences the Services so that cmp compares every field rather
// than calling Service.Equal, which looks only at what the rules depend on.
func values(ss []*ruleset.Service) []ruleset.Service {
	out := make([]ruleset.Service, len(ss))
	for i, s := range ss {
		out[i] = *s
	}
	return out
}

// ownerName names the owner s, if any.
func ownerName(s *ruleset.Service) string {
	if s == nil {
		return "none"
	}
	return s.Name.String()
}

// frontendsOf lists every Frontend of the Services of some Rulesets.
func frontendsOf(rss ...*ruleset.Ruleset) []ruleset.Frontend {
	var fs []ruleset.Frontend
	for _, rs := range rss {
		for _, s := range rs.Services() {
			fs = append(fs, s.Frontends()...)
		}
	}
	return fs
}
