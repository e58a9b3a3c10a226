package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// options are the inputs of the Rulesets.
type options struct {
	manifests, nodeName string
	// nodeIPs and clusterCIDRs are of both families.
	nodeIPs      []netip.Addr
	clusterCIDRs []netip.Prefix
}

// build reads the manifests and returns the Rulesets of IPv4 and IPv6, in
// that order, logging each warning once.
func (o options) build(log *slog.Logger) ([]*ruleset.Ruleset, error) {
	objs, warnings, err := manifests.Load(o.manifests)
	if err != nil {
		return nil, fmt.Errorf("bad manifests: %w", err)
	}
	node, nodeIPs := topology.Node{Name: o.nodeName}, o.nodeIPs
	if i := slices.IndexFunc(objs.Nodes, func(n *v1.Node) bool { return n.Name == o.nodeName }); i >= 0 {
		node = topology.NodeFromObject(objs.Nodes[i])
		if len(nodeIPs) == 0 {
			addrs, w := ruleset.NodeAddresses(objs.Nodes[i], v1.IPv4Protocol, v1.IPv6Protocol)
			nodeIPs, warnings = addrs, append(warnings, w...)
		}
	}
	var rulesets []*ruleset.Ruleset
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		other := func(a netip.Addr) bool { return a.Is4() != (family == v1.IPv4Protocol) }
		builder, err := ruleset.NewBuilder(ruleset.Config{Family: family, Node: node,
			NodePortAddresses: slices.DeleteFunc(slices.Clone(nodeIPs), other),
			ClusterCIDRs:      slices.DeleteFunc(slices.Clone(o.clusterCIDRs), func(p netip.Prefix) bool { return other(p.Addr()) })})
		if err != nil {
			return nil, err
		}
		services, eps := servicemap.NewTracker(family, servicemap.Filter{}), endpoints.NewTracker(family, servicemap.Filter{})
		for _, svc := range objs.Services {
			_, w := services.Update(svc)
			warnings = append(warnings, w...)
		}
		for _, es := range objs.EndpointSlices {
			_, w := eps.Update(es)
			warnings = append(warnings, w...)
		}
		svcSnap, _ := services.Snapshot()
		epSnap, _ := eps.Snapshot()
		rs, w := builder.Build(svcSnap, epSnap)
		rulesets, warnings = append(rulesets, rs), append(warnings, w...)
	}
	logged := map[string]bool{}
	for _, w := range warnings {
		if !logged[w.String()] {
			log.Warn("skipped", "warning", w.String())
		}
		logged[w.String()] = true
	}
	return rulesets, nil
}

// parseList parses a comma-separated flag value.
func parseList[T any](flagName, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		x, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flagName, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// run syncs dp with the manifests when they change and every syncPeriod,
// until ctx is done. It logs "synced" when both families are served, and
// else the errors; a failed sync is retried at the next change or period.
func run(ctx context.Context, o options, dp *DataPlane, syncPeriod time.Duration, log *slog.Logger) {
	seen, last := "", time.Time{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if sig := signature(o.manifests); sig != seen || time.Since(last) >= syncPeriod {
			seen, last = sig, time.Now()
			rulesets, err := o.build(log)
			services := 0
			for _, rs := range rulesets { // one family failing does not stop the other
				err, services = errors.Join(err, dp.Sync(ctx, rs)), services+rs.Len()
			}
			if err != nil {
				log.Error("sync failed", "err", err)
			} else {
				log.Info("synced", "services", services)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// signature is the manifests' file names, sizes and modification times:
// when it changes, they are read again.
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
