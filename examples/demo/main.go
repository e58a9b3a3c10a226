// Command demo shows how svcproxy decides which pod serves which traffic. It
// reads Services, EndpointSlices and Nodes from manifests, runs them through
// the decision core (servicemap, endpoints, topology, ruleset) for one node,
// and prints, for each Service port, where each kind of traffic goes.
//
// With --explain it answers for one packet instead, for each backend
// (--backend iptables or nftables selects one): it renders the rules the
// reference proxy of that backend would install on the node, evaluates the
// packet with the backend's evaluator (trace/iptrace, trace/nfttrace), and
// prints the outcome (result, Service port and frontend, each target with
// its share and whether it is masqueraded, affinity), the rules and map
// elements that decide it, and whether package trace's tracer agrees.
//
// With --explain and --live it answers from the rules in the kernel now,
// in the current network namespace (which needs root): the reference
// proxy's chains and the jumps to them, read with iptables-save (or
// ip6tables-save for an IPv6 packet), and its table, read with `nft list
// table ip kube-proxy` (ip6). It prints the live answer and says where it
// differs from the desired rules' answer: the outcome, and the first step
// of the path that differs. Rules of other programs are not evaluated.
//
// A node runs one proxy, so with --live give --backend: the other backend's
// rules are reported absent.
//
// The exit status is 0 when every answer agrees, 1 when one differs (the
// tracer and the desired rules, or the live and the desired rules, or when
// the live rules are absent: no KUBE-SERVICES chain in nat, no table
// kube-proxy), and 2 on an error (bad flags or manifests, rules that
// cannot be read or evaluated).
//
//	go run ./examples/demo
//	go run ./examples/demo --manifests DIR --node-name NAME
//	go run ./examples/demo --cluster-cidr 198.18.0.0/20 --explain 'tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod'
//	go build -o demo ./examples/demo && sudo ./demo --manifests examples/demo/manifests --backend nftables --live --explain 'tcp 198.18.250.9:40000 -> 198.18.100.1:30080'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

func main() {
	path := flag.String("manifests", "examples/demo/manifests", "file or directory of Services, EndpointSlices and Nodes")
	nodeName := flag.String("node-name", "node-a", "the node to decide for")
	clusterCIDR := flag.String("cluster-cidr", "", "the pod CIDR (of the family explained): traffic from outside it to cluster IPs is masqueraded")
	explain := flag.String("explain", "", `a packet to trace instead, "PROTO SRC -> DST [from pod|node|outside]"`)
	backend := flag.String("backend", "", "with --explain: iptables or nftables (default both)")
	live := flag.Bool("live", false, "with --explain: answer from the rules in the kernel now, in this network namespace (needs root), and compare them with the desired ones")
	flag.Parse()
	opts := options{path: *path, nodeName: *nodeName, clusterCIDR: *clusterCIDR, explain: *explain, backend: *backend, live: *live, run: execRun}
	ctx, cancel := context.WithTimeout(context.Background(), liveTimeout)
	err := run(ctx, os.Stdout, os.Stderr, opts)
	cancel()
	switch {
	case errors.Is(err, errDiffer):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
}

// liveTimeout bounds the reading of the kernel's rules with --live.
const liveTimeout = 30 * time.Second

type options struct {
	path, nodeName, clusterCIDR, explain string
	// backend, live and run are for explain: see explainer.
	backend string
	live    bool
	run     runFunc
}

func run(ctx context.Context, stdout, stderr io.Writer, opts options) error {
	if (opts.live || opts.backend != "") && opts.explain == "" {
		return errors.New("--live and --backend need --explain")
	}
	family := v1.IPv4Protocol
	var packet trace.Packet
	if opts.explain != "" {
		var err error
		if packet, err = trace.ParsePacket(opts.explain); err != nil {
			return fmt.Errorf("--explain: %w", err)
		}
		if packet.Dst.Addr().Is6() {
			family = v1.IPv6Protocol
		}
	}
	backends, err := selectBackends(opts.backend)
	if err != nil {
		return fmt.Errorf("--backend: %w", err)
	}
	rs, nodeAddrs, warnings, err := build(opts, family)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if opts.explain != "" {
		packet.ToNode = slices.Contains(nodeAddrs, packet.Dst.Addr())
		e := explainer{rs: rs, backends: backends, live: opts.live, run: opts.run}
		return e.explain(ctx, stdout, packet)
	}
	printRuleset(stdout, rs, rs.Config().Node)
	return nil
}

// build loads the manifests and decides for the node: the Ruleset of
// family, the node's addresses of that family, and the warnings about
// skipped objects. A cluster CIDR of the other family is not used.
func build(opts options, family v1.IPFamily) (*ruleset.Ruleset, []netip.Addr, []svcproxy.Warning, error) {
	cfg := ruleset.Config{Family: family, Node: topology.Node{Name: opts.nodeName}}
	if opts.clusterCIDR != "" {
		cidr, err := netip.ParsePrefix(opts.clusterCIDR)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--cluster-cidr: %w", err)
		}
		if cidr.Addr().Is6() == (family == v1.IPv6Protocol) {
			cfg.ClusterCIDRs = []netip.Prefix{cidr}
		}
	}
	objs, warnings, err := manifests.Load(opts.path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bad manifests: %w", err)
	}
	var nodeAddrs []netip.Addr
	for _, n := range objs.Nodes {
		if n.Name == opts.nodeName {
			cfg.Node = topology.NodeFromObject(n)
			var w []svcproxy.Warning
			nodeAddrs, w = ruleset.NodeAddresses(n, family)
			warnings = append(warnings, w...)
		}
	}
	services := servicemap.NewTracker(family, servicemap.Filter{})
	for _, svc := range objs.Services {
		_, w := services.Update(svc)
		warnings = append(warnings, w...)
	}
	epTracker := endpoints.NewTracker(family, servicemap.Filter{})
	for _, es := range objs.EndpointSlices {
		_, w := epTracker.Update(es)
		warnings = append(warnings, w...)
	}
	builder, err := ruleset.NewBuilder(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	svcSnap, _ := services.Snapshot()
	epSnap, _ := epTracker.Snapshot()
	rs, w := builder.Build(svcSnap, epSnap)
	return rs, nodeAddrs, append(warnings, w...), nil
}

func printRuleset(w io.Writer, rs *ruleset.Ruleset, node topology.Node) {
	fmt.Fprintf(w, "Endpoint selection on node %s (zone %q)\n", node.Name, node.Zone)
	for _, s := range rs.Services() {
		fmt.Fprintf(w, "\n%s/%s  cluster IP %s:%d", s.Name, strings.ToLower(string(s.Name.Protocol)), s.ClusterIP, s.Port)
		if s.NodePort != 0 {
			fmt.Fprintf(w, "  node port %d", s.NodePort)
		}
		for _, ip := range s.LoadBalancerIPs {
			fmt.Fprintf(w, "  load balancer %s", ip)
		}
		if s.Affinity.Enabled() {
			fmt.Fprintf(w, "  affinity %s", s.Affinity)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  cluster IP traffic: %s\n", describe(s, s.Internal))
		if s.External != ruleset.RouteNone {
			fmt.Fprintf(w, "  external traffic:   %s\n", describe(s, s.External))
		}
		if len(s.LoadBalancerSourceRanges) > 0 {
			fmt.Fprintf(w, "  load balancer open to: %v\n", s.LoadBalancerSourceRanges)
		}
		if s.HealthCheckNodePort != 0 {
			fmt.Fprintf(w, "  health check node port %d answers %s\n", s.HealthCheckNodePort, health(s))
		}
	}
}

func describe(s *ruleset.Service, r ruleset.Route) string {
	switch r {
	case ruleset.RouteCluster:
		return "spread over " + targets(s.ClusterTargets)
	case ruleset.RouteLocal:
		return "spread over this node's " + targets(s.LocalTargets)
	case ruleset.RouteReject:
		return "rejected (no endpoints anywhere)"
	case ruleset.RouteDrop:
		return "dropped (Local policy, no endpoint on this node)"
	}
	return r.String()
}

func targets(ts []ruleset.Target) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Endpoint.String()
	}
	if len(ts) == 1 {
		return parts[0]
	}
	return fmt.Sprintf("%s (1/%d each)", strings.Join(parts, ", "), len(ts))
}

func health(s *ruleset.Service) string {
	if len(s.LocalTargets) > 0 {
		return fmt.Sprintf("200 (%d local endpoints)", len(s.LocalTargets))
	}
	return "503 (no local endpoints)"
}
