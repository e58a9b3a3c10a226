package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// TestScheduleConfigErrorWaitsForRequest: a run that fails with a
// configuration error is neither retried nor followed by a periodic run;
// a request ends the wait.
func TestScheduleConfigErrorWaitsForRequest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sc := &schedule{min: time.Second, max: 30 * time.Second, retry: time.Second}
	sc.start(t0)
	sc.finish(t0, 0, fmt.Errorf("getting the desired state: %w", ruleset.ErrConfig))
	if !sc.idle() {
		t.Fatal("after a configuration error: a run is due without a request")
	}
	sc.requested = true
	if sc.idle() || !sc.due().Equal(t0.Add(time.Second)) {
		t.Errorf("after a request: idle %v, due %v, want at %v", sc.idle(), sc.due(), t0.Add(time.Second))
	}
}

// TestRunDoesNotRetryConfigError: under Run, a Provider whose Config is
// invalid is called once, and again on Request, not retried with back-off.
func TestRunDoesNotRetryConfigError(t *testing.T) {
	var calls atomic.Int32
	provider := ProviderFunc(func(context.Context) (Desired, error) {
		calls.Add(1)
		_, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: 3})
		return Desired{}, err
	})
	e, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: &fakeBackend{}}, Provider: provider,
		MinSyncPeriod: time.Millisecond, RetryInterval: time.Millisecond, SyncPeriod: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 2*time.Second, "the first sync", func() bool { return calls.Load() >= 1 })
	time.Sleep(100 * time.Millisecond) // five periods, a hundred retry intervals
	if n := calls.Load(); n != 1 {
		t.Errorf("the Provider was called %d times, want once", n)
	}
	e.Request()
	waitFor(t, 2*time.Second, "the requested sync", func() bool { return calls.Load() >= 2 })
}

// TestNewChecksStateProvider: a StateProvider without a State or a Builder
// is refused by New, and its Desired fails rather than panics.
func TestNewChecksStateProvider(t *testing.T) {
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "n1", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	backends := map[v1.IPFamily]Backend{v1.IPv4Protocol: &fakeBackend{}}
	for name, p := range map[string]Provider{
		"zero":       StateProvider{},
		"no Builder": StateProvider{State: st},
		"nil":        (*StateProvider)(nil),
	} {
		if _, err := New(Config{Backends: backends, Provider: p}); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := (StateProvider{}).Desired(context.Background()); err == nil {
		t.Error("Desired of a zero StateProvider: no error")
	}
}

// TestStateProviderConfigError: a ConfigFunc whose Config is invalid fails
// the sync with a configuration error that wraps ruleset.ErrConfig, and an
// OnSync that reads the Rulesets of the failed sync reads them as empty.
func TestStateProviderConfigError(t *testing.T) {
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "n1", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	builder, err := state.NewBuilder(func(state.Snapshot, state.Family) (ruleset.Config, error) {
		return ruleset.Config{MasqueradeMark: 3}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var lens []int
	e, err := New(Config{
		Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: &fakeBackend{}},
		Provider: StateProvider{State: st, Builder: builder},
		OnSync: func(ev SyncEvent) {
			rs := ev.Rulesets[v1.IPv4Protocol]
			lens = append(lens, rs.Len(), len(rs.Services()), len(rs.ServedFrontends()))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(context.Background()); !errors.Is(err, ruleset.ErrConfig) {
		t.Errorf("Sync: %v, want a configuration error", err)
	}
	if fmt.Sprint(lens) != "[0 0 0]" {
		t.Errorf("OnSync read %v", lens)
	}
}
