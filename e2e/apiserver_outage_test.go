//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// outage is how long the API server stays away while the proxy runs in
// TestAPIServerComesLater: $SVCPROXY_API_OUTAGE (a duration, for a
// measurement), else 2 s.
func outage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SVCPROXY_API_OUTAGE")); err == nil {
		return d
	}
	return 2 * time.Second
}

// TestAPIServerComesLater: a proxy started while its API server is down
// does not exit: it serves /healthz (503, nothing synced), logs once that
// the server is unreachable, leaves the kernel alone, and once the server
// is up syncs what it holds, logs that it is reachable again and is
// healthy. Then an outage while it runs: it logs it once, stays healthy
// (its rules are still checked, as kube-proxy's), and follows a change
// made once the server is back; the time that takes is logged.
func TestAPIServerComesLater(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ac := newAPICluster(t, netns.ClusterSpec{Pods: 2}, apiserver.Options{})
		ac.StartEcho(echoPort)
		p0, p1 := ac.Pods[0], ac.Pods[1]
		web := at(serviceIP(false, 60), 80)
		ac.put(apiService("web", 60))
		ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p0)))
		ac.api.StopAPIServer()

		p := startProxyWith(t, ac.Cluster, backend, proxySetup{kubeconfig: ac.api.Kubeconfig(ac.api.Token(proxyUser)), noWait: true, args: []string{"--sync-period", "2s"}})
		waitFor(t, "the proxy logs the API server unreachable", func() (bool, string) {
			return strings.Contains(p.log.String(), "API server unreachable"), p.log.String()
		})
		waitFor(t, "/healthz answers 503 before the first sync", func() (bool, string) {
			code := p.healthzOrZero()
			return code == 503, fmt.Sprint("last answer ", code)
		})
		time.Sleep(3 * time.Second) // a few discovery retries
		if n := strings.Count(p.log.String(), "API server unreachable"); n != 1 || p.syncs() != 0 {
			t.Errorf("before the API server: %d unreachable lines, %d syncs; want 1, 0", n, p.syncs())
		}

		up := time.Now()
		ac.api.StartAPIServer()
		isReady := time.Now()
		waitForWithin(t, 60*time.Second, "the first sync once the API server is up", func() (bool, string) { return p.syncs() > 0, p.log.String() })
		t.Logf("start during an outage: first sync %v after the API server was started, %v after it was ready",
			time.Since(up).Round(time.Millisecond), time.Since(isReady).Round(time.Millisecond))
		eventuallyReaches(t, p.inside(ac.Clients[0]), web, p0)
		if code := p.healthz(); code != 200 {
			t.Errorf("/healthz after the first sync: %d, want 200", code)
		}
		if n := strings.Count(p.log.String(), "API server reachable again"); n != 1 {
			t.Errorf("%d \"reachable again\" lines, want 1", n)
		}

		ac.api.StopAPIServer()
		before := p.syncs()
		p.waitSyncs(before + 1)
		time.Sleep(outage())
		if code := p.healthz(); code != 200 {
			t.Errorf("/healthz during an outage: %d, want 200 (the rules are still checked)", code)
		}
		expectOnly(t, spread(t, p.inside(ac.Clients[0]), web, 5), p0)
		if n := strings.Count(p.log.String(), "API server unreachable"); n != 2 {
			t.Errorf("%d unreachable lines after the second outage, want 2", n)
		}
		ac.api.StartAPIServer()
		back := time.Now()
		ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p1)))
		eventuallyReachesWithin(t, p.inside(ac.Clients[0]), web, 120*time.Second, p1)
		t.Logf("outage of %v while running: a change made once the API server was ready was applied %v later", outage(), time.Since(back).Round(time.Millisecond))
		if n := strings.Count(p.log.String(), "API server reachable again"); n != 2 {
			t.Errorf("%d \"reachable again\" lines after the second outage, want 2", n)
		}
	})
}

// TestKubeProxyOutageRecovery measures what TestAPIServerComesLater
// measures of our proxies, for kube-proxy v1.37.2 itself (nftables mode):
// how long after an outage of outage() a change made once the API server
// is back takes to apply. It runs only with SVCPROXY_COMPARE_KUBE_PROXY=1.
func TestKubeProxyOutageRecovery(t *testing.T) {
	if os.Getenv("SVCPROXY_COMPARE_KUBE_PROXY") != "1" {
		t.Skip("set SVCPROXY_COMPARE_KUBE_PROXY=1 to measure kube-proxy's recovery after an API outage")
	}
	bin := filepath.Join(os.Getenv(apiserver.EnvBinDir), "kube-proxy")
	ac := newAPICluster(t, netns.ClusterSpec{Pods: 2}, apiserver.Options{})
	ac.StartEcho(echoPort)
	p0, p1 := ac.Pods[0], ac.Pods[1]
	web := at(serviceIP(false, 61), 80)
	ac.put(apiService("web", 61))
	ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p0)))
	ac.startKubeProxyNFTables(t, bin, netip.AddrPortFrom(ac.Node.IPv4, 10249), netip.AddrPortFrom(ac.Node.IPv4, 10256))
	eventuallyReachesWithin(t, ac.Clients[0], web, 60*time.Second, p0)
	ac.api.StopAPIServer()
	time.Sleep(outage())
	ac.api.StartAPIServer()
	back := time.Now()
	ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p1)))
	eventuallyReachesWithin(t, ac.Clients[0], web, 180*time.Second, p1)
	t.Logf("kube-proxy: outage of %v: a change made once the API server was ready was applied %v later", outage(), time.Since(back).Round(time.Millisecond))
}

// startKubeProxyNFTables runs the real kube-proxy (bin) in nftables mode on
// the cluster's node, its metrics and healthz servers on the addresses
// given, the conntrack sysctls left alone; it is stopped, and its output
// logged if t failed, when t ends.
func (ac *apiCluster) startKubeProxyNFTables(t *testing.T, bin string, metrics, healthz netip.AddrPort) {
	t.Helper()
	log := &logBuffer{}
	cmd := ac.Node.Command(context.Background(), bin,
		"--kubeconfig", ac.api.Kubeconfig(ac.api.Token(apiserver.AdminUser)),
		"--hostname-override", nodeName, "--proxy-mode", "nftables",
		"--cluster-cidr", netns.PodCIDR4.String()+","+netns.PodCIDR6.String(),
		"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0", "--conntrack-tcp-timeout-close-wait", "0",
		"--metrics-bind-address", metrics.String(),
		"--healthz-bind-address", healthz.String())
	cmd.Stdout, cmd.Stderr = log, log
	proc, err := ac.Node.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			t.Logf("kube-proxy output:\n%s", log.String())
		}
	})
}
