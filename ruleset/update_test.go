package ruleset_test

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// trackers are a Service and an EndpointSlice tracker fed event by event, as
// a proxy's are.
type trackers struct {
	svcs *servicemap.Tracker
	eps  *endpoints.Tracker
	// last is the last event applied to each object still present.
	last map[event]event
}

func newTrackers(family v1.IPFamily) trackers {
	return trackers{servicemap.NewTracker(family, servicemap.Filter{}), endpoints.NewTracker(family, servicemap.Filter{}), map[event]event{}}
}

// objects lists the events that recreate the objects the trackers hold.
func (tr trackers) objects() []event {
	return slices.Collect(maps.Values(tr.last))
}

func (tr trackers) apply(events []event) {
	for _, ev := range events {
		if tr.last != nil {
			id := event{Key: ev.Key, IsSlice: ev.IsSlice}
			if ev.Svc != nil || ev.ES != nil {
				tr.last[id] = ev
			} else {
				delete(tr.last, id)
			}
		}
		switch {
		// Random histories hold malformed objects on purpose: their
		// warnings are servicemap's and endpoints' to check.
		case ev.Svc != nil:
			_, _ = tr.svcs.Update(ev.Svc)
		case ev.ES != nil:
			_, _ = tr.eps.Update(ev.ES)
		case ev.IsSlice:
			tr.eps.Delete(ev.Key.Namespace, ev.Key.Name)
		default:
			tr.svcs.Delete(ev.Key.Namespace, ev.Key.Name)
		}
	}
}

// snapshot takes both snapshots.
func (tr trackers) snapshot() (servicemap.Snapshot, endpoints.Snapshot) {
	ss, _ := tr.svcs.Snapshot()
	es, _ := tr.eps.Snapshot()
	return ss, es
}

var changesOpts = cmpopts.EquateEmpty()

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

// checkSameRuleset fails t when rs differs from built, the Ruleset Build
// gives, in any field of any Service or in who owns which Frontend, or when
// either breaks an invariant; log is the history that led there.
func checkSameRuleset(t *rapid.T, what string, built, rs *ruleset.Ruleset, log []string) {
	if diff := cmp.Diff(values(built.Services()), values(rs.Services()), cmpOpts); diff != "" {
		t.Fatalf("%s: Update differs from Build (-Build +Update):\n%s\nevents:\n%v", what, diff, log)
	}
	for _, r := range []struct {
		name string
		rs   *ruleset.Ruleset
	}{{"Update", rs}, {"Build", built}} {
		if err := ruleset.CheckInvariants(r.rs); err != nil {
			t.Fatalf("%s: %s result: %v", what, r.name, err)
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

// Property: over random sequences of changes, Update from the previous
// Ruleset gives what Build gives from scratch (every field of every
// Service, and the Frontend index), its Changes are Diff's, Diff between any
// two Rulesets of the sequence equals Diff between their independently built
// twins, and every earlier Ruleset stays as it was. Some syncs fail: their
// snapshots are taken (the trackers' changes consumed) but the Ruleset is
// dropped, and the next Update starts from the last one kept. Some
// snapshots come from fresh trackers fed the same objects, sharing nothing
// with the earlier ones.
func TestPropUpdate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		cfg := genConfig(t, family)
		b, err := ruleset.NewBuilder(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MasqueradeAll = !cfg.MasqueradeAll
		other, err := ruleset.NewBuilder(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr := newTrackers(family)
		type pair struct{ updated, built *ruleset.Ruleset }
		var kept []pair
		var prev, prevBuilt *ruleset.Ruleset
		if rapid.Bool().Draw(t, "startBuilt") {
			tr.apply(genHistory(t, family).Final())
			ss, es := tr.snapshot()
			// Random Configs and objects warn: this property is about
			// the Rulesets (TestPropUpdatePorts checks Update's warnings).
			prev, _ = b.Build(ss, es)
			prevBuilt, _ = b.Build(ss, es)
			kept = append(kept, pair{prev, prevBuilt})
		}
		for step := range rapid.IntRange(1, 8).Draw(t, "steps") {
			tr.apply(genHistory(t, family).Order(t, "events"))
			ss, es := tr.snapshot()
			if rapid.IntRange(0, 3).Draw(t, "syncFails") == 0 {
				continue
			}
			if rapid.IntRange(0, 5).Draw(t, "freshTrackers") == 0 {
				fresh := newTrackers(family)
				fresh.apply(tr.objects())
				ss, es = fresh.snapshot()
			}
			builder := b
			if rapid.IntRange(0, 7).Draw(t, "otherConfig") == 0 {
				builder = other
			}
			rs, ch, warnings := builder.Update(prev, ss, es)
			built, builtWarnings := builder.Build(ss, es)

			checkSameRuleset(t, fmt.Sprintf("step %d", step), built, rs, nil)
			want := ruleset.Diff(prevBuilt, built)
			if diff := cmp.Diff(want, ch, changesOpts); diff != "" {
				t.Fatalf("step %d: Update's Changes (-Diff of built twins +Update):\n%s", step, diff)
			}
			if diff := cmp.Diff(want, ruleset.Diff(prev, rs), changesOpts); diff != "" {
				t.Fatalf("step %d: Diff(prev, Update) (-Diff of built twins +got):\n%s", step, diff)
			}
			for _, w := range warnings {
				if !slices.Contains(builtWarnings, w) {
					t.Fatalf("step %d: Update warns %v, Build does not (%v)", step, w, builtWarnings)
				}
			}
			if prev == nil || rs.Config().MasqueradeAll != prev.Config().MasqueradeAll {
				if diff := cmp.Diff(builtWarnings, warnings); diff != "" {
					t.Fatalf("step %d: Update as Build: warnings differ (-Build +Update):\n%s", step, diff)
				}
			}
			kept = append(kept, pair{rs, built})
			for i, k := range kept {
				if diff := cmp.Diff(ruleset.Diff(k.built, built), ruleset.Diff(k.updated, rs), changesOpts); diff != "" {
					t.Fatalf("step %d: Diff from Ruleset %d (-built twins +updated):\n%s", step, i, diff)
				}
				if diff := cmp.Diff(ruleset.Diff(built, k.built), ruleset.Diff(rs, k.updated), changesOpts); diff != "" {
					t.Fatalf("step %d: Diff to Ruleset %d (-built twins +updated):\n%s", step, i, diff)
				}
			}
			prev, prevBuilt = rs, built
		}
		for i, k := range kept {
			if diff := cmp.Diff(values(k.built.Services()), values(k.updated.Services()), cmpOpts); diff != "" {
				t.Fatalf("Ruleset %d changed by later Updates (-built +now):\n%s", i, diff)
			}
		}
	})
}

// TestUpdateChainCollected: Diff stays right when the Rulesets between two
// others of a chain of Updates are gone.
func TestUpdateChainCollected(t *testing.T) {
	must := warnings.Must(t)
	b, err := ruleset.NewBuilder(v4Config())
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrackers(v1.IPv4Protocol)
	apply := func(objs ...any) {
		for _, o := range objs {
			switch o := o.(type) {
			case *v1.Service:
				must.Used(tr.svcs.Update(o))
			case *discovery.EndpointSlice:
				must.Used(tr.eps.Update(o))
			}
		}
	}
	apply(service("ns", "web", "198.19.0.1"), service("ns", "api", "198.19.0.2"), endpointSlice("ns", "web", "web-1", a1))
	ss, es := tr.snapshot()
	first, ws := b.Build(ss, es)
	warnings.None(t, ws)
	rs := first
	for i := range 5 {
		apply(service("ns", fmt.Sprintf("new%d", i), fmt.Sprintf("198.19.1.%d", i+1)))
		ss, es := tr.snapshot()
		rs, _, ws = b.Update(rs, ss, es)
		warnings.None(t, ws)
	}
	apply(endpointSlice("ns", "web", "web-1", a1, b1))
	ss, es = tr.snapshot()
	last, ch, ws := b.Update(rs, ss, es)
	warnings.None(t, ws)
	if diff := cmp.Diff(ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "web")}}, ch); diff != "" {
		t.Errorf("Update's Changes (-want +got):\n%s", diff)
	}
	want := ruleset.Changes{Changed: []servicemap.PortName{webPort("ns", "web")}}
	for i := range 5 {
		want.Added = append(want.Added, webPort("ns", fmt.Sprintf("new%d", i)))
	}
	if diff := cmp.Diff(want, ruleset.Diff(first, last)); diff != "" {
		t.Errorf("Diff along the chain (-want +got):\n%s", diff)
	}
	rs = nil
	runtime.GC()
	runtime.GC()
	if diff := cmp.Diff(want, ruleset.Diff(first, last)); diff != "" {
		t.Errorf("Diff once the chain is collected (-want +got):\n%s", diff)
	}
}

// TestUpdateNothingChanged: an Update that changes nothing returns the
// previous Ruleset itself.
func TestUpdateNothingChanged(t *testing.T) {
	b, err := ruleset.NewBuilder(v4Config())
	if err != nil {
		t.Fatal(err)
	}
	ss, es := snapshots(t, v1.IPv4Protocol, []*v1.Service{service("ns", "web", "198.19.0.1")}, nil)
	prev, ws := b.Build(ss, es)
	warnings.None(t, ws)
	rs, ch, w := b.Update(prev, ss, es)
	if rs != prev || !ch.Empty() || len(w) != 0 {
		t.Errorf("Update = %p %+v %v, want the previous Ruleset %p, no change, no warning", rs, ch, w, prev)
	}
}

// updateWorld is a scalegen cluster of n Services behind trackers, with its
// Ruleset, for the Update benchmarks.
type updateWorld struct {
	spec scalegen.Spec
	tr   trackers
	b    *ruleset.Builder
	rs   *ruleset.Ruleset
	// version numbers the endpoint sets the benchmark cycles through.
	version int
	// snaps are the snapshots of the cluster with the endpoints of
	// Service n−50 (a plain TCP ClusterIP Service at every size) in
	// versions 1 and 2.
	snaps [2]struct {
		ss servicemap.Snapshot
		es endpoints.Snapshot
	}
}

func newUpdateWorld(tb testing.TB, n int) *updateWorld {
	must := warnings.Must(tb)
	spec := scalegen.Spec{Services: n}
	svcs, eps := scaleworld.Trackers(spec)
	b, err := ruleset.NewBuilder(scaleworld.Config())
	if err != nil {
		tb.Fatal(err)
	}
	w := &updateWorld{spec: spec, tr: trackers{svcs: svcs, eps: eps}, b: b}
	ss, es := w.tr.snapshot()
	rs, ws := b.Build(ss, es)
	must.None(ws)
	w.rs = rs
	w.rs.ServicesAt(ruleset.Frontend{}) // index it now, not in the first step
	for v := range 2 {
		must.Used(w.tr.eps.Update(spec.ChangedSlice(n-50, v+1)))
		w.snaps[v].ss, w.snaps[v].es = w.tr.snapshot()
	}
	return w
}

// step updates the Ruleset for the next version of Service n−50, whose
// endpoints changed: what a proxy does for one changed Service, the
// trackers' snapshots aside.
func (w *updateWorld) step(tb testing.TB) (old *ruleset.Ruleset, ch ruleset.Changes, warnings []svcproxy.Warning) {
	w.version = 1 - w.version
	old = w.rs
	w.rs, ch, warnings = w.b.Update(old, w.snaps[w.version].ss, w.snaps[w.version].es)
	if len(ch.Changed) != 1 {
		tb.Fatalf("Changes = %+v, want one Service changed", ch)
	}
	return old, ch, warnings
}

// stepTrackers is step with the trackers' work included: the changed
// EndpointSlice given to the tracker, and its snapshots taken.
func (w *updateWorld) stepTrackers(tb testing.TB) {
	must := warnings.Must(tb)
	w.version = w.version%3 + 1
	must.Used(w.tr.eps.Update(w.spec.ChangedSlice(w.spec.Services-50, w.version)))
	ss, es := w.tr.snapshot()
	rs, ch, ws := w.b.Update(w.rs, ss, es)
	must.None(ws)
	w.rs = rs
	if len(ch.Changed) != 1 {
		tb.Fatalf("Changes = %+v, want one Service changed", ch)
	}
}

// updateSizes are the cluster sizes of the Update benchmarks: Services × 10
// endpoints.
var updateSizes = []int{100, 1000, 10000, 30000}

// BenchmarkUpdate: Update for one Service whose endpoints changed, at 100
// to 30,000 Services × 10 endpoints. The time should not grow with the
// number of Services.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range updateSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			w := newUpdateWorld(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w.step(b)
			}
		})
	}
}

// BenchmarkUpdateTrackers: BenchmarkUpdate with the trackers' work: the
// EndpointSlice update and both snapshots.
func BenchmarkUpdateTrackers(b *testing.B) {
	for _, n := range updateSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			w := newUpdateWorld(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w.stepTrackers(b)
			}
		})
	}
}

// TestUpdateNonRuleField: a change that no rule depends on (an endpoint's
// zone) is not a change, and the Ruleset still holds it, as Build's does.
func TestUpdateNonRuleField(t *testing.T) {
	must := warnings.Must(t)
	b, err := ruleset.NewBuilder(v4Config())
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrackers(v1.IPv4Protocol)
	must.Used(tr.svcs.Update(service("ns", "web", "198.19.0.1")))
	must.Used(tr.eps.Update(endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.2", node: "node-b", zone: "z1"})))
	ss, es := tr.snapshot()
	prev, ws := b.Build(ss, es)
	warnings.None(t, ws)
	must.Used(tr.eps.Update(endpointSlice("ns", "web", "web-1", ep{ip: "198.18.64.2", node: "node-b", zone: "z2"})))
	ss, _ = tr.svcs.Snapshot()
	es, ech := tr.eps.Snapshot()
	rs, ch, ws := b.Update(prev, ss, es)
	warnings.None(t, ws)
	if len(ech.Changed) != 1 || !ch.Empty() {
		t.Fatalf("tracker changes %v, Update's %+v: want one, and none", ech.Changed, ch)
	}
	built, ws := b.Build(ss, es)
	warnings.None(t, ws)
	if diff := cmp.Diff(values(built.Services()), values(rs.Services()), cmpOpts); diff != "" {
		t.Errorf("Update differs from Build (-Build +Update):\n%s", diff)
	}
	if !ruleset.Diff(prev, rs).Empty() {
		t.Errorf("Diff = %+v, want empty", ruleset.Diff(prev, rs))
	}
}

// A proxy keeps the Ruleset of its last successful sync and updates it from
// the trackers' latest snapshots: the Ruleset knows what it was built from,
// so a sync that failed in between loses nothing.
func ExampleBuilder_Update() {
	must := warnings.Must(warnings.Example)
	svcs := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	eps := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	b, _ := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	must.Used(svcs.Update(exampleService("web", "198.19.0.1", 0, "")))
	must.Used(svcs.Update(exampleService("api", "198.19.0.2", 0, "")))
	must.Used(eps.Update(exampleSlice("web", "198.18.64.2", "node-a")))

	var rs *ruleset.Ruleset // nil: the first Update is a Build
	for range 2 {
		ss, _ := svcs.Snapshot()
		es, _ := eps.Snapshot()
		var ch ruleset.Changes
		var ws []svcproxy.Warning
		rs, ch, ws = b.Update(rs, ss, es)
		must.None(ws)
		fmt.Printf("%d Services; added %v, changed %v\n", rs.Len(), ch.Added, ch.Changed)

		must.Used(eps.Update(exampleSlice("api", "198.18.64.3", "node-b")))
	}
	// Output:
	// 2 Services; added [demo/api:http demo/web:http], changed []
	// 2 Services; added [], changed [demo/api:http]
}

// TestUpdateFrontends: an Update that changes one source of Frontends
// keeps the Frontend index right.
func TestUpdateFrontends(t *testing.T) {
	base := func(mods ...func(*v1.Service)) *v1.Service {
		return service("ns", "web", "198.19.0.1", append([]func(*v1.Service){loadBalancer("198.19.128.1"), externalIPs("198.19.100.1")}, mods...)...)
	}
	tests := []struct {
		name string
		svc  *v1.Service
	}{
		{"external IP", base(externalIPs("198.19.100.2"))},
		{"external IP added", base(externalIPs("198.19.100.1", "198.19.100.2"))},
		{"external IPs gone", base(externalIPs())},
		{"load-balancer IP", base(func(s *v1.Service) { s.Status.LoadBalancer.Ingress[0].IP = "198.19.128.2" })},
		{"node port", base(func(s *v1.Service) { s.Spec.Ports[0].NodePort = 30081 })},
		{"port", base(func(s *v1.Service) { s.Spec.Ports[0].Port = 81 })},
		{"cluster IP", base(func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "198.19.0.2", []string{"198.19.0.2"} })},
		{"external IP is the cluster IP", base(externalIPs("198.19.0.1"))},
		{"Service gone", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			must := warnings.Must(t)
			b, err := ruleset.NewBuilder(v4Config())
			if err != nil {
				t.Fatal(err)
			}
			tr := newTrackers(v1.IPv4Protocol)
			must.Used(tr.svcs.Update(base()))
			must.Used(tr.svcs.Update(service("ns", "other", "198.19.0.3", externalIPs("198.19.100.1", "198.19.100.2"))))
			ss, es := tr.snapshot()
			prev, ws := b.Build(ss, es)
			warnings.None(t, ws)
			if tt.svc != nil {
				must.Used(tr.svcs.Update(tt.svc))
			} else {
				tr.svcs.Delete("ns", "web")
			}
			ss, es = tr.snapshot()
			rs, _, ws := b.Update(prev, ss, es)
			warnings.None(t, ws)
			if err := ruleset.CheckInvariants(rs); err != nil {
				t.Error(err)
			}
			if err := ruleset.CheckInvariants(prev); err != nil {
				t.Errorf("previous Ruleset: %v", err)
			}
		})
	}
}

// Property: UpdatePorts gives the named ports as Build does and every other
// port as the previous Ruleset has it, and an Update from its result equals
// Build: what a backend that applies a change in several transactions
// holds after some of them.
func TestPropUpdatePorts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		family := genFamily(t, "family")
		b, err := ruleset.NewBuilder(genConfig(t, family))
		if err != nil {
			t.Fatal(err)
		}
		tr := newTrackers(family)
		first := genHistory(t, family).Final()
		tr.apply(first)
		ss, es := tr.snapshot()
		// Random Configs and objects warn: Build's warnings are the
		// reference for the Updates'.
		old, oldWarnings := b.Build(ss, es)
		tr.apply(genHistory(t, family).Order(t, "events"))
		ss, es = tr.snapshot()
		built, builtWarnings := b.Build(ss, es)

		ch := ruleset.Diff(old, built)
		all := slices.Concat(ch.Added, ch.Changed, ch.Removed)
		var names []servicemap.PortName
		for _, n := range all {
			if rapid.Bool().Draw(t, "written") {
				names = append(names, n)
			}
		}
		mid, _, ws := b.UpdatePorts(old, ss, es, names)
		warnings.Within(t, ws, builtWarnings)
		for _, n := range all {
			want := old
			if slices.Contains(names, n) {
				want = built
			}
			w, wok := want.Service(n)
			g, gok := mid.Service(n)
			if wok != gok || (wok && !w.Equal(g)) {
				t.Fatalf("port %v after UpdatePorts(%v): present %v, want %v (from the %s Ruleset)", n, names, gok, wok, map[bool]string{true: "new", false: "old"}[want == built])
			}
		}
		if err := ruleset.CheckInvariants(mid); err != nil {
			t.Fatalf("UpdatePorts result: %v", err)
		}
		final, _, ws := b.Update(mid, ss, es)
		warnings.Within(t, ws, builtWarnings)
		if diff := cmp.Diff(values(built.Services()), values(final.Services()), cmpOpts); diff != "" {
			t.Fatalf("Update after UpdatePorts(%v) differs from Build (-Build +Update):\n%s", names, diff)
		}
		// Back to the first objects, from fresh trackers: the ports
		// UpdatePorts wrote must go back too.
		again := newTrackers(family)
		again.apply(first)
		ss, es = again.snapshot()
		back, _, ws := b.Update(mid, ss, es)
		warnings.Within(t, ws, oldWarnings)
		if diff := cmp.Diff(values(old.Services()), values(back.Services()), cmpOpts); diff != "" {
			t.Fatalf("Update back to the first objects after UpdatePorts(%v) (-Build +Update):\n%s", names, diff)
		}
	})
}
