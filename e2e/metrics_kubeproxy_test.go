//go:build linux

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestChangesMetricsAsKubeProxy runs kube-proxy v1.37.2 (nftables mode,
// dual-stack as on any node whose kernel has IPv6) beside the nftables
// reference proxy (flat layout, so that the two keep to their own tables,
// --ip-family dual) against one API server, makes the same Service and
// EndpointSlice events reach both, and compares kube-proxy's counters of
// them and of the /healthz and /livez answers: a dual-stack and an IPv4
// Service, an update that changes nothing the proxies use, a delete; an
// IPv4, an IPv6 and an FQDN slice, one that names no Service, an update, a
// delete.
func TestChangesMetricsAsKubeProxy(t *testing.T) {
	kubeProxy := apiserver.KubeProxy(t)
	ac := newAPICluster(t, netns.ClusterSpec{Pods: 1}, apiserver.Options{})
	p0 := ac.Pods[0]
	web, v4 := apiService("web", 71), service("v4", []netip.Addr{serviceIP(false, 72)})
	webV4, webV6 := slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p0)), slice("web", true, v1.ProtocolTCP, ready(ac.Cluster, p0))
	ac.put(web)
	ac.put(webV4)
	// kube-proxy waits for its Node to have addresses.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := ac.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ac.Node.IPv4.String()}, {Type: v1.NodeInternalIP, Address: ac.Node.IPv6.String()}}
	if _, err := ac.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	theirs := netip.AddrPortFrom(ac.Node.IPv4, 10249)
	ac.startKubeProxyNFTables(t, kubeProxy, theirs, netip.AddrPortFrom(ac.Node.IPv4, 10266))
	ours := netip.AddrPortFrom(ac.Node.IPv4, 10259)
	ac.startProxy("nftables-flat", "", "--metrics-bind-address", ours.String())
	for _, addr := range []netip.AddrPort{theirs, ours} {
		waitForWithin(t, 60*time.Second, "a first sync at "+addr.String(), func() (bool, string) {
			m, err := scrapeCounters(ac.Node.NS, addr)
			return err == nil && m[`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}`] > 0, fmt.Sprint(err)
		})
	}

	fqdn := slice("web", false, v1.ProtocolTCP)
	fqdn.Name, fqdn.AddressType = "web-fqdn", discovery.AddressTypeFQDN
	fqdn.Endpoints = []discovery.Endpoint{{Addresses: []string{"web.example.com"}}}
	unnamed := slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p0))
	unnamed.Name, unnamed.Labels = "unnamed", map[string]string{"app": "web"}
	for _, obj := range []any{v4, webV6, fqdn, unnamed} {
		ac.put(obj)
	}
	web.Annotations = map[string]string{"e2e": "changed"}
	webV4.Annotations = map[string]string{"e2e": "changed"}
	ac.put(web)
	ac.put(webV4)
	ac.remove(v4)
	ac.remove(webV6)
	for _, addr := range []netip.AddrPort{theirs, ours, theirs, ours} {
		for _, path := range []string{"/healthz", "/livez"} {
			healthzAddr := netip.AddrPortFrom(addr.Addr(), 10266)
			if addr == ours {
				healthzAddr = netip.AddrPortFrom(addr.Addr(), 10256)
			}
			scrape(t, ac.Node.NS, "http://"+healthzAddr.String()+path)
		}
	}

	// Services: kubernetes and web listed, v4 added, web updated, v4
	// deleted, each counted by the proxier of each family. Slices: web-v4
	// listed (kubernetes has none here), web-v6 added, web-v4 updated,
	// web-v6 deleted; web-fqdn and unnamed are not counted.
	want := map[string]float64{
		"kubeproxy_sync_proxy_rules_service_changes_total":  2 * 5,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total": 4,
		`kubeproxy_proxy_healthz_total{code="200"}`:         2,
		`kubeproxy_proxy_livez_total{code="200"}`:           2,
	}
	var report string
	counted := func() (bool, string) {
		k, err1 := scrapeCounters(ac.Node.NS, theirs)
		s, err2 := scrapeCounters(ac.Node.NS, ours)
		if err1 != nil || err2 != nil {
			return false, fmt.Sprint(err1, err2)
		}
		report = ""
		done := true
		for _, name := range slices.Sorted(maps.Keys(want)) {
			report += fmt.Sprintf("%s: kube-proxy %v, ours %v, want %v\n", name, k[name], s[name], want[name])
			done = done && k[name] == want[name] && s[name] == want[name]
		}
		return done, report
	}
	waitForWithin(t, 30*time.Second, "kube-proxy's counts, and the same of ours", counted)
	// A count that went past them would have done so by now.
	time.Sleep(time.Second)
	if done, report := counted(); !done {
		t.Errorf("a second later:\n%s", report)
	}
	t.Logf("counts:\n%s", report)
}

// counterLine is a sample line of Prometheus text: name (with labels) and
// value.
var counterLine = regexp.MustCompile(`^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$`)

// scrapeCounters reads the samples of /metrics at addr, by name with
// labels.
func scrapeCounters(ns *netns.NS, addr netip.AddrPort) (map[string]float64, error) {
	body, err := scrapeErr(ns, "http://"+addr.String()+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if m := counterLine.FindStringSubmatch(line); m != nil {
			var v float64
			if _, err := fmt.Sscan(m[2], &v); err == nil {
				out[m[1]] = v
			}
		}
	}
	return out, nil
}
