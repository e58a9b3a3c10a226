package iptables_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ruleset"
)

// repairWatch is a Runner over a FakeKernel that, at the first restore
// that writes after armed is set (the repair), calls during.
type repairWatch struct {
	k      *iptables.FakeKernel
	mu     sync.Mutex
	armed  bool
	during func()
}

func (r *repairWatch) Run(ctx context.Context, cmd iptables.Command) error {
	r.mu.Lock()
	repair := r.armed && cmd.Name == "iptables-restore" && !bytes.Contains(cmd.Stdin, []byte("\n-C "))
	if repair {
		r.armed = false
	}
	r.mu.Unlock()
	if repair {
		r.during()
	}
	return r.k.Run(ctx, cmd)
}

// TestHealthDuringRepair: an engine over an Executor whose Service chain
// is flushed behind its back answers /healthz 503, with syncFailing, from
// the periodic check that finds it until the repair has written the
// rules: the engine's health changes (Config.OnHealthChange) are healthy
// after the first sync, failing at the check, healthy after the repair,
// and /healthz is 503 while the repair's iptables-restore runs.
func TestHealthDuringRepair(t *testing.T) {
	k := iptables.NewFakeKernel(t)
	type answer struct {
		Code        int
		SyncFailing bool
	}
	var eng *engine.Engine
	var duringRepair answer
	watch := &repairWatch{k: k, during: func() {
		rec := httptest.NewRecorder()
		eng.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		var body struct{ SyncFailing bool }
		json.Unmarshal(rec.Body.Bytes(), &body)
		duringRepair = answer{rec.Code, body.SyncFailing}
	}}
	ex, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: v1.IPv4Protocol, Runner: watch})
	if err != nil {
		t.Fatal(err)
	}
	rs := iptables.WebRuleset(t)
	changes := make(chan engine.Health, 8)
	eng, err = engine.New(engine.Config{
		Backends: map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: ex},
		Provider: engine.ProviderFunc(func(context.Context) (engine.Desired, error) {
			return engine.Desired{Rulesets: map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs}}, nil
		}),
		SyncPeriod:     50 * time.Millisecond,
		OnHealthChange: func(h engine.Health) { changes <- h },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	next := func(what string) engine.Health {
		t.Helper()
		select {
		case h := <-changes:
			return h
		case <-time.After(10 * time.Second):
			t.Fatalf("no health change %s within 10 s", what)
			return engine.Health{}
		}
	}
	if h := next("at the first sync"); h.Failing || h.LastSuccess.IsZero() {
		t.Fatalf("health at the first sync: %+v", h)
	}

	// Behind the Executor's back: the Service's chain flushed, the deep
	// check due.
	watch.mu.Lock()
	watch.armed = true
	watch.mu.Unlock()
	iptables.FlushServiceChain(ex, k, iptables.Web)

	if h := next("at the check"); !h.Failing || h.Healthy {
		t.Errorf("health once the check found the drift: %+v; want failing", h)
	}
	if h := next("after the repair"); h.Failing || !h.Healthy {
		t.Errorf("health after the repair: %+v; want healthy", h)
	}
	if want := (answer{http.StatusServiceUnavailable, true}); duringRepair != want {
		t.Errorf("/healthz during the repair's restore: %+v; want %+v", duringRepair, want)
	}
	if iptables.ServiceChainRules(ex, k, iptables.Web) == 0 {
		t.Error("the Service's chain was not repaired")
	}
}
