//go:build scale && linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

// TestProxyCPUAtScale measures the CPU time a reference proxy uses at
// SVCPROXY_SCALE_N Services (default 10,000) × 10 endpoints over a window of
// SVCPROXY_SCALE_WINDOW (default 60s), after its first sync:
//
//   - idle, with --sync-period 1h: the manifest watcher's polling alone;
//   - with the default --sync-period 30s, until two periodic syncs (each a
//     check of the kernel's rules, nothing missing) have ended;
//   - iptables only: with an iptables-restore that always fails (put first
//     on the proxy's PATH), --min-sync-period 1s and --sync-period 30s: the
//     retries, which back off (the window starts after the first attempt).
//
// It is not part of the default run (build tag "scale", root):
//
//	go test -tags scale ./e2e/ -run ProxyCPUAtScale -v -timeout 60m
func TestProxyCPUAtScale(t *testing.T) {
	n := 10000
	if v := os.Getenv("SVCPROXY_SCALE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("SVCPROXY_SCALE_N=%q: %v", v, err)
		}
	}
	window := time.Minute
	if v := os.Getenv("SVCPROXY_SCALE_WINDOW"); v != "" {
		var err error
		if window, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SVCPROXY_SCALE_WINDOW=%q: %v", v, err)
		}
	}
	manifests := scaleManifests(t, n)
	failing := failingRestore(t)
	forEachBackend(t, func(t *testing.T, backend string) {
		cases := []cpuCase{
			{name: "idle, sync-period 1h", args: []string{"--sync-period", "1h"}},
			{name: "sync-period 30s, until 2 periodic syncs", args: []string{"--sync-period", "30s"}, periodicSyncs: 2},
		}
		if backend == "iptables" {
			cases = append(cases, cpuCase{name: "iptables-restore failing, sync-period 30s", args: []string{"--sync-period", "30s"}, path: failing})
		}
		for _, tc := range cases {
			c := netns.NewCluster(t, netns.ClusterSpec{})
			p := startScaleProxy(t, c, backend, manifests, tc.path, tc.args)
			before := p.log.String()
			cpu0 := procCPU(t, p.proc.Cmd.Process.Pid)
			start := time.Now()
			if tc.periodicSyncs > 0 {
				p.waitPeriodicSyncs(before, tc.periodicSyncs, 15*time.Minute)
			} else {
				time.Sleep(window)
			}
			elapsed := time.Since(start)
			cpu1 := procCPU(t, p.proc.Cmd.Process.Pid)
			during := strings.TrimPrefix(p.log.String(), before)
			syncs, failures := strings.Count(during, "msg=synced"), strings.Count(during, `msg="sync failed"`)
			self, children := cpu1[0]-cpu0[0], cpu1[1]-cpu0[1]
			t.Logf("%s-proxy, %d Services, %s: over %v, CPU %v in the proxy (%.2f%% of a core), %v in its children (%.2f%%); %d syncs, %d failed syncs, durations %v",
				backend, n, tc.name, elapsed.Round(time.Second), self, 100*self.Seconds()/elapsed.Seconds(),
				children, 100*children.Seconds()/elapsed.Seconds(), syncs, failures, syncDurations(during))
			switch {
			case strings.HasPrefix(tc.name, "idle") && (syncs != 0 || self.Seconds()/elapsed.Seconds() > 0.02):
				t.Errorf("idle: %d syncs and %.2f%% of a core, want none and under 2%%", syncs, 100*self.Seconds()/elapsed.Seconds())
			case strings.Contains(tc.name, "failing") && failures > backedOffRetries(window):
				t.Errorf("failing: %d attempts in %v, want at most %d (back-off)", failures, window, backedOffRetries(window))
			}
			if err := p.proc.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// syncDurations are the durations of the syncs logged in log, successful
// or not, in order.
func syncDurations(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "msg=synced") && !strings.Contains(line, `msg="sync failed"`) {
			continue
		}
		if i := strings.Index(line, " duration="); i >= 0 {
			out = append(out, strings.Fields(line[i+len(" duration="):])[0])
		}
	}
	return out
}

// backedOffRetries is the most retries that a sync failing from the start
// can make in window with --min-sync-period 1s and --sync-period 30s: at 1,
// 3, 7, 15 and 30 s after the first attempt, then every 30 s; one more for
// timing slack.
func backedOffRetries(window time.Duration) int {
	return 5 + int(window/(30*time.Second)) + 1
}

// cpuCase is one run of TestProxyCPUAtScale: extra arguments, a directory
// to put first on PATH, and the number of periodic syncs to measure over
// (when 0, SVCPROXY_SCALE_WINDOW).
type cpuCase struct {
	name          string
	args          []string
	path          string
	periodicSyncs int
}

// waitPeriodicSyncs waits, at most timeout, until the proxy has logged n
// periodic syncs, successful or not, after the log before.
func (p *proxy) waitPeriodicSyncs(before string, n int, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(strings.TrimPrefix(p.log.String(), before), "periodic=true") < n {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s-proxy made fewer than %d periodic syncs in %v", p.backend, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scaleManifests writes n generated Services and their EndpointSlices, with
// this test's Node, as one multi-document YAML file and returns its
// directory.
func scaleManifests(t *testing.T, n int) string {
	t.Helper()
	services, slices := scalegen.Spec{Services: n}.Objects()
	objs := []any{nodeObject()}
	for i := range services {
		services[i].APIVersion, services[i].Kind = "v1", "Service"
		slices[i].APIVersion, slices[i].Kind = "discovery.k8s.io/v1", "EndpointSlice"
		objs = append(objs, services[i], slices[i])
	}
	var b strings.Builder
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("---\n")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "objects.yaml"), b.String())
	return dir
}

// failingRestore returns a directory holding iptables-restore and
// ip6tables-restore programs that read their input and fail.
func failingRestore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"iptables-restore", "ip6tables-restore"} {
		script := "#!/bin/sh\ncat >/dev/null\necho 'injected failure' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startScaleProxy runs the backend's proxy on the cluster's node with the
// manifests in dir, pathDir first on its PATH when not empty, and waits, at
// most 10 minutes, for its first sync to succeed or fail.
func startScaleProxy(t *testing.T, c *netns.Cluster, backend, dir, pathDir string, extraArgs []string) *proxy {
	t.Helper()
	p := &proxy{t: t, backend: backend, node: c.Node, dir: dir, log: &logBuffer{}}
	args := append([]string{
		"--manifests", dir,
		"--node-name", nodeName,
		"--node-ip", c.Node.IPv4.String(),
		"--ip-family", "ipv4",
		"--metrics-bind-address", "",
		"--healthz-bind-address", "",
	}, append(layoutArgs(backend), extraArgs...)...)
	var extra []*os.File
	if backend == "ebpf" {
		ebpfArgs, cg := ebpfSetup(t, c, p)
		args, extra = append(args, ebpfArgs...), []*os.File{cg}
	}
	cmd := c.Node.Command(context.Background(), proxyBinary(t, backend), args...)
	cmd.ExtraFiles = extra
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if pathDir != "" {
		cmd.Env = append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"))
	}
	proc, err := c.Node.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s-proxy output:\n%s", backend, p.log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Minute)
	for !strings.Contains(p.log.String(), "msg=synced") && !strings.Contains(p.log.String(), `msg="sync failed"`) {
		select {
		case <-proc.Done():
			t.Fatalf("%s-proxy exited (%v) before its first sync:\n%s", backend, proc.Err(), p.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s-proxy made no sync within 10 minutes", backend)
		}
	}
	return p
}

// procCPU is the CPU time (user + system) of process pid and of its
// children that it waited for, from /proc/PID/stat, in clock ticks of
// 10 ms (USER_HZ is 100 on Linux).
func procCPU(t *testing.T, pid int) [2]time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which ends with the last ')':
	// state is [0], utime [11], stime [12], cutime [13], cstime [14].
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var ticks [4]int64
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(fields[11+i], 10, 64); err != nil {
			t.Fatalf("/proc/%d/stat: %v", pid, err)
		}
	}
	const tick = 10 * time.Millisecond
	return [2]time.Duration{time.Duration(ticks[0]+ticks[1]) * tick, time.Duration(ticks[2]+ticks[3]) * tick}
}
