//go:build linux

package nftables_test

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/nftables"
)

// kubeProxy137Objects are the Services and slices behind the table that
// kube-proxy v1.37.2 wrote in trace/nfttrace/testdata/kube-proxy-1.37-ip6.nft
// (its node runs 2001:db8:18:49::2; 2001:db8:18:41::2 runs elsewhere).
const kubeProxy137Objects = `
apiVersion: v1
kind: Service
metadata: {namespace: diff, name: d4-s3}
spec:
  clusterIP: 2001:db8:19::baba
  externalIPs: [2001:db8:19:100::2]
  ports:
  - {name: p0, port: 80, protocol: TCP}
  - {name: p1, port: 8080, protocol: TCP}
  - {name: p2, port: 80, protocol: UDP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: diff, name: d4-s3-here, labels: {kubernetes.io/service-name: d4-s3}}
addressType: IPv6
endpoints:
- {addresses: [2001:db8:18:49::2], nodeName: node-a}
ports: [{name: p0, port: 8000, protocol: TCP}, {name: p1, port: 8001, protocol: TCP}, {name: p2, port: 8002, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: diff, name: d4-s3-there, labels: {kubernetes.io/service-name: d4-s3}}
addressType: IPv6
endpoints:
- {addresses: [2001:db8:18:41::2], nodeName: node-b}
ports: [{name: p1, port: 8001, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {namespace: diff, name: d4-s0}
spec:
  clusterIP: 2001:db8:19::fc95
  externalIPs: [2001:db8:19:50::2]
  ports: [{port: 8080, protocol: UDP}]
`

// TestKernelListingMatchesKubeProxy137: for the objects behind a table that
// the real kube-proxy v1.37.2 (nftables mode) wrote, our table, as nft lists
// it from the kernel, has the same base chains (hooks and priorities), fixed
// chains, sets and maps with their elements, and Service chains (DNAT
// through numgen maps, the inline masquerade mark), line for line.
func TestKernelListingMatchesKubeProxy137(t *testing.T) {
	netns.Require(t, "nft")
	want, err := os.ReadFile("../trace/nfttrace/testdata/kube-proxy-1.37-ip6.nft")
	if err != nil {
		t.Fatal(err)
	}
	objs, warnings, err := manifests.Parse([]byte(kubeProxy137Objects))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("objects: %v %v", err, warnings)
	}
	cfg := config6()
	cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("2001:db8:19::/112")}
	cfg.NodePortAddresses = []netip.Addr{netip.MustParseAddr("2001:db8:18::1")}
	w := newWorld(t, cfg)
	for _, s := range objs.Services {
		w.add(s)
	}
	for _, s := range objs.EndpointSlices {
		w.add(s)
	}

	lab := netns.NewLab(t)
	ns := lab.NewNS("kp")
	nft := ns.ToolOnPath(t, "nft")
	ex := executorIn(t, ns, nftables.ExecutorConfig{Family: v1.IPv6Protocol})
	if _, err := ex.Apply(context.Background(), w.build()); err != nil {
		t.Fatal(err)
	}
	got, err := ns.Run(context.Background(), nft, "list", "table", "ip6", nftables.DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range []string{
		"chain filter-prerouting-pre-dnat", "chain filter-output-pre-dnat", "chain filter-input", "chain filter-forward",
		"chain filter-output", "chain nat-prerouting", "chain nat-output", "chain nat-postrouting",
		"chain nodeport-endpoints-check", "chain service-endpoints-check", "chain firewall-check",
		"chain services", "chain masquerading", "chain cluster-ips-check", "chain reject-chain",
		"set hairpin-connections", "set cluster-ips", "set nodeport-ips",
		"map no-endpoint-services", "map no-endpoint-nodeports", "map firewall-ips", "map service-ips", "map service-nodeports",
		"chain service-5MHDGF3S-diff/d4-s3/tcp/p0", "chain external-5MHDGF3S-diff/d4-s3/tcp/p0",
		"chain service-FESJQJXC-diff/d4-s3/tcp/p1", "chain external-FESJQJXC-diff/d4-s3/tcp/p1",
		"chain service-BGMPTUHW-diff/d4-s3/udp/p2", "chain external-BGMPTUHW-diff/d4-s3/udp/p2",
	} {
		w, g := listedBlock(string(want), block), listedBlock(got, block)
		if w == "" {
			t.Fatalf("kube-proxy's table has no %s", block)
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s (-kube-proxy +ours):\n%s", block, diff)
		}
	}
}

// listedBlock is the block of `nft list table` that starts with "\tWHAT {"
// and ends with "\t}", or "".
func listedBlock(listing, what string) string {
	_, rest, ok := strings.Cut(listing, "\t"+what+" {\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, "\n\t}\n")
	return body
}

// TestKernelHairpin: with real packets, as kube-proxy 1.37's nftables mode
// does it, a pod that reaches itself through a Service is masqueraded when
// it runs on this node (the echo sees another source; unmasqueraded, the
// pod would drop its own address as a martian source), and a pod elsewhere
// that this node DNATs back to itself is not: its connection fails, while
// the same pod reaches a Service of this node's pod.
func TestKernelHairpin(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, RemotePods: 1, Clients: 1})
	c.StartEcho(8080)
	here, there := c.Pods[0], c.Pods[1]
	// The executor runs the nft that is first on PATH: the node's.
	c.Node.ToolOnPath(t, "nft")
	cfg := config4()
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
	ex := executorIn(t, c.Node.NS, nftables.ExecutorConfig{Family: v1.IPv4Protocol})
	w := newWorld(t, cfg)
	w.add(
		svc("ns1", "here", "198.19.0.20"),
		slice("ns1", "here", 8080, ep{ip: here.IPv4.String(), node: node}),
		svc("ns1", "there", "198.19.0.21"),
		slice("ns1", "there", 8080, ep{ip: there.IPv4.String(), node: "node-b"}),
	)
	if _, err := ex.Apply(context.Background(), w.build()); err != nil {
		t.Fatal(err)
	}
	toHere, toThere := netip.MustParseAddrPort("198.19.0.20:80"), netip.MustParseAddrPort("198.19.0.21:80")
	r, err := here.TCP(toHere, 2*time.Second)
	if err != nil || r.Identity != here.Label || r.Source.Addr() == here.IPv4 {
		t.Errorf("%s → %s (itself, on this node): %+v, %v; want its own echo, masqueraded", here.Label, toHere, r, err)
	}
	if r, err := there.TCP(toHere, 2*time.Second); err != nil || r.Identity != here.Label || r.Source.Addr() != there.IPv4 {
		t.Errorf("%s → %s: %+v, %v; want %s's echo, not masqueraded", there.Label, toHere, r, err, here.Label)
	}
	if r, err := there.TCP(toThere, time.Second); err == nil {
		t.Errorf("%s → %s (itself, elsewhere): %+v; want no connection (not masqueraded, its own address comes back)", there.Label, toThere, r)
	}
}
