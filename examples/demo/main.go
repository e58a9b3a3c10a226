// Command demo shows how svcproxy decides which pod serves which traffic. It
// reads Services, EndpointSlices and Nodes from manifests, runs them through
// the decision core (servicemap, endpoints, topology, ruleset) for one node,
// and prints, for each Service port, where each kind of traffic goes. With
// --explain it answers for one packet instead: which Service takes it, what
// happens to it, and the chains of either backend that decide it.
//
//	go run ./examples/demo
//	go run ./examples/demo --manifests DIR --node-name NAME
//	go run ./examples/demo --cluster-cidr 198.18.0.0/16 --explain 'tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod'
package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
	"github.com/svcproxy/svcproxy/trace"
)

func main() {
	path := flag.String("manifests", "examples/demo/manifests", "file or directory of Services, EndpointSlices and Nodes")
	nodeName := flag.String("node-name", "node-a", "the node to decide for")
	clusterCIDR := flag.String("cluster-cidr", "", "the pod CIDR: traffic from outside it to cluster IPs is masqueraded")
	explain := flag.String("explain", "", `a packet to trace instead, "PROTO SRC -> DST [from pod|node|outside]"`)
	flag.Parse()
	if err := run(os.Stdout, os.Stderr, options{*path, *nodeName, *clusterCIDR, *explain}); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
}

type options struct {
	path, nodeName, clusterCIDR, explain string
}

func run(stdout, stderr io.Writer, opts options) error {
	cfg := ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: opts.nodeName}}
	if opts.clusterCIDR != "" {
		cidr, err := netip.ParsePrefix(opts.clusterCIDR)
		if err != nil {
			return fmt.Errorf("--cluster-cidr: %w", err)
		}
		cfg.ClusterCIDRs = []netip.Prefix{cidr}
	}
	var packet trace.Packet
	if opts.explain != "" {
		var err error
		if packet, err = trace.ParsePacket(opts.explain); err != nil {
			return fmt.Errorf("--explain: %w", err)
		}
	}
	objs, warnings, err := manifests.Load(opts.path)
	if err != nil {
		return fmt.Errorf("bad manifests: %w", err)
	}
	var nodeAddrs []netip.Addr
	for _, n := range objs.Nodes {
		if n.Name == opts.nodeName {
			cfg.Node = topology.NodeFromObject(n)
			var w []svcproxy.Warning
			nodeAddrs, w = ruleset.NodeAddresses(n, v1.IPv4Protocol)
			warnings = append(warnings, w...)
		}
	}

	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for _, svc := range objs.Services {
		_, w := services.Update(svc)
		warnings = append(warnings, w...)
	}
	epTracker := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	for _, es := range objs.EndpointSlices {
		_, w := epTracker.Update(es)
		warnings = append(warnings, w...)
	}
	builder, err := ruleset.NewBuilder(cfg)
	if err != nil {
		return err
	}
	svcSnap, _ := services.Snapshot()
	epSnap, _ := epTracker.Snapshot()
	rs, w := builder.Build(svcSnap, epSnap)
	warnings = append(warnings, w...)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if opts.explain != "" {
		packet.ToNode = slices.Contains(nodeAddrs, packet.Dst.Addr())
		printTrace(stdout, rs, packet)
		return nil
	}
	printRuleset(stdout, rs, cfg.Node)
	return nil
}

// printTrace writes where packet goes, with the chains that decide it in
// each backend's default names.
func printTrace(w io.Writer, rs *ruleset.Ruleset, packet trace.Packet) {
	o := trace.Trace(rs, packet, trace.Options{})
	fmt.Fprintln(w, packet)
	if o.Service.Name == "" {
		fmt.Fprintf(w, "  %s\n", o.Result)
		return
	}
	fmt.Fprintf(w, "  %s through the %s of %s\n", o.Result, o.Kind, o.Service)
	ipt := iptables.Names{}
	s, _ := rs.Service(o.Service)
	chain, nftChain := ipt.ServiceChain(o.Service), "service-"+nftables.ServiceChainBase(o.Service)
	switch {
	case o.Kind == ruleset.KindLoadBalancerIP && s.UsesFirewall():
		chain, nftChain = ipt.FirewallChain(o.Service), "firewall-check (map firewall-ips)"
	case o.Kind != ruleset.KindClusterIP:
		chain, nftChain = ipt.ExternalChain(o.Service), "external-"+nftables.ServiceChainBase(o.Service)
	}
	path := ipt.Services()
	if o.Kind == ruleset.KindNodePort {
		path += " -> " + ipt.NodePorts()
	}
	fmt.Fprintf(w, "  iptables: %s -> %s; nftables: %s\n", path, chain, nftChain)
	for _, c := range o.Targets {
		masq := ""
		if c.Masquerade {
			masq = ", masqueraded"
		}
		fmt.Fprintf(w, "  -> %v, share %s%s (iptables %s, nftables endpoint-%s)\n", c.Endpoint, c.Share.RatString(), masq,
			ipt.EndpointChain(o.Service, c.Endpoint), nftables.EndpointChainBase(o.Service, c.Endpoint))
	}
	if o.ShortCircuit {
		fmt.Fprintln(w, "  (externalTrafficPolicy Local, short-circuited to every endpoint: the packet comes from a pod or the node)")
	}
	if o.Affinity.Enabled() {
		fmt.Fprintf(w, "  a client that used an endpoint in the last %d s gets it again (ClientIP affinity)\n", o.Affinity.Seconds())
	}
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
