// Command demo shows how svcproxy decides which pod serves which traffic. It
// reads Services, EndpointSlices and Nodes from manifests, runs them through
// the decision core (servicemap, endpoints, topology, ruleset) for one node,
// and prints, for each Service port, where each kind of traffic goes.
//
//	go run ./examples/demo
//	go run ./examples/demo --manifests DIR --node-name NAME
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

func main() {
	path := flag.String("manifests", "examples/demo/manifests", "file or directory of Services, EndpointSlices and Nodes")
	nodeName := flag.String("node-name", "node-a", "the node to decide for")
	flag.Parse()
	if err := run(os.Stdout, os.Stderr, *path, *nodeName); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
}

func run(stdout, stderr io.Writer, path, nodeName string) error {
	objs, warnings, err := manifests.Load(path)
	if err != nil {
		return fmt.Errorf("bad manifests: %w", err)
	}
	node := topology.Node{Name: nodeName}
	for _, n := range objs.Nodes {
		if n.Name == nodeName {
			node = topology.NodeFromObject(n)
		}
	}

	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for _, svc := range objs.Services {
		_, w := services.Update(svc)
		warnings = append(warnings, w...)
	}
	slices := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for _, es := range objs.EndpointSlices {
		_, w := slices.Update(es)
		warnings = append(warnings, w...)
	}
	builder, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: node})
	if err != nil {
		return err
	}
	svcSnap, _ := services.Snapshot()
	epSnap, _ := slices.Snapshot()
	rs, w := builder.Build(svcSnap, epSnap)
	warnings = append(warnings, w...)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	printRuleset(stdout, rs, node)
	return nil
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
