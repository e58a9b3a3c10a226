package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
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

// load reads the manifests into the State and logs what they warn about.
func (in *inputs) load(path string) error {
	objs, warnings, err := manifests.Load(path)
	if err != nil {
		return err
	}
	in.warn(append(warnings, in.state.Replace(state.Objects{Services: objs.Services, EndpointSlices: objs.EndpointSlices, Nodes: objs.Nodes})...))
	return nil
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

// watch reloads the manifests at path into in when their files change and
// has eng sync, until ctx is done.
func watch(ctx context.Context, path string, in *inputs, eng *engine.Engine) {
	seen := signature(path)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if sig := signature(path); sig != seen {
			seen = sig
			if err := in.load(path); err != nil {
				in.log.Error("bad manifests: kept the last good ones", "err", err)
				continue
			}
			eng.Request()
		}
	}
}

// signature is the manifests' file names, sizes and modification times.
func signature(path string) string {
	files, err := manifests.Files(path)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, f := range files {
		if info, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%s %d %d\n", f, info.Size(), info.ModTime().UnixNano())
		}
	}
	return b.String()
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
