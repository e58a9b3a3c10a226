//go:build scale && linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

const (
	// latencyServiceCIDR holds the generated cluster IPs (below
	// 198.19.128.0) and none of their external IPs. Its first address goes
	// to default/kubernetes, so generated Service 0, whose cluster IP that
	// is, is not created.
	latencyServiceCIDR = "198.19.0.0/17"
	// changesPerSecond is the steady rate of endpoint changes.
	changesPerSecond = 5
	// creationWriters is the number of concurrent client-go writers that
	// create the generated objects.
	creationWriters = 4
	// metricsPort is where the proxy under test serves /metrics, on the
	// node's IPv4 address.
	metricsPort = 10249
	// programmingMetric is the histogram of the network-programming
	// latency, the Kubernetes SLI.
	programmingMetric = "kubeproxy_network_programming_duration_seconds"
)

// TestNetworkProgrammingLatency measures the network-programming latency
// (the Kubernetes SLI) of each reference proxy against kube-apiserver, at
// SVCPROXY_SCALE_N Services (default 10,000) × 10 endpoints created through
// the API server:
//
//   - the time from the proxy's start to its first synced log line, and that
//     first full sync's duration (the difference is the informers' initial
//     list and sync, and the build of the first snapshot);
//   - the p50 and p99 of kubeproxy_network_programming_duration_seconds over
//     changesPerSecond EndpointSlice changes a second for
//     SVCPROXY_SCALE_WINDOW (default 60s), with --min-sync-period 1s.
//
// Each change sets the EndpointSlice's last-change-trigger-time annotation to
// the time of the change in RFC 3339, whole seconds, as the EndpointSlice
// controller writes the pod times it takes it from: a latency is measured
// from up to 1 s before the change, so it is overstated by [0, 1) s.
//
// It is not part of the default run (build tag "scale", root, the API-server
// binaries):
//
//	export SVCPROXY_APISERVER_BIN_DIR=$(e2e/apiserver/build.sh)
//	SVCPROXY_E2E=required go test -tags scale ./e2e/ -run NetworkProgrammingLatency -v -timeout 90m
func TestNetworkProgrammingLatency(t *testing.T) {
	n := envInt(t, "SVCPROXY_SCALE_N", 10000)
	window := envDuration(t, "SVCPROXY_SCALE_WINDOW", time.Minute)
	if n+1 > scalegen.MaxServices || n <= changesPerSecond*int(window.Seconds()) {
		t.Fatalf("SVCPROXY_SCALE_N=%d: want %d to %d (each change, and the warm-up, on its own Service)", n, changesPerSecond*int(window.Seconds())+1, scalegen.MaxServices-1)
	}
	apiserver.Require(t)
	c := netns.NewCluster(t, netns.ClusterSpec{})
	api := apiserver.Start(t, c.Node.NS, c.Node.IPv4, apiserver.Options{ServiceCIDRs: latencyServiceCIDR, Users: []string{proxyUser}})
	client := api.Client()
	spec := scalegen.Spec{Services: n + 1}
	start := time.Now()
	createScaleObjects(t, client, spec)
	t.Logf("created %d Services and %d EndpointSlices (%d endpoints) with %d writers in %v",
		n, n, n*scalegen.DefaultEndpoints, creationWriters, time.Since(start).Round(time.Millisecond))
	kubeconfig := api.Kubeconfig(api.Token(proxyUser))
	version := 0
	forEachBackend(t, func(t *testing.T, backend string) {
		p, sinceStart, firstSync := startLatencyProxy(t, c, backend, kubeconfig)
		t.Logf("%s-proxy, %d Services: first synced line %v after start; that first full sync took %s (informers' initial sync and first build: %v)",
			backend, n, sinceStart.Round(time.Millisecond), firstSync, informerSync(sinceStart, firstSync))
		metrics := metricsClient(c.Node.NS)
		metricsURL := fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(c.Node.IPv4, metricsPort))
		version++
		first := scrapeHistogram(t, metrics, metricsURL)
		warmUp(t, client, spec, version)
		waitObservations(t, metrics, metricsURL, first.count+1, 30*time.Second)
		before := waitSettled(t, metrics, metricsURL, 30*time.Second)
		t.Logf("%s-proxy: %d observations before the changes (the created slices' trigger times and the warm-up change)", backend, before.count)
		changes := changeEndpoints(t, client, spec, version, window)
		after := waitObservations(t, metrics, metricsURL, before.count+uint64(changes), 60*time.Second)
		delta := after.minus(before)
		t.Logf("%s-proxy, %d Services, %d changes at %d/s over %v: %d observations, network-programming latency p50 %.3fs, p99 %.3fs (buckets ×2 from 1 ms); syncs during the changes %v",
			backend, n, changes, changesPerSecond, window, delta.count, delta.quantile(0.5), delta.quantile(0.99), syncDurations(p.log.String()))
		if delta.count < uint64(changes) {
			t.Errorf("%d observations for %d changes", delta.count, changes)
		}
		if err := p.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		cleanupWithin(t, c, backend, 5*time.Minute)
	})
}

// cleanupWithin runs the backend's proxy with --cleanup in the node
// namespace, for at most timeout: at 10,000 Services iptables' takes longer
// than the 30 s that cleanup allows.
func cleanupWithin(t *testing.T, c *netns.Cluster, backend string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if out, err := c.Node.Run(ctx, proxyBinary(t, backend), append([]string{"--cleanup"}, layoutArgs(backend)...)...); err != nil {
		t.Fatalf("%s-proxy --cleanup: %v\n%s", backend, err, out)
	}
	t.Logf("%s-proxy --cleanup took %v", backend, time.Since(start).Round(time.Millisecond))
}

// envInt is the integer in the environment variable name, or def when it
// is not set.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// envDuration is the duration in the environment variable name, or def
// when it is not set.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// informerSync is the time from start to the first synced line less the
// first sync's logged duration, or 0 when that duration does not parse.
func informerSync(sinceStart time.Duration, firstSync string) time.Duration {
	d, err := time.ParseDuration(firstSync)
	if err != nil {
		return 0
	}
	return (sinceStart - d).Round(time.Millisecond)
}

// forAPI makes generated Service i valid for the API server: node ports are
// left to it to allocate, as explicit health-check node ports from
// scalegen lie outside its default range, and it ignores a status on
// create (load balancers have no ingress IP).
func forAPI(svc *v1.Service) *v1.Service {
	svc.Status = v1.ServiceStatus{}
	svc.Spec.HealthCheckNodePort = 0
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	return svc
}

// createScaleObjects creates the Namespaces, the proxy's Node
// (scalegen.NodeName), and Services 1 to spec.Services−1 with their
// EndpointSlices, each slice with a last-change-trigger-time of its
// creation, through creationWriters concurrent clients.
func createScaleObjects(t *testing.T, client kubernetes.Interface, spec scalegen.Spec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: scalegen.NodeName, Labels: map[string]string{v1.LabelTopologyZone: scalegen.NodeZone}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Node: %v", err)
	}
	for ns := range (spec.Services + 99) / 100 {
		obj := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scalegen.Namespace(ns * 100)}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Namespace %s: %v", obj.Name, err)
		}
	}
	errs := make(chan error, creationWriters)
	var wg sync.WaitGroup
	for w := range creationWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1 + w; i < spec.Services; i += creationWriters {
				if err := createService(ctx, client, spec, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// createService creates generated Service i and its EndpointSlice.
func createService(ctx context.Context, client kubernetes.Interface, spec scalegen.Spec, i int) error {
	svc := forAPI(spec.Service(i))
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	es := withTriggerTime(spec.Slice(i), time.Now())
	if _, err := client.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating EndpointSlice %s/%s: %w", es.Namespace, es.Name, err)
	}
	return nil
}

// withTriggerTime sets es's last-change-trigger-time annotation to at, in
// RFC 3339 with whole seconds.
func withTriggerTime(es *discovery.EndpointSlice, at time.Time) *discovery.EndpointSlice {
	if es.Annotations == nil {
		es.Annotations = map[string]string{}
	}
	es.Annotations[v1.EndpointsLastChangeTriggerTime] = at.UTC().Format(time.RFC3339)
	return es
}

// changeEndpoints changes the EndpointSlices of Services 1, 2, … to their
// revision version (1 or more: each call gives a new one), changesPerSecond
// a second for window, and returns the number of changes made.
func changeEndpoints(t *testing.T, client kubernetes.Interface, spec scalegen.Spec, version int, window time.Duration) int {
	t.Helper()
	total := changesPerSecond * int(window.Seconds())
	tick := time.NewTicker(time.Second / changesPerSecond)
	defer tick.Stop()
	start := time.Now()
	for i := 1; i <= total; i++ {
		<-tick.C
		es := withTriggerTime(spec.ChangedSlice(i, version), time.Now())
		es.APIVersion, es.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		if err := apply(client, es); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if late := time.Since(start) - window; late > window/10 {
		t.Logf("the changes took %v longer than %v: the rate was below %d/s", late.Round(time.Millisecond), window, changesPerSecond)
	}
	return total
}

// warmUp changes the EndpointSlice of the last Service (which
// changeEndpoints does not change) to its revision version, so that a sync
// follows the first one before the measurement: a created slice that the
// informers delivered after the first sync is then observed before it.
func warmUp(t *testing.T, client kubernetes.Interface, spec scalegen.Spec, version int) {
	t.Helper()
	es := withTriggerTime(spec.ChangedSlice(spec.Services-1, version), time.Now())
	es.APIVersion, es.Kind = "discovery.k8s.io/v1", "EndpointSlice"
	if err := apply(client, es); err != nil {
		t.Fatalf("warm-up change: %v", err)
	}
}

// startLatencyProxy runs the backend's proxy on the node against the API
// server (--kubeconfig, --min-sync-period 1s, /metrics on metricsPort),
// waits, at most 10 minutes, for its first synced line, and returns it with
// the time that took and the first sync's logged duration.
func startLatencyProxy(t *testing.T, c *netns.Cluster, backend, kubeconfig string) (*proxy, time.Duration, string) {
	t.Helper()
	p := &proxy{t: t, backend: backend, node: c.Node, log: &logBuffer{}}
	args := append([]string{
		"--kubeconfig", kubeconfig,
		"--node-name", scalegen.NodeName,
		"--node-ip", c.Node.IPv4.String(),
		"--cluster-cidr", scalegen.ClusterCIDR.String(),
		"--ip-family", "ipv4",
		"--min-sync-period", "1s",
		"--metrics-bind-address", netip.AddrPortFrom(c.Node.IPv4, metricsPort).String(),
		"--healthz-bind-address", "",
	}, layoutArgs(backend)...)
	cmd := c.Node.Command(context.Background(), proxyBinary(t, backend), args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	start := time.Now()
	proc, err := c.Node.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s-proxy output (end):\n%s", backend, lastLines(p.log.String(), 40))
		}
		_ = proc.Stop()
	})
	deadline := start.Add(10 * time.Minute)
	for !strings.Contains(p.log.String(), "msg=synced") {
		select {
		case <-proc.Done():
			t.Fatalf("%s-proxy exited (%v) before its first sync", backend, proc.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s-proxy made no sync within 10 minutes", backend)
		}
	}
	elapsed := time.Since(start)
	first := syncDurations(p.log.String())
	if len(first) == 0 {
		t.Fatalf("%s-proxy's synced line has no duration", backend)
	}
	return p, elapsed, first[0]
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// metricsClient is an HTTP client that dials from inside ns.
func metricsClient(ns *netns.NS) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, address string) (net.Conn, error) {
			remote, err := netip.ParseAddrPort(address)
			if err != nil {
				return nil, fmt.Errorf("dialling %s: %w", address, err)
			}
			return ns.Dial("tcp", netip.AddrPort{}, remote, 5*time.Second)
		},
	}}
}

// histogram is a Prometheus histogram as scraped: cumulative counts by
// upper bound, in increasing order of bound.
type histogram struct {
	bounds []float64
	counts []uint64
	count  uint64
}

var bucketLine = regexp.MustCompile(`^` + programmingMetric + `_bucket\{le="([^"]+)"\} (\d+)$`)

// scrapeHistogram reads programmingMetric from the /metrics at url.
func scrapeHistogram(t *testing.T, client *http.Client, url string) histogram {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	var h histogram
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := bucketLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		bound, err1 := strconv.ParseFloat(m[1], 64)
		count, err2 := strconv.ParseUint(m[2], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("scraping %s: bad bucket line %q", url, sc.Text())
		}
		h.bounds, h.counts = append(h.bounds, bound), append(h.counts, count)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	if len(h.counts) == 0 || !slices.IsSorted(h.bounds) || !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
		t.Fatalf("scraping %s: no well-formed %s histogram (bounds %v)", url, programmingMetric, h.bounds)
	}
	h.count = h.counts[len(h.counts)-1]
	return h
}

// waitObservations scrapes every 500 ms, for at most timeout, until the
// histogram holds at least want observations, and returns the last scrape.
func waitObservations(t *testing.T, client *http.Client, url string, want uint64, timeout time.Duration) histogram {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		h := scrapeHistogram(t, client, url)
		if h.count >= want || time.Now().After(deadline) {
			return h
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitSettled scrapes every second, for at most timeout, until two scrapes
// in a row hold the same number of observations (those of the first sync
// may be made after its synced line), and returns the last scrape.
func waitSettled(t *testing.T, client *http.Client, url string, timeout time.Duration) histogram {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := scrapeHistogram(t, client, url)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		h := scrapeHistogram(t, client, url)
		if h.count == last.count {
			return h
		}
		last = h
	}
	t.Fatalf("%s did not settle within %v", programmingMetric, timeout)
	return last
}

// minus is the histogram of the observations made between before and h.
func (h histogram) minus(before histogram) histogram {
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), count: h.count - before.count}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - before.counts[i]
	}
	return d
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linearly inside the bucket that holds it (from 0 for the first bucket);
// the largest finite bound when it falls in the +Inf bucket; NaN with no
// observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	for i, c := range h.counts {
		if float64(c) < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			return h.bounds[i-1]
		}
		lower, below := 0.0, uint64(0)
		if i > 0 {
			lower, below = h.bounds[i-1], h.counts[i-1]
		}
		inBucket := c - below
		if inBucket == 0 {
			return lower
		}
		return lower + (h.bounds[i]-lower)*(rank-float64(below))/float64(inBucket)
	}
	return h.bounds[len(h.bounds)-2]
}
