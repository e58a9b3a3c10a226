//go:build scale && linux

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
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
//   - after one warm-up change has been observed, two windows of
//     changesPerSecond EndpointSlice changes a second for
//     SVCPROXY_SCALE_WINDOW (default 60s) each, with --min-sync-period 1s,
//     and for each the p50 and p99 of
//     kubeproxy_network_programming_duration_seconds over its changes.
//
// The two windows differ in the trigger times written (see
// triggerResolutions): in whole seconds, as Kubernetes writes them, which
// overstates every latency by [0, 1) s; and with nanoseconds, which gives
// the proxy's own latency. Each window also reports where the time went,
// per change, from the test's own watch of the EndpointSlices and the
// proxy's synced log lines (see breakdown).
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
		t.Fatalf("SVCPROXY_SCALE_N=%d: want %d to %d (each change of a window, and the warm-up, on its own Service)", n, changesPerSecond*int(window.Seconds())+1, scalegen.MaxServices-1)
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
	version := 0
	for i, backend := range latencyBackends {
		t.Run(backend, func(t *testing.T) {
			measureBackend(t, c, api, spec, window, backend, &version)
			if i < len(latencyBackends)-1 {
				cleanupWithin(t, c, backend, 5*time.Minute)
			}
		})
	}
}

// latencyBackends are the backends measured, in order: iptables last, as
// its --cleanup at 10,000 Services takes longer than the test allows (the
// namespace goes at the end with everything in it).
var latencyBackends = []string{"nftables", "nftables-flat", "iptables"}

// measureBackend starts the backend's proxy against the API server, reports
// its start, warms it up, measures each window of triggerResolutions (the
// revisions of the slices from *version + 1) and stops it.
func measureBackend(t *testing.T, c *netns.Cluster, api *apiserver.Server, spec scalegen.Spec, window time.Duration, backend string, version *int) {
	n := spec.Services - 1
	kubeconfig := api.Kubeconfig(api.Token(proxyUser))
	client := api.Client()
	p, sinceStart, firstSync := startLatencyProxy(t, c, backend, kubeconfig)
	t.Logf("%s-proxy, %d Services: first synced line %v after start; that first full sync took %s (informers' initial sync and first build: %v)",
		backend, n, sinceStart.Round(time.Millisecond), firstSync, informerSync(sinceStart, firstSync))
	run := &latencyRun{t: t, backend: backend, client: client, spec: spec, window: window, proxy: p,
		metrics: metricsClient(c.Node.NS), metricsURL: fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(c.Node.IPv4, metricsPort))}
	*version++
	before := run.warmUp(*version)
	for _, res := range triggerResolutions {
		*version++
		before = run.measureWindow(res, *version, before)
	}
	if err := p.proc.Stop(); err != nil {
		t.Fatal(err)
	}
}

// triggerResolution is how a window writes the trigger times.
type triggerResolution struct {
	name   string
	layout string
}

// triggerResolutions are the two windows' trigger times: in whole seconds,
// as the EndpointSlice controller writes the pod times it takes them from
// (each latency then counts from up to 1 s before the change), and with
// nanoseconds (the proxy's own latency: from the change to the end of the
// sync that programmed it).
var triggerResolutions = []triggerResolution{
	{"whole seconds (as Kubernetes writes them)", time.RFC3339},
	{"nanoseconds (the proxy's own latency)", time.RFC3339Nano},
}

// latencyRun is one backend's proxy under measurement.
type latencyRun struct {
	t          *testing.T
	backend    string
	client     kubernetes.Interface
	spec       scalegen.Spec
	window     time.Duration
	proxy      *proxy
	metrics    *http.Client
	metricsURL string
}

// warmUp changes the EndpointSlice of the last Service (which the windows
// do not change) to its revision version and waits, at most 5 minutes, until
// that change is the one observation: the created slices' trigger times
// predate the proxy and are not observed, so the first sync's work is over
// once a later change has been programmed. It returns the settled scrape.
func (r *latencyRun) warmUp(version int) histogram {
	t := r.t
	t.Helper()
	es := withTriggerTime(r.spec.ChangedSlice(r.spec.Services-1, version), time.Now(), time.RFC3339Nano)
	es.APIVersion, es.Kind = "discovery.k8s.io/v1", "EndpointSlice"
	if err := apply(r.client, es); err != nil {
		t.Fatalf("warm-up change: %v", err)
	}
	const timeout = 5 * time.Minute
	if h := waitObservations(t, r.metrics, r.metricsURL, 1, timeout); h.count < 1 {
		t.Fatalf("%s-proxy: the warm-up change was not observed within %v", r.backend, timeout)
	}
	before := waitSettled(t, r.metrics, r.metricsURL, 30*time.Second)
	if before.count != 1 {
		t.Errorf("%s-proxy: %d observations before the windows, want 1 (the warm-up change): changes made before the proxy started are not observed", r.backend, before.count)
	}
	return before
}

// measureWindow makes one window's changes with trigger times of res and
// reports the latencies observed since before, and where the time went; it
// returns the settled scrape after the window.
func (r *latencyRun) measureWindow(res triggerResolution, version int, before histogram) histogram {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	deliveries := watchSlices(ctx, t, r.client)
	start := time.Now()
	changes := changeEndpoints(t, r.client, r.spec, version, r.window, res.layout)
	want := before.count + uint64(len(changes))
	waitObservations(t, r.metrics, r.metricsURL, want, 60*time.Second)
	after := waitSettled(t, r.metrics, r.metricsURL, 30*time.Second)
	cancel()
	delivered := deliveries.wait()
	log := r.proxy.log.String()
	syncs := syncsIn(parseSyncs(log), start, time.Now())
	delta := after.minus(before)
	t.Logf("%s-proxy, %d Services, trigger times in %s: %d changes at %d/s over %v: %d observations, network-programming latency p50 %.3fs, p99 %.3fs (kube-proxy's buckets; within 1 s: %s, within 2 s: %s)",
		r.backend, r.spec.Services-1, res.name, len(changes), changesPerSecond, r.window, delta.count,
		delta.quantile(0.5), delta.quantile(0.99), delta.fractionWithin(1), delta.fractionWithin(2))
	t.Logf("%s-proxy, trigger times in %s: %s", r.backend, res.name, summarizeSyncs(syncs))
	t.Logf("%s-proxy, trigger times in %s, per change (the test's watch, the proxy's synced lines): %s",
		r.backend, res.name, breakdown(changes, delivered, syncs))
	if delta.count != uint64(len(changes)) {
		t.Errorf("%s-proxy: %d observations for %d changes; %s", r.backend, delta.count, len(changes), missingReport(changes, delivered, syncs, log))
	}
	return after
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
	es := withTriggerTime(spec.Slice(i), time.Now(), time.RFC3339)
	if _, err := client.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating EndpointSlice %s/%s: %w", es.Namespace, es.Name, err)
	}
	return nil
}

// withTriggerTime sets es's last-change-trigger-time annotation to at,
// formatted with layout (time.RFC3339 truncates to whole seconds).
func withTriggerTime(es *discovery.EndpointSlice, at time.Time, layout string) *discovery.EndpointSlice {
	if es.Annotations == nil {
		es.Annotations = map[string]string{}
	}
	es.Annotations[v1.EndpointsLastChangeTriggerTime] = at.UTC().Format(layout)
	return es
}

// changeEndpoints changes the EndpointSlices of Services 1, 2, … to their
// revision version (1 or more: each call gives a new one, which changes
// their endpoints), changesPerSecond a second for window, with trigger
// times formatted with layout, and returns the changes made.
func changeEndpoints(t *testing.T, client kubernetes.Interface, spec scalegen.Spec, version int, window time.Duration, layout string) []change {
	t.Helper()
	total := changesPerSecond * int(window.Seconds())
	tick := time.NewTicker(time.Second / changesPerSecond)
	defer tick.Stop()
	start := time.Now()
	changes := make([]change, 0, total)
	for i := 1; i <= total; i++ {
		<-tick.C
		made := time.Now()
		es := withTriggerTime(spec.ChangedSlice(i, version), made, layout)
		es.APIVersion, es.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		trigger, err := time.Parse(time.RFC3339Nano, es.Annotations[v1.EndpointsLastChangeTriggerTime])
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if err := apply(client, es); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		changes = append(changes, change{slice: es.Namespace + "/" + es.Name, made: made, trigger: trigger, applied: time.Now()})
	}
	if late := time.Since(start) - window; late > window/10 {
		t.Logf("the changes took %v longer than %v: the rate was below %d/s", late.Round(time.Millisecond), window, changesPerSecond)
	}
	return changes
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
