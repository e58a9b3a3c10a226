package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/conntrack"
)

// missingChain is a drift a fakeBackend reports.
var missingChain = svcproxy.Drift{Kind: svcproxy.DriftChain, What: "chain KUBE-SERVICES is missing"}

// udpFlow is a UDP flow from a client to dst, DNATed to replySrc.
func udpFlow(dst, replySrc string) conntrack.Flow {
	return conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: netip.MustParseAddrPort(dst), ReplySrc: netip.MustParseAddrPort(replySrc)}
}

// TestServiceDeletedBeforeSliceCleansConntrack: when a UDP Service is
// deleted while its EndpointSlice is still there, the endpoints' changes
// say nothing, yet the entries to its cluster IP are deleted by the sync
// of the Service's delete, because the engine compares with the Ruleset
// it last cleaned against. Another Service's entries stay.
func TestServiceDeletedBeforeSliceCleansConntrack(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	w.addUDPService("other", "198.19.0.11", "198.18.64.3")
	toDNS, toOther := udpFlow("198.19.0.10:53", "198.18.64.2:5353"), udpFlow("198.19.0.11:53", "198.18.64.3:5353")
	table := &conntrackTable{flows: map[conntrack.Flow]bool{toDNS: true, toOther: true}}
	e, _, _, _ := newTestEngine(t, w, table)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !table.flows[toDNS] || !table.flows[toOther] {
		t.Fatalf("after the first sync the flows to serving endpoints are gone: %v", table.flows)
	}

	w.services.Delete("ns1", "dns")
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(w.sliceChanges.ConntrackCleanup) != 0 {
		t.Fatalf("the endpoints' changes ask for a cleanup (%v): the test no longer shows the Service-first order", w.sliceChanges.ConntrackCleanup)
	}
	if table.flows[toDNS] {
		t.Error("the sync of the Service's delete left the entry to its cluster IP")
	}
	if !table.flows[toOther] {
		t.Error("the sync of the Service's delete removed another Service's entry")
	}

	w.slices.Delete("ns1", "dns-1")
	calls := table.calls
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if table.calls != calls || !table.flows[toOther] {
		t.Errorf("the slice's delete, which changes no Service port, cleaned (%d calls, flows %v)", table.calls-calls, table.flows)
	}
}

// TestConntrackCleanupRetried: a cleanup that fails is retried on the next
// sync, with nothing else changed, and still removes the frontends of the
// Service deleted in the sync whose cleanup failed.
func TestConntrackCleanupRetried(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	toDNS := udpFlow("198.19.0.10:53", "198.18.64.2:5353")
	table := &conntrackTable{flows: map[conntrack.Flow]bool{toDNS: true}}
	e, _, _, events := newTestEngine(t, w, table)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	w.services.Delete("ns1", "dns")
	table.failNext = true
	if err := e.Sync(ctx); err != nil {
		t.Fatalf("a failed conntrack cleanup failed the sync: %v", err)
	}
	last := (*events)[len(*events)-1]
	if last.Conntrack[v1.IPv4Protocol].Err == nil || !table.flows[toDNS] {
		t.Fatalf("the injected cleanup failure is not reported (%+v) or the entry is gone", last.Conntrack)
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if table.flows[toDNS] {
		t.Error("the retried cleanup left the entry to the deleted Service's cluster IP")
	}
	if got := (*events)[len(*events)-1].Conntrack[v1.IPv4Protocol]; got.Err != nil || got.Deleted != 1 {
		t.Errorf("the retried cleanup reports %+v, want 1 deleted", got)
	}
}

// TestPeriodicSyncRepairsDrift: a periodic sync that finds a family's state
// changed makes its sync full, reports it, and the engine is unhealthy from
// the check until a sync succeeds (and before the first); without drift a periodic sync is not
// full, and once FullSyncPeriod has passed it is, whatever the check finds.
func TestPeriodicSyncRepairsDrift(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	e, b, clock, events := newTestEngine(t, w, nil)
	ctx := context.Background()
	if h := e.Health(); h.Healthy {
		t.Errorf("health before the first sync: %+v; want unhealthy", h)
	}
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if h := e.Health(); !h.Healthy {
		t.Errorf("health after the first sync: %+v; want healthy", h)
	}
	clock.advance(30 * time.Second)
	if _, err := e.run(ctx, true); err != nil {
		t.Fatal(err)
	}
	if ev := (*events)[1]; ev.Full || len(ev.Drift) != 0 || ev.ForcedFull {
		t.Errorf("periodic sync without drift: full %v, drift %v, forced %v; want an incremental sync", ev.Full, ev.Drift, ev.ForcedFull)
	}

	b.drift = missingChain
	b.failNext = 1
	clock.advance(30 * time.Second)
	if _, err := e.run(ctx, true); err == nil {
		t.Fatal("the injected failure was not returned")
	}
	if ev := (*events)[2]; ev.Drift[v1.IPv4Protocol] != missingChain || ev.Err == nil {
		t.Errorf("drift event %+v; want the missing chain and the error", ev)
	}
	if h := e.Health(); h.Healthy || !h.Failing {
		t.Errorf("health after drift and a failed repair: %+v; want failing", h)
	}
	if _, err := e.run(ctx, false); err != nil {
		t.Fatal(err)
	}
	if ev := (*events)[3]; !ev.Full {
		t.Error("the retry after the failed repair is not full")
	}
	if h := e.Health(); !h.Healthy || h.Failing {
		t.Errorf("health after the repair: %+v; want healthy", h)
	}

	clock.advance(DefaultFullSyncPeriod)
	if _, err := e.run(ctx, true); err != nil {
		t.Fatal(err)
	}
	if ev := (*events)[4]; !ev.ForcedFull || !ev.Full {
		t.Errorf("periodic sync a full sync period on: forced %v, full %v; want a forced full sync", ev.ForcedFull, ev.Full)
	}
}

// TestFailedSyncLosesNoChange: a sync that fails is retried with the state
// of the retry, which includes what changed in between.
func TestFailedSyncLosesNoChange(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	e, b, _, _ := newTestEngine(t, w, nil)
	ctx := context.Background()
	b.failNext = 1
	if err := e.Sync(ctx); err == nil {
		t.Fatal("the injected failure was not returned")
	}
	w.addUDPService("other", "198.19.0.11", "198.18.64.3")
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range b.last().Services() {
		names = append(names, s.Name.String())
	}
	if diff := cmp.Diff([]string{"ns1/dns:dns", "ns1/other:dns"}, names); diff != "" {
		t.Errorf("Services synced by the retry (-want +got):\n%s", diff)
	}
}

// TestSourceErrorFailsSync: a Provider that fails fails the sync, which
// touches no Backend and makes the engine unhealthy.
func TestSourceErrorFailsSync(t *testing.T) {
	e, b, _, events := newTestEngine(t, ProviderFunc(func(context.Context) (Desired, error) {
		return Desired{}, errors.New("no state")
	}), nil)
	if err := e.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "no state") {
		t.Fatalf("Sync: %v; want the Provider's error", err)
	}
	if b.last() != nil || (*events)[0].Rulesets != nil || !e.Health().Failing {
		t.Errorf("after a Provider error: synced %v, event %+v, health %+v", b.last(), (*events)[0], e.Health())
	}
}

// TestNextSync: the earliest NextSync of the results is what run returns
// to the loop, which schedules the next run with it.
func TestNextSync(t *testing.T) {
	w := newWorld(t)
	e, b, _, _ := newTestEngine(t, w, nil)
	for _, next := range []time.Duration{0, 700 * time.Millisecond, 2 * time.Second} {
		b.nextSync = next
		again, err := e.run(context.Background(), false)
		if err != nil || again != next {
			t.Errorf("backend NextSync %v: run asks for %v (%v), want %v", next, again, err, next)
		}
	}
}

// TestHealthz: /healthz is 200 while the last success is younger than two
// sync periods, 503 after.
func TestHealthz(t *testing.T) {
	w := newWorld(t)
	e, _, clock, _ := newTestEngine(t, w, nil)
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		after time.Duration
		want  int
	}{{0, http.StatusOK}, {59 * time.Second, http.StatusOK}, {time.Second, http.StatusServiceUnavailable}} {
		clock.advance(tt.after)
		rec := httptest.NewRecorder()
		e.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != tt.want || !strings.Contains(rec.Body.String(), `"lastUpdated"`) {
			t.Errorf("%v later: %d %s, want %d", tt.after, rec.Code, rec.Body, tt.want)
		}
	}
}

// TestMetrics: the metrics are registered with Config.Registerer under
// kube-proxy's names and count syncs and failures; without a Registerer
// the engine works the same.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	b := &fakeBackend{failNext: 1}
	e, err := New(Config{
		Backends:   map[v1.IPFamily]Backend{v1.IPv4Protocol: b},
		Provider:   newWorld(t),
		Registerer: reg,
		Clock:      newFakeClock(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.Sync(ctx)
	e.Sync(ctx)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				got[mf.GetName()] = min(m.GetGauge().GetValue(), 1) // a timestamp: set or not
			}
		}
	}
	// One failed sync, then one full one.
	if diff := cmp.Diff(map[string]float64{
		"kubeproxy_network_programming_duration_seconds":      0,
		"kubeproxy_sync_full_proxy_rules_duration_seconds":    1,
		"kubeproxy_sync_partial_proxy_rules_duration_seconds": 0,
		"kubeproxy_sync_proxy_rules_duration_seconds":         1,
		"kubeproxy_sync_proxy_rules_failures_total":           1,
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds":   1,
		"svcproxy_sync_drift_repairs_total":                   0,
		"svcproxy_sync_periodic_full_total":                   0,
	}, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if _, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: b}, Provider: newWorld(t), Registerer: reg}); err == nil {
		t.Error("registering the metrics twice with one Registerer succeeded")
	}
}

// TestDriftMetric: each drift the periodic check finds counts under its
// family and kind; a failed check counts as check-failed, and a kind the
// engine does not know as other, so that the labels stay bounded. Every
// kind is exported at 0 from the start.
func TestDriftMetric(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	b, clock := &fakeBackend{}, newFakeClock()
	var events []SyncEvent
	e, err := New(Config{
		Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: b},
		Provider: newWorld(t), Registerer: reg, Clock: clock,
		OnSync: func(ev SyncEvent) { events = append(events, ev) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		drift    svcproxy.Drift
		checkErr error
		want     svcproxy.Drift
	}{
		{drift: missingChain, want: missingChain},
		{drift: svcproxy.Drift{Kind: svcproxy.DriftElement, What: "set x has 2 elements, want 3"}, want: svcproxy.Drift{Kind: svcproxy.DriftElement, What: "set x has 2 elements, want 3"}},
		{drift: missingChain, want: missingChain},
		{drift: svcproxy.Drift{Kind: "widget", What: "a widget"}, want: svcproxy.Drift{Kind: svcproxy.DriftOther, What: "a widget"}},
		{drift: svcproxy.Drift{What: "something"}, want: svcproxy.Drift{Kind: svcproxy.DriftOther, What: "something"}},
		{checkErr: errors.New("no socket"), want: svcproxy.Drift{Kind: svcproxy.DriftCheckFailed, What: "state check failed: no socket"}},
	} {
		b.mu.Lock()
		b.drift, b.checkErr = tc.drift, tc.checkErr
		b.mu.Unlock()
		clock.advance(30 * time.Second)
		if _, err := e.run(ctx, true); err != nil {
			t.Fatal(err)
		}
		if got := events[len(events)-1].Drift[v1.IPv4Protocol]; got != tc.want {
			t.Errorf("drift %+v, check error %v: event's drift %+v, want %+v", tc.drift, tc.checkErr, got, tc.want)
		}
		b.mu.Lock()
		b.checkErr = nil
		b.mu.Unlock()
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "svcproxy_sync_drift_repairs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["family"]+" "+labels["kind"]] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{}
	for _, k := range svcproxy.DriftKinds() {
		want["IPv4 "+string(k)] = 0
	}
	want["IPv4 chain"], want["IPv4 element"], want["IPv4 other"], want["IPv4 check-failed"] = 2, 1, 2, 1
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("svcproxy_sync_drift_repairs_total (-want +got):\n%s", diff)
	}
}

// TestRunSyncsOnRequest: Run syncs at once and again on a request, with the
// real clock, and stops with its context.
func TestRunSyncsOnRequest(t *testing.T) {
	w := newWorld(t)
	b := &fakeBackend{}
	e, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: b}, Provider: w, MinSyncPeriod: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	synced := func(n int) bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.synced) >= n }
	waitFor(t, 2*time.Second, "the first sync", func() bool { return synced(1) })
	e.Request()
	waitFor(t, 2*time.Second, "the requested sync", func() bool { return synced(2) })
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no backends": {Provider: ProviderFunc(nil)},
		"no source":   {Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: &fakeBackend{}}},
		"bad family":  {Backends: map[v1.IPFamily]Backend{"IPv5": &fakeBackend{}}, Provider: ProviderFunc(nil)},
		"nil backend": {Backends: map[v1.IPFamily]Backend{v1.IPv6Protocol: nil}, Provider: ProviderFunc(nil)},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestCloseClosesBackends: Close closes every Backend.
func TestCloseClosesBackends(t *testing.T) {
	b4, b6 := &fakeBackend{}, &fakeBackend{}
	e, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: b4, v1.IPv6Protocol: b6}, Provider: newWorld(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil || !b4.closed || !b6.closed {
		t.Errorf("Close: %v, closed %v %v", err, b4.closed, b6.closed)
	}
}

// TestCheckIsNotASync: a periodic run that finds no drift and has nothing
// to change only checked, so that the next change need not wait
// MinSyncPeriod after it; one that changed something, found drift, forced a
// full sync or failed did more. The loop then runs a change requested
// right after a check at once (TestSchedule).
func TestCheckIsNotASync(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	e, b, clock, _ := newTestEngine(t, w, nil)
	ctx := context.Background()
	run := func(what string, periodic, wantChecked, wantErr bool) {
		t.Helper()
		clock.advance(30 * time.Second)
		_, checked, err := e.runInLoop(ctx, periodic)
		if checked != wantChecked || (err != nil) != wantErr {
			t.Errorf("%s: checked %v, error %v; want checked %v, an error %v", what, checked, err, wantChecked, wantErr)
		}
	}
	run("first sync", false, false, false)
	run("periodic run, nothing changed", true, true, false)
	run("requested run, nothing changed", false, false, false)
	w.addUDPService("dns2", "198.19.0.11", "198.18.64.3")
	run("periodic run with a change", true, false, false)
	run("periodic run after it", true, true, false)
	b.drift = missingChain
	run("periodic run that finds drift", true, false, false)
	b.failNext = 1
	run("periodic run that fails", true, false, true)
	run("periodic run after the failure", true, false, false)
	run("periodic run, nothing changed again", true, true, false)
	clock.advance(DefaultFullSyncPeriod)
	run("periodic run that forces a full sync", true, false, false)
}

// TestOnHealthChange: Config.OnHealthChange hears of the first success,
// of a drift found (failing before the repair runs), of a failed repair
// (no change: still failing) and of the repair that succeeds, and of
// nothing else.
func TestOnHealthChange(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	e, b, clock, _ := newTestEngine(t, w, nil)
	var changes []bool // Failing, at each change
	e.cfg.OnHealthChange = func(h Health) { changes = append(changes, h.Failing) }
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	clock.advance(30 * time.Second)
	if _, err := e.run(ctx, true); err != nil { // nothing found
		t.Fatal(err)
	}
	b.drift, b.failNext = missingChain, 1
	clock.advance(30 * time.Second)
	if _, err := e.run(ctx, true); err == nil {
		t.Fatal("the injected failure was not returned")
	}
	if _, err := e.run(ctx, false); err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, false}; !slices.Equal(changes, want) {
		t.Errorf("health changes (failing) %v, want %v", changes, want)
	}
}

// TestCheckPutOffWhileChangesCome: a periodic sync right after a Request
// puts its check off, for at most one period; a periodic sync after a
// quiet second checks.
func TestCheckPutOffWhileChangesCome(t *testing.T) {
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", "198.18.64.2")
	e, b, clock, events := newTestEngine(t, w, nil)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	periodic := func(afterRequest bool) SyncEvent {
		t.Helper()
		b.mu.Lock()
		b.drift = missingChain // what a check finds, until a sync
		b.mu.Unlock()
		clock.advance(30 * time.Second)
		if afterRequest {
			e.Request()
			clock.advance(200 * time.Millisecond)
		}
		if _, err := e.run(ctx, true); err != nil {
			t.Fatal(err)
		}
		return (*events)[len(*events)-1]
	}
	for i := range maxCheckDeferrals {
		if ev := periodic(true); !ev.CheckDeferred || len(ev.Drift) != 0 {
			t.Errorf("periodic sync %d, 200 ms after a change: check put off %v, drift %v; want put off, no drift", i+1, ev.CheckDeferred, ev.Drift)
		}
	}
	if ev := periodic(true); ev.CheckDeferred || ev.Drift[v1.IPv4Protocol] != missingChain {
		t.Errorf("periodic sync after one put off: check put off %v, drift %v; want the check, and its drift", ev.CheckDeferred, ev.Drift)
	}
	if ev := periodic(true); !ev.CheckDeferred {
		t.Error("the next period's check, right after a change, is not put off: the count of periods put off did not restart")
	}
	if ev := periodic(false); ev.CheckDeferred || ev.Drift[v1.IPv4Protocol] != missingChain {
		t.Errorf("periodic sync 30 s after the last change: check put off %v, drift %v; want the check, and its drift", ev.CheckDeferred, ev.Drift)
	}
}
