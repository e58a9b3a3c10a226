package main

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

var families = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}

// inputs are the State the manifests feed and what the Rulesets take
// besides it.
type inputs struct {
	state *state.State
	// nodeIPs and clusterCIDRs are of both families; nodeIPs default to
	// the Node's addresses.
	nodeIPs      []netip.Addr
	clusterCIDRs []netip.Prefix
	built        map[v1.IPFamily]*ruleset.Ruleset
	log          *slog.Logger
}

// apply replaces the State with the manifests read and logs what they warn
// about.
func (in *inputs) apply(m *manifests.Input) {
	in.warn(append(m.Warnings, in.state.Replace(state.Objects{Services: m.Objects.Services, EndpointSlices: m.Objects.EndpointSlices, Nodes: m.Objects.Nodes})...))
}

func (in *inputs) warn(warnings []svcproxy.Warning) {
	for _, w := range warnings {
		in.log.Warn("skipped", "warning", w.String())
	}
}

// Desired is the engine's Source: the Rulesets of the State now.
func (in *inputs) Desired(context.Context) (engine.Desired, error) {
	snap, out := in.state.Snapshot(), map[v1.IPFamily]*ruleset.Ruleset{}
	for _, fam := range snap.Families() {
		nodeIPs := fam.NodeAddresses
		if len(in.nodeIPs) > 0 {
			nodeIPs = slices.DeleteFunc(slices.Clone(in.nodeIPs), func(a netip.Addr) bool { return a.Is4() != (fam.Family == v1.IPv4Protocol) })
		}
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam.Family, Node: snap.Node, NodePortAddresses: nodeIPs,
			ClusterCIDRs: slices.DeleteFunc(slices.Clone(in.clusterCIDRs), func(p netip.Prefix) bool { return p.Addr().Is4() != (fam.Family == v1.IPv4Protocol) })})
		if err != nil {
			return engine.Desired{}, err
		}
		rs, _, warnings := b.Update(in.built[fam.Family], fam.Services, fam.Endpoints)
		in.warn(warnings)
		out[fam.Family] = rs
	}
	in.built = out
	return engine.Desired{Rulesets: out, Triggers: snap.TriggerTimes}, nil
}

func newInputs(nodeName string, nodeIPs []netip.Addr, clusterCIDRs []netip.Prefix, log *slog.Logger) (*inputs, error) {
	s, err := state.New(families, nodeName, servicemap.Filter{})
	return &inputs{state: s, nodeIPs: nodeIPs, clusterCIDRs: clusterCIDRs, log: log}, err
}

// manifestPoll and manifestSettle are how often the manifests are polled
// and how long a change must stay unchanged before it is read (so that a
// file being written is not applied half-way), as in the reference proxies.
const manifestPoll, manifestSettle = 250 * time.Millisecond, 500 * time.Millisecond

// watch applies the manifests that w reads to in when they change and
// settle, and has eng sync, until ctx is done. Broken manifests are logged
// once and leave the State as it was.
func watch(ctx context.Context, w *manifests.Watcher, in *inputs, eng *engine.Engine) {
	w.Watch(ctx, manifestPoll, func(m *manifests.Input) { in.apply(m); eng.Request() },
		func(err error) { in.log.Error("bad manifests: kept the last good ones", "err", err) })
}

// onSync logs each sync.
func onSync(log *slog.Logger) func(engine.SyncEvent) {
	return func(ev engine.SyncEvent) {
		if ev.Err != nil {
			log.Error("sync failed", "err", ev.Err)
			return
		}
		services := 0
		for _, rs := range ev.Rulesets {
			services += rs.Len()
		}
		log.Info("synced", "services", services)
	}
}
