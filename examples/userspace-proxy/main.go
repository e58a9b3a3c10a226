// Command userspace-proxy serves Kubernetes Services from user space: a
// pure-Go L4 proxy for TCP and UDP built only on svcproxy's public packages:
// a manifests.Watcher feeds a state.State, and the engine syncs the
// DataPlane, its Backend for both IP families, with the Rulesets built from
// it. It listens on every frontend the node serves (cluster IPs, external
// and load-balancer IPs, node ports on the node's addresses) and forwards
// each new TCP connection, or each UDP flow (a client address and port,
// ended after 30 s idle), to a target picked with the Ruleset's decisions
// and shares, honouring Local traffic policies, load-balancer source ranges
// and ClientIP affinity.
//
// What it does to the node: it adds a route of type local (table local,
// protocol 177) to each cluster, external and load-balancer IP it serves, so
// that the kernel delivers their packets to its sockets, and removes them on
// exit (and, on start, those that a proxy which died left behind). It needs
// root for that alone.
//
// Where it differs from the kernel backends: every flow is masqueraded (a
// proxy's targets see the proxy's address), so externalTrafficPolicy Local
// picks local targets but does not preserve the client's address. A Service
// without endpoints gets no socket, so the kernel refuses its TCP
// connections with a reset and its UDP datagrams with ICMP port unreachable;
// so it does on the ports of a served address that no Service serves.
// A dropped TCP connection has completed its handshake with the kernel
// before the proxy sees it: it is held unanswered for 30 s, then reset. SCTP
// is not served, nor are healthz, metrics and health check node ports; of
// the reference proxies' flags it takes --manifests, --node-name, --node-ip,
// --cluster-cidr, --sync-period and --dry-run.
//
//	go run ./examples/userspace-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
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

func main() {
	hostname, _ := os.Hostname()
	path := flag.String("manifests", "", "file or directory of Services, EndpointSlices and Nodes")
	nodeName := flag.String("node-name", hostname, "this node")
	nodeIPs := flag.String("node-ip", "", "addresses on which NodePorts are served (comma-separated); default the Node's addresses")
	clusterCIDRs := flag.String("cluster-cidr", "", "pod CIDRs, comma-separated, one per family")
	dryRun := flag.Bool("dry-run", false, "print the frontends and targets it would serve, and exit")
	syncPeriod := flag.Duration("sync-period", 30*time.Second, "resync at least this often")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ips, errIPs := parseList("node-ip", *nodeIPs, netip.ParseAddr)
	cidrs, errCIDRs := parseList("cluster-cidr", *clusterCIDRs, netip.ParsePrefix)
	in, err := newInputs(*nodeName, ips, cidrs, log)
	if err = errors.Join(errIPs, errCIDRs, err); err != nil {
		log.Error("bad flag", "err", err)
		os.Exit(2)
	}
	w := manifests.NewWatcher(*path, manifestSettle)
	m, err := w.Read()
	if err != nil {
		log.Error("bad manifests", "err", err)
		os.Exit(2)
	}
	in.apply(m)
	if *dryRun {
		d, _ := in.Desired(context.Background())
		for _, f := range families {
			printPlan(os.Stdout, d.Rulesets[f])
		}
	} else if err := serve(in, w, *syncPeriod); err != nil {
		log.Error("serving", "err", err)
		os.Exit(1)
	}
}

// serve runs the data plane with the engine until SIGINT or SIGTERM,
// applying the manifests that w reads when they change and settle.
func serve(in *inputs, w *manifests.Watcher, syncPeriod time.Duration) error {
	dp, err := NewDataPlane()
	if err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{Backends: map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: dp, v1.IPv6Protocol: dp},
		Source: in, SyncPeriod: syncPeriod, OnSync: in.onSync})
	if err != nil {
		return errors.Join(err, dp.Close())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go w.Watch(ctx, manifestPoll, func(m *manifests.Input) {
		in.apply(m)
		in.log.Info("manifests reloaded", "manifestReload", in.reloads.Add(1))
		eng.Request()
	},
		func(err error) { in.log.Error("bad manifests: kept the last good ones", "err", err) })
	eng.Run(ctx)
	return eng.Close()
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

// inputs are the State the manifests feed and what the Rulesets take
// besides it: node IPs (of both families; default the Node's addresses)
// and cluster CIDRs.
type inputs struct {
	state        *state.State
	nodeIPs      []netip.Addr
	clusterCIDRs []netip.Prefix
	built        map[v1.IPFamily]*ruleset.Ruleset
	log          *slog.Logger
	// reloads counts the manifest reloads applied; syncing is the count
	// the state of the sync under way holds, said in its log line as the
	// reference proxies do (docs/reference-proxies.md).
	reloads atomic.Int64
	syncing int64
}

func newInputs(nodeName string, nodeIPs []netip.Addr, clusterCIDRs []netip.Prefix, log *slog.Logger) (*inputs, error) {
	s, err := state.New(families, nodeName, servicemap.Filter{})
	return &inputs{state: s, nodeIPs: nodeIPs, clusterCIDRs: clusterCIDRs, log: log}, err
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
	in.syncing = in.reloads.Load()
	snap, out := in.state.Snapshot(), map[v1.IPFamily]*ruleset.Ruleset{}
	for _, fam := range snap.Families() {
		other := func(a netip.Addr) bool { return a.Is4() != (fam.Family == v1.IPv4Protocol) }
		nodeIPs := fam.NodeAddresses
		if len(in.nodeIPs) > 0 {
			nodeIPs = slices.DeleteFunc(slices.Clone(in.nodeIPs), other)
		}
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam.Family, Node: snap.Node, NodePortAddresses: nodeIPs,
			ClusterCIDRs: slices.DeleteFunc(slices.Clone(in.clusterCIDRs), func(p netip.Prefix) bool { return other(p.Addr()) })})
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

// onSync logs each sync.
func (in *inputs) onSync(ev engine.SyncEvent) {
	if ev.Err != nil {
		in.log.Error("sync failed", "err", ev.Err)
		return
	}
	services := 0
	for _, rs := range ev.Rulesets {
		services += rs.Len()
	}
	in.log.Info("synced", "services", services, "manifestReload", in.syncing)
}

// printPlan writes each frontend of rs and what happens to new flows to it
// from outside the cluster and from the node (or, with cluster CIDRs, from a
// pod), before any load-balancer source-range check.
func printPlan(w io.Writer, rs *ruleset.Ruleset) {
	routes, _ := frontends(rs)
	for _, f := range slices.SortedFunc(maps.Keys(routes), ruleset.Frontend.Compare) {
		r := routes[f]
		fmt.Fprintf(w, "%s (%s of %s)\n", f, r.kind, r.svc.Name)
		for _, origin := range []string{"outside", "the node"} {
			d := rs.Decide(r.svc, r.kind, ruleset.Source{FromNode: origin == "the node"})
			fmt.Fprintf(w, "  from %s: %s", origin, d.Verdict)
			for _, c := range d.Targets {
				fmt.Fprintf(w, " %s share %s", c.Endpoint, c.Share.RatString())
			}
			fmt.Fprintln(w)
		}
	}
}
