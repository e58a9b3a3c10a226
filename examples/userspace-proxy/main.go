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
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
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
	p, err := newProxy(*nodeName, ips, cidrs, log)
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
	p.apply(m)
	if *dryRun {
		d, err := p.source.Desired(context.Background())
		if err != nil {
			log.Error("building the rules", "err", err)
			os.Exit(1)
		}
		for _, f := range families {
			printPlan(os.Stdout, d.Rulesets[f])
		}
	} else if err := p.serve(w, *syncPeriod); err != nil {
		log.Error("serving", "err", err)
		os.Exit(1)
	}
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
// from outside the cluster, from a pod and from the node (ruleset.Origins),
// the load-balancer source-range firewall included.
func printPlan(w io.Writer, rs *ruleset.Ruleset) {
	routes, _ := frontends(rs)
	for _, f := range slices.SortedFunc(maps.Keys(routes), ruleset.Frontend.Compare) {
		r := routes[f]
		fmt.Fprintf(w, "%s (%s of %s)\n", f, r.kind, r.svc.Name)
		for _, origin := range ruleset.Origins {
			fmt.Fprintf(w, "  from %s: %s\n", origin, rs.Decide(r.svc, r.kind, rs.ClientOf(origin, nil)))
		}
	}
}
