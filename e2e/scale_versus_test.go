//go:build scale && linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

// versusMode is one proxy of TestVersusKubeProxyAtScale.
type versusMode struct {
	name string
	// kubeProxy runs the real kube-proxy; else our proxy of backend.
	kubeProxy bool
	backend   string
	// mode is the configuration file's mode.
	mode string
	// args are our proxy's flags besides --config: the settings named in
	// the table.
	args []string
	// setting names what differs from kube-proxy's default configuration
	// for the mode, for the table.
	setting string
	check   func(ns *netns.NS, spec scalegen.Spec, p *proxy) (kernelCheck, error)
}

// versusMinSyncPeriod is the --min-sync-period that the flat layout and
// eBPF run with: below the 200 ms between two changes of the script, so
// that no change waits for an earlier one's sync; a burst still coalesces
// into one sync per period.
const versusMinSyncPeriod = "50ms"

// versusModes are the modes in the order they run: kube-proxy's iptables
// mode last, as its first sync takes many minutes at 10,000 Services.
var versusModes = []versusMode{
	{name: "kube-proxy nftables", kubeProxy: true, mode: "nftables", check: nftablesKernelCheck},
	{name: "svcproxy iptables", backend: "iptables", mode: "iptables", check: iptablesKernelCheck},
	{name: "svcproxy nftables", backend: "nftables", mode: "nftables", check: nftablesKernelCheck},
	{name: "svcproxy nftables flat", backend: "nftables-flat", mode: "nftables",
		args: []string{"--nftables-layout", "flat", "--min-sync-period", versusMinSyncPeriod}, setting: "minSyncPeriod " + versusMinSyncPeriod,
		check: func(ns *netns.NS, spec scalegen.Spec, _ *proxy) (kernelCheck, error) {
			c, err := dialNFT(ns)
			if err != nil {
				return nil, err
			}
			return flatCheck{nftConn: c, spec: spec}, nil
		}},
	{name: "svcproxy ebpf", backend: "ebpf", mode: "ebpf",
		args: []string{"--min-sync-period", versusMinSyncPeriod}, setting: "minSyncPeriod " + versusMinSyncPeriod + "; mode ebpf (cgroup programs)",
		check: func(_ *netns.NS, spec scalegen.Spec, p *proxy) (kernelCheck, error) {
			return &ebpfCheck{pinPath: p.pinPath, spec: spec}, nil
		}},
	{name: "kube-proxy iptables", kubeProxy: true, mode: "iptables", check: iptablesKernelCheck},
}

func iptablesKernelCheck(ns *netns.NS, spec scalegen.Spec, _ *proxy) (kernelCheck, error) {
	c, err := dialNFT(ns)
	if err != nil {
		return nil, err
	}
	return iptablesCheck{nftConn: c, spec: spec}, nil
}

func nftablesKernelCheck(ns *netns.NS, spec scalegen.Spec, _ *proxy) (kernelCheck, error) {
	c, err := dialNFT(ns)
	if err != nil {
		return nil, err
	}
	return nftablesCheck{nftConn: c, spec: spec}, nil
}

// The world of TestVersusKubeProxyAtScale: the API server on apiAddr in a
// namespace of its own; each proxy's node has nodeAddr and reaches the API
// server over a veth of its own, 198.18.(2+k).0/24 (below the changed
// endpoints' 198.18.8.0/21 and the pods' 198.18.16.0 and up).
var (
	versusAPIAddr  = netip.MustParseAddr("198.18.1.1")
	versusNodeAddr = netip.MustParseAddr("198.18.0.1")
)

// versusResult is one mode's figures.
type versusResult struct {
	mode       versusMode
	wholeState time.Duration // proxy start → the sampled Services all in the kernel
	// startTimedOut: the whole state was not there within wholeState;
	// nothing else was measured.
	startTimedOut bool
	// afterLists is the whole state's time after our proxy's first sync
	// started, which is when its informers' initial lists were in.
	afterLists time.Duration
	latencies  []time.Duration // per change: API write → seen in the kernel
	unseen     int
	// periodicRuns are the durations of our proxy's periodic runs (state
	// check, then sync) that ended after the script started;
	// outsidePeriodic the latencies of the changes not written during one.
	periodicRuns    []time.Duration
	outsidePeriodic []time.Duration
	metric          histogram // the changes' observations
	cpuPer1000      float64   // seconds, children included
	peak, rss       int64     // VmHWM and VmRSS at the end, KiB
	pollRounds      int
	pollReads       int
	pollMean        time.Duration
	pollLate        int // changes found on a re-read after a new generation
	windowTaken     time.Duration
}

// TestVersusKubeProxyAtScale runs, one after another against one
// kube-apiserver holding SVCPROXY_SCALE_N Services (default 10,000) × 10
// endpoints, the real kube-proxy (svcproxy.KubeProxyVersion) in iptables
// and nftables mode and our iptables, nftables (kube-proxy's layout),
// nftables flat and eBPF proxies, each in a network namespace of its own
// with kube-proxy's default configuration for its mode (one
// KubeProxyConfiguration file, --config, for kube-proxy and ours; what
// differs is named in the table), and the same change script for each:
// SVCPROXY_SCALE_CHANGES (default 300) EndpointSlice changes at 5 a second,
// each replacing one endpoint of a TCP ClusterIP Service, with nanosecond
// trigger times. For each it reports:
//
//   - the time from the proxy's start to the whole state in the kernel
//     (20 Services sampled over the whole range, none changed, all read
//     back by the kernel poller);
//   - per change, the time from the API write to the new endpoint in the
//     kernel, read by the kernel poller (see pollInterval), p50 and p99;
//     and the p50 and p99 of kubeproxy_network_programming_duration_seconds
//     over the same changes;
//   - the proxy process's CPU time (its children's included: the
//     iptables-restore runs) per 1,000 changes, over the script and until
//     every change is in the kernel;
//   - its peak (VmHWM) and steady (VmRSS after the script) resident memory.
//
// It writes the per-change latencies (versus-kube-proxy.tsv) and their
// distribution as a plot (versus-kube-proxy.svg) to SVCPROXY_SCALE_OUT,
// by default the repository root, beside BENCHMARKS.md.
// SVCPROXY_SCALE_MODES (a regexp) picks modes by name;
// SVCPROXY_SCALE_START_TIMEOUT (default 30m) bounds the wait for a proxy's
// whole state (kube-proxy's iptables mode takes minutes at 10,000).
//
//	export SVCPROXY_APISERVER_BIN_DIR=$(e2e/apiserver/build.sh)
//	SVCPROXY_E2E=required go test -tags scale ./e2e/ -run VersusKubeProxyAtScale -v -count=1 -timeout 120m
func TestVersusKubeProxyAtScale(t *testing.T) {
	n := envInt(t, "SVCPROXY_SCALE_N", 10000)
	changes := envInt(t, "SVCPROXY_SCALE_CHANGES", 300)
	startTimeout := envDuration(t, "SVCPROXY_SCALE_START_TIMEOUT", 30*time.Minute)
	_, file, _, _ := runtime.Caller(0)
	out := os.Getenv("SVCPROXY_SCALE_OUT")
	if out == "" {
		out = filepath.Dir(filepath.Dir(file))
	}
	pick, err := regexp.Compile(os.Getenv("SVCPROXY_SCALE_MODES"))
	if err != nil {
		t.Fatalf("SVCPROXY_SCALE_MODES: %v", err)
	}
	spec := scalegen.Spec{Services: n + 1}
	script, samples, warm := versusScript(spec, changes)
	if len(script) < changes || len(samples) == 0 || n+1 > scalegen.MaxServices {
		t.Fatalf("SVCPROXY_SCALE_N=%d holds %d Services for a script of %d changes: too few (or more than %d Services)", n, len(script), changes, scalegen.MaxServices-1)
	}
	apiserver.Require(t)
	kubeProxy := apiserver.KubeProxy(t)
	loadStart := loadAverage()
	t.Logf("load average at the start: %s", loadStart)
	lab := netns.NewLab(t)
	apiNS := lab.NewNS("api")
	apiNS.AddSink("api0")
	apiNS.AddAddr("api0", netip.PrefixFrom(versusAPIAddr, 32))
	api := apiserver.Start(t, apiNS, versusAPIAddr, apiserver.Options{ServiceCIDRs: latencyServiceCIDR, Users: []string{proxyUser}})
	client := api.Client()
	start := time.Now()
	createScaleObjects(t, client, spec)
	t.Logf("created %d Services and %d EndpointSlices (%d endpoints) in %v", n, n, n*scalegen.DefaultEndpoints, time.Since(start).Round(time.Millisecond))
	setNodeAddress(t, client, versusNodeAddr)
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	svcs, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slicesList, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the initial list (what each proxy's informers read first): %d Services and %d EndpointSlices listed by the test in %v",
		len(svcs.Items), len(slicesList.Items), time.Since(start).Round(time.Millisecond))
	kubeconfig := api.Kubeconfig(api.Token(proxyUser))

	var results []versusResult
	title := fmt.Sprintf("%d Services × %d endpoints, %d changes at %d/s", n, scalegen.DefaultEndpoints, changes, changesPerSecond)
	for k, m := range versusModes {
		if !pick.MatchString(m.name) {
			continue
		}
		t.Run(strings.ReplaceAll(m.name, " ", "-"), func(t *testing.T) {
			r := runVersusMode(t, versusRun{k: k, mode: m, apiNS: apiNS, spec: spec, kubeconfig: kubeconfig, kubeProxy: kubeProxy,
				script: script, samples: samples, warm: warm, version: k + 1, client: api.Client(), startTimeout: startTimeout})
			results = append(results, r)
		})
		// The files so far after each mode: a run cut short keeps them.
		if len(results) > 0 {
			if err := writeVersusFiles(out, results, title); err != nil {
				t.Error(err)
			}
		}
	}
	loadEnd := loadAverage()
	t.Logf("load average at the end: %s", loadEnd)
	t.Logf("%s per mode; load average %s at the start, %s at the end:\n%s", title, loadStart, loadEnd, versusTable(results))
}

// versusScript picks the Services of the change script (the first
// changes TCP ClusterIP Services without affinity, internal traffic
// policy or a terminating endpoint), the Services sampled for the whole
// state (20 of the others, over the whole range, ending with the last),
// and the warm-up's (the last such Service not sampled).
func versusScript(spec scalegen.Spec, changes int) (script, samples []int, warm int) {
	var plain []int
	for i := spec.Services - 1; i >= 1; i-- {
		if plainTCPClusterIP(spec, i) {
			plain = append(plain, i)
		}
	}
	slices.Reverse(plain)
	if len(plain) < changes+2 {
		return nil, nil, 0
	}
	script = plain[:changes]
	rest := plain[changes:]
	warm = rest[len(rest)-2]
	samples = []int{rest[len(rest)-1]}
	step := max(1, len(rest)/20)
	for k := 0; k < len(rest)-2 && len(samples) < 20; k += step {
		samples = append(samples, rest[k])
	}
	return script, samples, warm
}

// plainTCPClusterIP reports whether generated Service i is a TCP ClusterIP
// Service whose changed endpoint is ready: its rules are one service chain
// (or one group of the flat layout) to ten endpoints.
func plainTCPClusterIP(spec scalegen.Spec, i int) bool {
	svc := spec.Service(i)
	s := svc.Spec
	return s.Type == v1.ServiceTypeClusterIP && s.Ports[0].Protocol == v1.ProtocolTCP && s.SessionAffinity == v1.ServiceAffinityNone &&
		len(s.ExternalIPs) == 0 && s.InternalTrafficPolicy == nil && i%50 != 49
}

// lastEndpoint is the endpoint that revision version of Service i's slice
// has last: the one a change replaces.
func lastEndpoint(spec scalegen.Spec, i, version int) netip.AddrPort {
	es := spec.ChangedSlice(i, version)
	return netip.AddrPortFrom(netip.MustParseAddr(es.Endpoints[len(es.Endpoints)-1].Addresses[0]), uint16(*es.Ports[0].Port))
}

// setNodeAddress gives the proxies' Node its InternalIP: kube-proxy waits
// for it (nodePortAddresses primary).
func setNodeAddress(t *testing.T, client kubernetes.Interface, addr netip.Addr) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := client.CoreV1().Nodes().Get(ctx, scalegen.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: addr.String()}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "(unknown)"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "(unknown)"
	}
	return strings.Join(f[:3], " ")
}

// procMemory is VmHWM and VmRSS of process pid, KiB.
func procMemory(pid int) (peak, rss int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmHWM:":
			peak = v
		case "VmRSS:":
			rss = v
		}
	}
	return peak, rss, nil
}
