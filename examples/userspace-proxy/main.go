// Command userspace-proxy serves Kubernetes Services from user space: a
// pure-Go L4 proxy for TCP and UDP built only on svcproxy's public packages.
// It listens on every frontend the node serves (cluster IPs, external and
// load-balancer IPs, node ports on the node's addresses) and forwards each
// new TCP connection, or each UDP flow (a client address and port, ended
// after 30 s idle), to a target picked with the Ruleset's decisions and
// shares, honouring Local traffic policies, load-balancer source ranges and
// ClientIP affinity.
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
// It is wired from public packages alone: a manifests.Watcher feeds a
// state.State with the manifests once a change has settled, the engine
// builds the Rulesets from it (ruleset.Builder.Update) and syncs the
// DataPlane, its Backend for both IP families.
//
//	go run ./examples/userspace-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"cmp"
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
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	v1 "k8s.io/api/core/v1"
)

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
		return
	}
	if err := serve(in, w, *syncPeriod, log); err != nil {
		log.Error("serving", "err", err)
		os.Exit(1)
	}
}

// serve runs the data plane with the engine until SIGINT or SIGTERM.
func serve(in *inputs, w *manifests.Watcher, syncPeriod time.Duration, log *slog.Logger) error {
	dp, err := NewDataPlane()
	if err != nil {
		return err
	}
	eng, err := engine.New(engine.Config{Backends: map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: dp, v1.IPv6Protocol: dp},
		Source: in, SyncPeriod: syncPeriod, OnSync: onSync(log)})
	if err != nil {
		return errors.Join(err, dp.Close())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go watch(ctx, w, in, eng)
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

// printPlan writes each frontend of rs and what happens to new flows to it
// from outside the cluster and from the node (or, with cluster CIDRs, from a
// pod), before any load-balancer source-range check.
func printPlan(w io.Writer, rs *ruleset.Ruleset) {
	routes, _ := frontends(rs)
	for _, f := range slices.SortedFunc(maps.Keys(routes), func(a, b frontend) int {
		return cmp.Or(a.addr.Compare(b.addr), strings.Compare(string(a.proto), string(b.proto)))
	}) {
		r := routes[f]
		fmt.Fprintf(w, "%s/%s (%s of %s)\n", f.addr, f.proto, r.kind, r.svc.Name)
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
