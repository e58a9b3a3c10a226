package engine

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/ruleset"
)

// cleanConntrack deletes, after family f synced rs, the conntrack entries
// that no longer match: entries that send a client to an endpoint that is
// gone, or to a frontend that is gone. It compares rs with the Ruleset
// conntrack was last cleaned against, not with the last one synced: a
// Service deleted in a sync whose cleanup failed is still cleaned when the
// cleanup is retried.
func (e *Engine) cleanConntrack(f v1.IPFamily, rs *ruleset.Ruleset, ev *SyncEvent) {
	if e.cfg.Conntrack == nil {
		return
	}
	prev := e.cleaned[f]
	if prev == rs {
		return
	}
	opts := conntrack.Options{Previous: prev, SCTP: e.cfg.ConntrackSCTP}
	if !conntrack.NeedsCleanup(ruleset.Diff(prev, rs), opts) {
		e.cleaned[f] = rs
		return
	}
	start := e.clock.Now()
	res, err := e.cfg.Conntrack.Clean(f, conntrack.StaleFilters(rs, opts))
	e.metrics.conntrackDuration.WithLabelValues(string(f)).Observe(e.clock.Now().Sub(start).Seconds())
	e.metrics.conntrackDeleted.WithLabelValues(string(f)).Add(float64(res.Deleted))
	if ev.Conntrack == nil {
		ev.Conntrack = map[v1.IPFamily]ConntrackCleanup{}
	}
	ev.Conntrack[f] = ConntrackCleanup{CleanResult: res, Err: err}
	if err == nil {
		e.cleaned[f] = rs
	}
}
