//go:build scale && linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

// versusRun is what one mode of TestVersusKubeProxyAtScale runs with.
type versusRun struct {
	k                     int // the mode's index: its link to the API server
	mode                  versusMode
	apiNS                 *netns.NS
	spec                  scalegen.Spec
	kubeconfig, kubeProxy string
	script, samples       []int
	warm                  int
	version               int // the revision the mode's changes write
	startTimeout          time.Duration
	client                kubernetes.Interface
}

// versusMetricsURL is kube-proxy's default metricsBindAddress, inside the
// proxy's namespace.
const versusMetricsURL = "http://127.0.0.1:10249/metrics"

// runVersusMode runs one mode in a namespace of its own (deleted, with
// everything the proxy wrote, when t ends) and measures it.
func runVersusMode(t *testing.T, r versusRun) versusResult {
	m := r.mode
	lab := netns.NewLab(t)
	ns := lab.NewNS("node")
	ns.AddSink("eth0")
	ns.AddAddr("eth0", netip.PrefixFrom(versusNodeAddr, 24))
	dev := fmt.Sprintf("to%d", r.k)
	lab.Veth(ns, "api0", r.apiNS, dev)
	r.apiNS.AddAddr(dev, netip.MustParsePrefix(fmt.Sprintf("198.18.%d.1/24", 2+r.k)))
	ns.AddAddr("api0", netip.MustParsePrefix(fmt.Sprintf("198.18.%d.2/24", 2+r.k)))
	ns.AddRoute(netip.PrefixFrom(versusAPIAddr, 32), netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", 2+r.k)), "api0")

	config := filepath.Join(t.TempDir(), "kube-proxy.conf")
	if err := os.WriteFile(config, []byte(versusConfig(m.mode, r.kubeconfig)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, backend: m.backend, log: &logBuffer{}}
	var cmd []string
	var extra []*os.File
	if m.kubeProxy {
		cmd = []string{r.kubeProxy, "--config", config}
	} else {
		cmd = append([]string{proxyBinary(t, m.backend), "--config", config}, m.args...)
		if m.backend == "ebpf" {
			args, cg := ebpfSetup(t, &netns.Cluster{Lab: lab}, p)
			cmd, extra = append(cmd, args...), []*os.File{cg}
		}
	}
	check, err := m.check(ns, r.spec, p)
	if err != nil {
		t.Fatal(err)
	}
	poll := startPoller(check)
	defer poll.close()
	start := time.Now()
	for _, i := range r.samples {
		poll.add(i, lastEndpoint(r.spec, i, 0), start, "start")
	}
	command := ns.Command(context.Background(), cmd[0], cmd[1:]...)
	command.ExtraFiles = extra
	command.Stdout, command.Stderr = p.log, p.log
	proc, err := ns.Start(command)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output (end):\n%s", m.name, lastLines(p.log.String(), 40))
		}
		_ = proc.Stop()
	})
	pid := proc.Cmd.Process.Pid
	res := versusResult{mode: m}

	seen, left := poll.waitTagged("start", r.startTimeout)
	if left > 0 {
		// A result too: the table says so.
		_, _, _, perr := poll.cost()
		t.Logf("%s: %d of %d sampled Services not in the kernel %v after start (SVCPROXY_SCALE_START_TIMEOUT; poller: %v); its changes are not measured. Its output (end):\n%s",
			m.name, left, len(r.samples), r.startTimeout, perr, lastLines(p.log.String(), 20))
		res.wholeState, res.startTimedOut = r.startTimeout, true
		res.peak, res.rss, _ = procMemory(pid)
		return res
	}
	for _, s := range seen {
		res.wholeState = max(res.wholeState, s.seen.Sub(start))
	}
	t.Logf("%s: the whole state (%d sampled Services) in the kernel %v after start", m.name, len(r.samples), res.wholeState.Round(time.Millisecond))

	metrics := metricsClient(ns)
	waitMetrics(t, metrics, versusMetricsURL, m.name+"'s first sync", lastSyncLine)
	// The warm-up change: the first sync's work is over once it is in.
	poll.add(r.warm, lastEndpoint(r.spec, r.warm, r.version), time.Now(), "warm")
	if err := apply(r.client, changedSlice(r.spec, r.warm, r.version, time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, left := poll.waitTagged("warm", 5*time.Minute); left > 0 {
		t.Fatalf("%s: the warm-up change not in the kernel within 5 minutes", m.name)
	}
	waitMetrics(t, metrics, versusMetricsURL, "the warm-up change to be observed", regexp.MustCompile(`(?m)^`+programmingMetric+`_count`))
	if syncs := parseSyncs(p.log.String()); !m.kubeProxy && len(syncs) > 0 {
		// Our first sync starts once the informers' initial lists are in
		// (its synced line, logged after the metrics, is there by now).
		res.afterLists = res.wholeState - syncs[0].start.Sub(start)
		t.Logf("%s: the whole state in the kernel %v after the initial lists (the first sync's start, %v after the proxy's)",
			m.name, res.afterLists.Round(time.Millisecond), syncs[0].start.Sub(start).Round(time.Millisecond))
	}
	before := waitSettled(t, metrics, versusMetricsURL, 60*time.Second)

	cpu0 := procCPU(t, pid)
	windowStart := time.Now()
	tick := time.NewTicker(time.Second / changesPerSecond)
	for _, i := range r.script {
		<-tick.C
		made := time.Now()
		poll.add(i, lastEndpoint(r.spec, i, r.version), made, "window")
		if err := apply(r.client, changedSlice(r.spec, i, r.version, made)); err != nil {
			tick.Stop()
			t.Fatalf("%s: change of Service %d: %v", m.name, i, err)
		}
	}
	tick.Stop()
	res.windowTaken = time.Since(windowStart)
	seen, left = poll.waitTagged("window", 10*time.Minute)
	cpu1 := procCPU(t, pid)
	res.unseen = left
	// Our proxies log their syncs: the changes written during a periodic
	// run (its state check, then its sync) are told apart.
	var periodic []syncRecord
	if !m.kubeProxy {
		for _, s := range parseSyncs(p.log.String()) {
			if s.periodic && s.end.After(windowStart) {
				periodic = append(periodic, s)
				res.periodicRuns = append(res.periodicRuns, s.end.Sub(s.start))
			}
		}
	}
	for _, s := range seen {
		d := s.seen.Sub(s.since)
		res.latencies = append(res.latencies, d)
		if !m.kubeProxy && !slices.ContainsFunc(periodic, func(r syncRecord) bool {
			return !s.since.Before(r.start.Add(-100*time.Millisecond)) && !s.since.After(r.end)
		}) {
			res.outsidePeriodic = append(res.outsidePeriodic, d)
		}
	}
	slices.Sort(res.latencies)
	slices.Sort(res.outsidePeriodic)
	res.cpuPer1000 = (cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1]).Seconds() / float64(len(r.script)) * 1000
	waitObservations(t, metrics, versusMetricsURL, before.count+uint64(len(r.script)), time.Minute)
	res.metric = waitSettled(t, metrics, versusMetricsURL, 60*time.Second).minus(before)
	var err2 error
	if res.peak, res.rss, err2 = procMemory(pid); err2 != nil {
		t.Fatal(err2)
	}
	var perr error
	res.pollRounds, res.pollReads, res.pollMean, res.pollLate, perr = poll.stats()
	t.Logf("%s: %d periodic runs in the window %v; without the changes written during one: p50 %v, p99 %v (%d changes)",
		m.name, len(res.periodicRuns), roundAll(res.periodicRuns), quantileOf(res.outsidePeriodic, 0.5), quantileOf(res.outsidePeriodic, 0.99), len(res.outsidePeriodic))
	t.Logf("%s: %d changes over %v, %d in the kernel (%d not within 10 minutes): API write → kernel p50 %v, p99 %v, max %v; metric p50 %.3fs, p99 %.3fs (%d observations); CPU %.2fs per 1,000 changes; RSS peak %d MiB, steady %d MiB; poller: %d rounds, %d reads, %v a read, %d changes found on a re-read (last error: %v)",
		m.name, len(r.script), res.windowTaken.Round(time.Millisecond), len(res.latencies), res.unseen,
		quantileOf(res.latencies, 0.5), quantileOf(res.latencies, 0.99), quantileOf(res.latencies, 1),
		res.metric.quantile(0.5), res.metric.quantile(0.99), res.metric.count, res.cpuPer1000, res.peak>>10, res.rss>>10,
		res.pollRounds, res.pollReads, res.pollMean.Round(time.Microsecond), res.pollLate, perr)
	if res.unseen > 0 {
		var unseen []string
		for _, w := range poll.pendingTagged("window") {
			unseen = append(unseen, fmt.Sprintf("Service %d (%v, written %s)", w.service, w.ep, w.since.Format(time.StampMilli)))
		}
		t.Errorf("%s: %d changes not seen in the kernel: %s", m.name, res.unseen, strings.Join(unseen, "; "))
	}
	if err := proc.Stop(); err != nil {
		t.Error(err)
	}
	return res
}

// changedSlice is revision version of Service i's slice with trigger time
// at, in nanoseconds, ready to apply.
func changedSlice(spec scalegen.Spec, i, version int, at time.Time) any {
	es := withTriggerTime(spec.ChangedSlice(i, version), at, time.RFC3339Nano)
	es.APIVersion, es.Kind = "discovery.k8s.io/v1", "EndpointSlice"
	return es
}

// versusConfig is the KubeProxyConfiguration of a mode: kube-proxy's
// defaults but for what a test node needs (its name, the pod network, the
// API server) and the conntrack sysctls left alone (the table size is
// read-only in a network namespace).
func versusConfig(mode, kubeconfig string) string {
	return strings.Join([]string{
		"apiVersion: kubeproxy.config.k8s.io/v1alpha1",
		"kind: KubeProxyConfiguration",
		"mode: " + mode,
		"clientConnection: {kubeconfig: " + kubeconfig + "}",
		"hostnameOverride: " + scalegen.NodeName,
		"clusterCIDR: " + scalegen.ClusterCIDR.String(),
		"conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}",
		"",
	}, "\n")
}

// quantileOf is the q-quantile of sorted ds by the nearest rank; 0 when
// empty.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return nearestRank(sorted, q).Round(time.Millisecond)
}

// versusTable is the results as a Markdown table, one column per mode.
func versusTable(results []versusResult) string {
	var b strings.Builder
	row := func(label string, cell func(r versusResult) string) {
		b.WriteString("| " + label + " |")
		for _, r := range results {
			b.WriteString(" " + cell(r) + " |")
		}
		b.WriteString("\n")
	}
	// measured is cell, or "—" for a mode whose changes were not measured.
	measured := func(cell func(r versusResult) string) func(r versusResult) string {
		return func(r versusResult) string {
			if r.startTimedOut {
				return "—"
			}
			return cell(r)
		}
	}
	row("", func(r versusResult) string { return r.mode.name })
	b.WriteString("|---|" + strings.Repeat("---|", len(results)) + "\n")
	row("setting beyond kube-proxy's defaults", func(r versusResult) string {
		if r.mode.setting == "" {
			return "none"
		}
		return r.mode.setting
	})
	row("start → whole state in the kernel", func(r versusResult) string {
		if r.startTimedOut {
			return "not within " + r.wholeState.String()
		}
		return seconds(r.wholeState)
	})
	row("whole state after the initial lists (the first sync's start)", func(r versusResult) string {
		if r.mode.kubeProxy || r.startTimedOut {
			return "—"
		}
		return seconds(r.afterLists)
	})
	row("API write → kernel, p50 / p99 (polled)", measured(func(r versusResult) string {
		return seconds(quantileOf(r.latencies, 0.5)) + " / " + seconds(quantileOf(r.latencies, 0.99))
	}))
	row("API write → kernel, max", measured(func(r versusResult) string { return seconds(quantileOf(r.latencies, 1)) }))
	row("periodic runs in the window (state check + sync), their durations", measured(func(r versusResult) string {
		if r.mode.kubeProxy {
			return "—"
		}
		var ds []string
		for _, d := range r.periodicRuns {
			ds = append(ds, seconds(d))
		}
		return fmt.Sprintf("%d: %s", len(ds), strings.Join(ds, ", "))
	}))
	row("p50 / p99 of the changes not written during one (count)", measured(func(r versusResult) string {
		if r.mode.kubeProxy {
			return "—"
		}
		return fmt.Sprintf("%s / %s (%d)", seconds(quantileOf(r.outsidePeriodic, 0.5)), seconds(quantileOf(r.outsidePeriodic, 0.99)), len(r.outsidePeriodic))
	}))
	row("metric p50 / p99 (buckets)", measured(func(r versusResult) string {
		return fmt.Sprintf("%.3f / %.3f s", r.metric.quantile(0.5), r.metric.quantile(0.99))
	}))
	row("CPU per 1,000 changes", measured(func(r versusResult) string { return fmt.Sprintf("%.1f s", r.cpuPer1000) }))
	row("RSS peak / steady", func(r versusResult) string { return fmt.Sprintf("%d / %d MiB", r.peak>>10, r.rss>>10) })
	row("poller: reads, mean read; changes found on a re-read", measured(func(r versusResult) string {
		return fmt.Sprintf("%d in %d rounds, %v; %d", r.pollReads, r.pollRounds, r.pollMean.Round(10*time.Microsecond), r.pollLate)
	}))
	return b.String()
}

// seconds writes d in seconds, to the millisecond.
func seconds(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

// writeVersusFiles writes the per-change latencies (versus-kube-proxy.tsv)
// and their CDF plot (versus-kube-proxy.svg) to dir.
func writeVersusFiles(dir string, results []versusResult, title string) error {
	var tsv strings.Builder
	tsv.WriteString("mode\tchange\tseconds\n")
	var series []cdfSeries
	for _, r := range results {
		for k, d := range r.latencies {
			fmt.Fprintf(&tsv, "%s\t%d\t%.6f\n", r.mode.name, k, d.Seconds())
		}
		series = append(series, cdfSeries{name: r.mode.name, sorted: r.latencies})
	}
	if err := os.WriteFile(filepath.Join(dir, "versus-kube-proxy.tsv"), []byte(tsv.String()), 0o644); err != nil {
		return err
	}
	svg := cdfSVG("API write → endpoint in the kernel: "+title, series)
	return os.WriteFile(filepath.Join(dir, "versus-kube-proxy.svg"), []byte(svg), 0o644)
}
