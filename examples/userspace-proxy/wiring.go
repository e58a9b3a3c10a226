package main

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// manifestPoll and manifestSettle are how often the manifests are polled
// and how long a change must stay unchanged before it is read (so that a
// file being written is not applied half-way), as in the reference proxies.
const manifestPoll, manifestSettle = 250 * time.Millisecond, 500 * time.Millisecond

var families = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}

// proxy is the State that the manifests feed and the engine Source that
// builds its Rulesets.
type proxy struct {
	state  *state.State
	source engine.StateProvider
	log    *slog.Logger
	// reloads counts the manifest reloads applied; syncing is the count
	// the state of the sync under way holds, said in its log line as the
	// reference proxies do (docs/reference-proxies.md).
	reloads atomic.Int64
	syncing int64
}

// newProxy returns a proxy of both IP families whose Rulesets serve node
// ports on nodeIPs (default: the Node's addresses) and take clusterCIDRs.
func newProxy(nodeName string, nodeIPs []netip.Addr, clusterCIDRs []netip.Prefix, log *slog.Logger) (*proxy, error) {
	st, err := state.New(families, nodeName, servicemap.Filter{})
	if err != nil {
		return nil, err
	}
	p := &proxy{state: st, log: log}
	config, err := state.ConfigFrom(ruleset.Config{NodePortAddresses: nodeIPs, ClusterCIDRs: clusterCIDRs})
	if err != nil {
		return nil, err
	}
	builder, err := state.NewBuilder(config)
	if err != nil {
		return nil, err
	}
	p.source = engine.StateProvider{State: st, Builder: builder, OnWarnings: p.warn}
	return p, nil
}

// serve runs the data plane with the engine until SIGINT or SIGTERM,
// applying the manifests that w reads when they change and settle.
func (p *proxy) serve(w *manifests.Watcher, syncPeriod time.Duration) error {
	dp, err := NewDataPlane()
	if err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{Backends: map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: dp, v1.IPv6Protocol: dp},
		Provider: engine.ProviderFunc(p.desired), SyncPeriod: syncPeriod, OnSync: p.onSync})
	if err != nil {
		return errors.Join(err, dp.Close())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go w.Watch(ctx, manifestPoll, func(m *manifests.Input) {
		p.apply(m)
		p.log.Info("manifests reloaded", "manifestReload", p.reloads.Add(1))
		eng.Request()
	},
		func(err error) { p.log.Error("bad manifests: kept the last good ones", "err", err) })
	eng.Run(ctx)
	return eng.Close()
}

// apply replaces the State with the manifests read and logs what they warn
// about.
func (p *proxy) apply(m *manifests.Input) {
	p.warn(append(m.Warnings, p.state.Replace(*m.Objects)...))
}

func (p *proxy) warn(warnings []svcproxy.Warning) {
	for _, w := range warnings {
		p.log.Warn("skipped", "warning", w.String())
	}
}

// desired is the engine's Provider: the Rulesets of the State now.
func (p *proxy) desired(ctx context.Context) (engine.Desired, error) {
	p.syncing = p.reloads.Load() // before the Snapshot, which then holds that reload
	return p.source.Desired(ctx)
}

// onSync logs each sync.
func (p *proxy) onSync(ev engine.SyncEvent) {
	if ev.Err != nil {
		p.log.Error("sync failed", "err", ev.Err)
		return
	}
	services := 0
	for _, rs := range ev.Rulesets {
		services += rs.Len()
	}
	p.log.Info("synced", "services", services, "manifestReload", p.syncing)
}
