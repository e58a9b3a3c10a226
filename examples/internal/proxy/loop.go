package proxy

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/engine"
)

// newEngine makes the backend of every family and the engine that syncs
// them, with a conntrack cleaner when netlink allows one. closeAll closes
// the backends and the cleaner.
func (p *proxy) newEngine() (eng *engine.Engine, closeAll func(), err error) {
	backends := map[v1.IPFamily]engine.Backend{}
	var cleaner *conntrack.NetlinkCleaner
	closeAll = func() {
		for _, b := range backends {
			b.Close()
		}
		if cleaner != nil {
			cleaner.Close()
		}
	}
	for _, f := range p.families {
		b, err := p.mode.NewBackend(f, p.opts)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%s backend for %s: %w", p.mode.Name, f, err)
		}
		backends[f] = b
	}
	var ordered []any
	for _, f := range p.families {
		ordered = append(ordered, backends[f])
	}
	if err := p.metrics.registerCounters(ordered); err != nil {
		p.log.Error("nfacct counters unavailable: the rules go without them and kube-proxy's kubeproxy_iptables_*_packets_total metrics are not exported", "err", err)
	}
	p.backends = backends
	byFamily := map[string]any{}
	for f, b := range backends {
		byFamily[string(f)] = b
	}
	p.metrics.registerStats(byFamily)
	if p.mode.Name == "nftables" {
		p.metrics.registerNFTablesFailures(p.families)
	}
	p.counterErr = map[v1.IPFamily]string{}
	for f, b := range backends {
		if r, ok := b.(counterReader); ok && r.NFAcctErr() != nil {
			p.counterErr[f] = r.NFAcctErr().Error() // logged above
		}
	}
	cfg := p.engineConfig(backends)
	if cleaner, err = conntrack.NewNetlinkCleaner(conntrack.CleanerConfig{}); err != nil {
		p.log.Warn("stale UDP conntrack entries will not be cleaned up", "err", err)
	} else {
		cfg.Conntrack = cleaner
	}
	if eng, err = engine.New(cfg); err != nil {
		closeAll()
		return nil, nil, err
	}
	p.eng.Store(eng)
	return eng, closeAll, nil
}

// engineConfig is the configuration of an engine that syncs the proxy's
// state to backends, without conntrack cleanup.
func (p *proxy) engineConfig(backends map[v1.IPFamily]engine.Backend) engine.Config {
	return engine.Config{
		Backends:      backends,
		Provider:      engine.ProviderFunc(p.desired),
		MinSyncPeriod: p.opts.MinSyncPeriod,
		SyncPeriod:    p.opts.SyncPeriod,
		Registerer:    p.metrics.registry,
		OnSync:        p.onSync,
		OnHealthChange: func(h engine.Health) {
			p.log.Info("health changed", "healthy", h.Healthy, "syncFailing", h.Failing)
		},
	}
}

// desired is the engine's Provider: the Rulesets of the current state.
func (p *proxy) desired(context.Context) (engine.Desired, error) {
	services, eps := p.state.Pending()
	p.metrics.serviceChangesPending.Set(float64(services))
	p.metrics.endpointChangesPending.Set(float64(eps))
	p.syncingReload = p.reloads.Load() // before the snapshot, which then holds that reload
	snap := p.state.Snapshot()
	desired, err := p.build(snap)
	if err != nil {
		return engine.Desired{}, err
	}
	p.nodePortAddrs = p.healthCheckAddresses(snap)
	return desired, nil
}

// onSync logs what a sync did and has the health check node ports follow
// the Rulesets synced.
func (p *proxy) onSync(ev engine.SyncEvent) {
	for _, f := range p.families {
		if d, ok := ev.Drift[f]; ok {
			p.log.Warn("rules changed behind the proxy's back: full sync", "family", f, "kind", d.Kind, "missing", d.What)
		}
		if c, ok := ev.Conntrack[f]; ok {
			switch {
			case c.Err != nil:
				p.log.Error("conntrack cleanup failed; retrying on the next sync", "family", f, "err", c.Err)
			case c.Deleted > 0:
				p.log.Info("deleted stale conntrack entries", "family", f, "deleted", c.Deleted)
			}
		}
	}
	if ev.Full {
		p.logCounterErrors()
	}
	for f := range ev.Results {
		p.metrics.recordNoLocalEndpoints(ev.Rulesets[f])
	}
	p.metrics.recordFailedFamilies(p.families, ev)
	if ev.Err != nil {
		p.log.Error("sync failed", "periodic", ev.Periodic, "duration", ev.End.Sub(ev.Start), "err", ev.Err)
		return
	}
	if p.conflicts != nil {
		p.logWarnings(p.conflicts.check(ev.Rulesets))
	}
	if p.health != nil {
		report := p.health.Update(ev.Rulesets, p.nodePortAddrs)
		for _, w := range report.Warnings {
			p.log.Warn(w.String())
		}
		for _, err := range report.Errors {
			p.log.Error("health check node port not served (--node-ip, --nodeport-addresses)", "err", err)
		}
		p.metrics.healthPorts.WithLabelValues("serving").Set(float64(report.Serving))
		p.metrics.healthPorts.WithLabelValues("unbound").Set(float64(report.Unbound))
	}
	p.log.Info("synced", "mode", p.mode.Name, "families", p.families, "full", ev.Full, "periodic", ev.Periodic, "duration", ev.End.Sub(ev.Start),
		"manifestReload", p.syncingReload)
}

// logCounterErrors logs, after a full sync, the nfacct counters a backend
// could not make (as kube-proxy does), once until it changes.
func (p *proxy) logCounterErrors() {
	for _, f := range p.families {
		r, ok := p.backends[f].(counterReader)
		if !ok {
			continue
		}
		err := r.NFAcctErr()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != p.counterErr[f] {
			if err != nil {
				p.log.Error("nfacct counters missing: the rules go without them", "family", f, "err", err)
			}
			p.counterErr[f] = msg
		}
	}
}
