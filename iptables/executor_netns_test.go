//go:build linux

package iptables

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// counters matches the packet and byte counters of iptables-save, which
// traffic changes.
var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// hostFirewall reads, without changing anything, the host namespace's
// iptables and ip6tables rules, without comments and counters.
func hostFirewall(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(tool).Output()
		if err != nil {
			t.Fatalf("reading the host's rules with %s: %v", tool, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, "#") {
				b.WriteString(counters.ReplaceAllString(line, "") + "\n")
			}
		}
	}
	return b.String()
}

// ownNetNS is the network namespace of the test process's main thread.
func ownNetNS(t *testing.T) string {
	t.Helper()
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestExecutorNetNS syncs, checks and cleans up the rules of a namespace
// from the test process, which stays in its own namespace: the rules appear
// in the target namespace only, and the host's rules are as they were.
func TestExecutorNetNS(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	target := lab.NewNS("iptnetns")
	hostBefore, selfBefore := hostFirewall(t), ownNetNS(t)

	e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, NetNS: filepath.Join("/run/netns", target.Name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	rs := build(t, testConfig(),
		service("ns1", "web", "198.19.0.10"),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...))
	if res, err := e.Sync(ctx, rs); err != nil || !res.Full {
		t.Fatalf("Sync: full %v, %v; want a full sync", res.Full, err)
	}
	saved := readSaved(t, target, false, DefaultNames())
	if saved.chains["nat"][DefaultNames().Services()] == 0 || len(saved.jumps) == 0 {
		t.Errorf("the target namespace has no rules in %s, or no jumps to ours: %+v", DefaultNames().Services(), saved)
	}
	if missing, err := e.CheckState(ctx); missing.Found() || err != nil {
		t.Errorf("CheckState in the target namespace: %+v, %v; want nothing missing", missing, err)
	}
	if diff := cmp.Diff(hostBefore, hostFirewall(t)); diff != "" {
		t.Errorf("the host's rules changed after Sync (-before +after):\n%s", diff)
	}
	if err := e.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if saved := readSaved(t, target, false, DefaultNames()); len(saved.chains) != 0 || len(saved.jumps) != 0 {
		t.Errorf("after Cleanup the target namespace still has %+v", saved)
	}
	if diff := cmp.Diff(hostBefore, hostFirewall(t)); diff != "" {
		t.Errorf("the host's rules changed after Cleanup (-before +after):\n%s", diff)
	}
	if self := ownNetNS(t); self != selfBefore {
		t.Errorf("the test process moved from %s to %s", selfBefore, self)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sync(ctx, rs); err == nil {
		t.Error("Sync after Close succeeded; want an error (the namespace is released)")
	}
}
