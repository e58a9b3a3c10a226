package engine

import (
	"encoding/json"
	"net/http"
	"time"
)

// Health is the engine's health, as /healthz reports it.
type Health struct {
	// LastSuccess is when the last successful sync ended (when the engine
	// was made, before the first).
	LastSuccess time.Time
	// Failing is true from a failed sync, or from the moment the periodic
	// check finds a family's state changed behind the engine's back, until
	// the next successful sync: the data plane may be missing rules.
	Failing bool
	// Now is when the health was read.
	Now time.Time
	// Healthy is true when a sync has succeeded, the last success is
	// younger than twice Config.SyncPeriod and the engine is not Failing:
	// before its first sync (a proxy waiting for its inputs) an engine is
	// not healthy, as kube-proxy is not before it knows its Node.
	Healthy bool
}

// Health returns the engine's health now. It is safe to call from any
// goroutine, also while the engine runs.
func (e *Engine) Health() Health {
	if !e.made() {
		return Health{Failing: true, Now: time.Now()}
	}
	e.healthMu.Lock()
	h := Health{LastSuccess: e.lastSuccess, Failing: e.failing}
	synced := e.synced
	e.healthMu.Unlock()
	h.Now = e.clock.Now()
	h.Healthy = synced && h.Now.Sub(h.LastSuccess) < 2*e.cfg.SyncPeriod && !h.Failing
	return h
}

// setHealth records the outcome of a sync or check: failing, and when ok
// the time of a success; it calls Config.OnHealthChange when Failing
// changed or this is the first success.
func (e *Engine) setHealth(failing bool, success time.Time) {
	e.healthMu.Lock()
	changed := e.failing != failing || (!e.synced && !success.IsZero())
	e.failing = failing
	if !success.IsZero() {
		e.lastSuccess, e.synced = success, true
	}
	e.healthMu.Unlock()
	if changed && e.cfg.OnHealthChange != nil {
		e.cfg.OnHealthChange(e.Health())
	}
}

// HealthzHandler answers kube-proxy's /healthz: 200 when Health is
// Healthy, 503 otherwise, with a JSON body of lastUpdated, currentTime,
// healthy and syncFailing.
func (e *Engine) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := e.Health()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !h.Healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(map[string]any{
			"lastUpdated": h.LastSuccess.UTC().Format(time.RFC3339Nano),
			"currentTime": h.Now.UTC().Format(time.RFC3339Nano),
			"healthy":     h.Healthy,
			"syncFailing": h.Failing,
		})
	})
}
