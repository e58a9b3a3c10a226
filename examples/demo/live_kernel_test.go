//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
)

// livePackets are the packets the kernel test explains, one of each kind
// of outcome.
var livePackets = []string{
	"tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod",          // cluster IP, two endpoints
	"tcp 198.18.250.9:40000 -> 198.18.100.1:30080 from outside", // node port, eTP Local
	"tcp 198.18.250.9:40000 -> 198.18.100.1:30443 from outside", // eTP Local, no local endpoint
	"tcp 198.18.1.50:40000 -> 198.19.0.40:80 from pod",          // no endpoints
	"tcp 198.18.250.9:40000 -> 198.19.100.1:443 from outside",   // source range refused
	"tcp 198.18.100.1:40000 -> 198.19.0.30:80 from node",        // affinity
}

// webPacket goes to the Service port that the test removes behind the
// proxy's back.
const webPacket = "tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod"

// TestKernelExplainLive: in a fresh namespace the live rules are reported
// absent; after the executors sync the demo's rules into it, the live
// rules of both backends answer as the desired ones for every packet; after
// one Service's chain (iptables) and map element (nftables) are deleted
// behind the executors' backs, explain --live reports the difference and
// the first step where the paths part. The built command's exit status
// follows the same answers.
func TestKernelExplainLive(t *testing.T) {
	netns.Require(t, "iptables", "iptables-save", "nft")
	lab := netns.NewLab(t)
	ns := lab.NewNS("explain")
	ns.ToolOnPath(t, "nft")
	inNS := func(ctx context.Context, name string, args ...string) (string, error) {
		return ns.Run(ctx, name, args...)
	}
	opts := options{path: "manifests", nodeName: "node-a", clusterCIDR: "198.18.1.0/24", live: true, run: inNS}

	for _, b := range []string{"iptables", "nftables"} {
		out, err := explainIn(t, opts, b, webPacket)
		if !errors.Is(err, errDiffer) || !strings.Contains(out, "  ABSENT: no rules of the proxy in the kernel") {
			t.Errorf("%s before any sync: error %v, want the rules reported absent; got:\n%s", b, err, out)
		}
	}

	syncDemo(t, ns, opts)
	for _, b := range []string{"iptables", "nftables"} {
		for _, p := range livePackets {
			out, err := explainIn(t, opts, b, p)
			if err != nil || !strings.Contains(out, "  live and desired rules agree\n") || !strings.Contains(out, "  decided by:\n") {
				t.Errorf("%s: %s: error %v, want live and desired to agree; got:\n%s", b, p, err, out)
			}
		}
	}

	ns.MustRun("iptables", "-w", "-t", "nat", "-F", "KUBE-SVC-XRY76EGRC3BSCIIJ")
	ns.MustRun("nft", "delete", "element", "ip", "kube-proxy", "service-ips", "{ 198.19.0.10 . tcp . 80 }")
	for _, tt := range []struct{ backend, live, firstLive string }{
		{"iptables", "  not a Service\n", "    live:    nat PREROUTING: :PREROUTING ACCEPT\n"},
		{"nftables", "  rejected\n", "    live:    forward filter-forward: ct state new jump service-endpoints-check\n"},
	} {
		out, err := explainIn(t, opts, tt.backend, webPacket)
		for _, want := range []string{
			tt.backend + ", live rules (", tt.live,
			"  DIFFERS from the desired rules, which say:\n    forwarded through the cluster IP of demo/web:http\n",
			"  first different step:\n" + tt.firstLive,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s after the deletion: output lacks %q; got:\n%s", tt.backend, want, out)
			}
		}
		if !errors.Is(err, errDiffer) {
			t.Errorf("%s after the deletion: error %v, want errDiffer", tt.backend, err)
		}
		// Another Service port is untouched.
		if out, err := explainIn(t, opts, tt.backend, livePackets[1]); err != nil {
			t.Errorf("%s after the deletion: %s: %v\n%s", tt.backend, livePackets[1], err, out)
		}
	}
	checkExitStatus(t, ns)
}

// explainIn runs the explain of packet for one backend with opts.
func explainIn(t *testing.T, opts options, backend, packet string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.backend, opts.explain = backend, packet
	var out, errs bytes.Buffer
	err := run(ctx, &out, &errs, opts)
	if err != nil && !errors.Is(err, errDiffer) {
		t.Fatalf("%s: %s: %v", backend, packet, err)
	}
	return out.String(), err
}

// syncDemo applies the demo's Ruleset in ns with both executors, as the
// reference proxies do on their first sync.
func syncDemo(t *testing.T, ns *netns.NS, opts options) {
	t.Helper()
	rs, _, _, err := build(opts, v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ipt, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: v1.IPv4Protocol, Runner: iptables.ExecRunner{Prefix: []string{"ip", "netns", "exec", ns.Name}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ipt.Sync(ctx, rs); err != nil {
		t.Fatalf("iptables sync: %v", err)
	}
	var nft *nftables.Executor
	if err := ns.Do(func() error {
		nft, err = nftables.NewExecutor(nftables.ExecutorConfig{Family: v1.IPv4Protocol})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nft.Close() })
	if _, err := nft.Sync(ctx, rs); err != nil {
		t.Fatalf("nftables sync: %v", err)
	}
}

// checkExitStatus builds the command and runs it in ns: 1 for the Service
// port deleted behind the executors' backs, 0 for one still in place.
func checkExitStatus(t *testing.T, ns *netns.NS) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tt := range []struct {
		packet string
		want   int
	}{{webPacket, 1}, {livePackets[1], 0}} {
		out, err := ns.Run(ctx, bin, "--manifests", "manifests", "--cluster-cidr", "198.18.1.0/24", "--live", "--explain", tt.packet)
		code := 0
		if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", tt.packet, err)
		}
		if code != tt.want {
			t.Errorf("%s: exit status %d, want %d; output:\n%s\n%v", tt.packet, code, tt.want, out, err)
		}
	}
}
