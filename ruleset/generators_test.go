package ruleset_test

import (
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/rapidgen"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// The generators of Services, EndpointSlices, their histories and Configs
// are in internal/testkit/rapidgen, shared with state's property tests;
// these are their names here.

var genNodes = rapidgen.GenNodes

// event is an Update of Svc or ES, or, when both are nil, a Delete of Key.
type event = rapidgen.Event

// history is what happens to each object, key by key, in order.
type history = rapidgen.History

func genHistory(t *rapid.T, family v1.IPFamily) history { return rapidgen.GenHistory(t, family) }

func genConfig(t *rapid.T, family v1.IPFamily) ruleset.Config {
	return rapidgen.GenConfig(t, family)
}

func genFamily(t *rapid.T, label string) v1.IPFamily { return rapidgen.GenFamily(t, label) }

// feed applies events to fresh trackers of family and returns their
// snapshots.
func feed(family v1.IPFamily, events []event) (servicemap.Snapshot, endpoints.Snapshot) {
	st := servicemap.NewTracker(family, servicemap.Filter{})
	et := endpoints.NewTracker(family, servicemap.Filter{})
	for _, ev := range events {
		switch {
		// Random events hold malformed objects on purpose: their
		// warnings are servicemap's and endpoints' to check.
		case ev.Svc != nil:
			_, _ = st.Update(ev.Svc)
		case ev.ES != nil:
			_, _ = et.Update(ev.ES)
		case ev.IsSlice:
			et.Delete(ev.Key.Namespace, ev.Key.Name)
		default:
			st.Delete(ev.Key.Namespace, ev.Key.Name)
		}
	}
	ss, _ := st.Snapshot()
	es, _ := et.Snapshot()
	return ss, es
}

// genBuilt is the Ruleset of a generated cluster: its family, its history
// of objects fed in a drawn order, and a Config, drawn in that order; with
// the Config, the Services' snapshot and Build's warnings.
func genBuilt(t *rapid.T) (ruleset.Config, servicemap.Snapshot, *ruleset.Ruleset, []svcproxy.Warning) {
	family := genFamily(t, "family")
	h := genHistory(t, family)
	cfg := genConfig(t, family)
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatalf("NewBuilder: %v", err)
	}
	ss, es := feed(family, h.Order(t, "order"))
	rs, warnings := b.Build(ss, es)
	return cfg, ss, rs, warnings
}

// values dereferences the Services so that cmp compares every field rather
// than calling Service.Equal, which looks only at what the rules depend on.
func values(ss []*ruleset.Service) []ruleset.Service {
	out := make([]ruleset.Service, len(ss))
	for i, s := range ss {
		out[i] = *s
	}
	return out
}
