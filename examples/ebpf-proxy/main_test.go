package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/internal/testkit/cgroup"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// --dry-run prints the map elements, needs no root and touches nothing.
func TestDryRun(t *testing.T) {
	var stdout, stderr strings.Builder
	code := proxy.Run(mode, []string{"--manifests", "../demo/manifests", "--node-name", "node-a", "--dry-run"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{
		"service 198.19.0.10:80/6 -> group ",
		"service 198.19.0.40:80/6 -> reject",
		"service node port 30080/6 (IPv4) -> group ",
		"node-addr 198.18.100.1",
		"cluster-addr 198.19.0.10",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("dry run lacks %q:\n%s", want, stdout.String())
		}
	}
}

// Without --cgroup, a run that would attach is refused.
func TestNeedsCgroup(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := proxy.Run(mode, []string{"--manifests", "../demo/manifests", "--node-name", "node-a", "--once", "--metrics-bind-address", "", "--healthz-bind-address", ""}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--cgroup is needed") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// --tc-external without --tc-pods (and the reverse) is refused before
// anything is loaded.
func TestTCFlagsGoTogether(t *testing.T) {
	for _, flag := range []string{"--tc-external", "--tc-pods"} {
		var stdout, stderr strings.Builder
		args := []string{"--manifests", "../demo/manifests", "--node-name", "node-a", "--once", "--cgroup", "/nonexistent", flag, "eth0",
			"--metrics-bind-address", "", "--healthz-bind-address", ""}
		if code := proxy.Run(mode, args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--tc-external and --tc-pods go together") {
			t.Errorf("%s alone: exit %d: %s", flag, code, stderr.String())
		}
	}
}

// --once attaches the programs to the cgroup and pins them, so that they
// stay after the proxy exits; --cleanup detaches them and removes the
// pins. The cgroup is a child cgroup the test makes, the bpffs a private
// mount.
func TestOnceAndCleanup(t *testing.T) {
	netns.Require(t)
	cg := cgroup.New(t, "svcp-ebpf-proxy-test")
	bpffs := t.TempDir()
	if err := unix.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(bpffs, 0); err != nil {
			t.Error(err)
		}
	})
	pins := filepath.Join(bpffs, "svcproxy")
	args := []string{"--manifests", "../demo/manifests", "--node-name", "node-a", "--cgroup", cg, "--bpf-pin-path", pins,
		"--metrics-bind-address", "", "--healthz-bind-address", ""}
	var stdout, stderr strings.Builder
	t.Cleanup(func() { proxy.Run(mode, append(args, "--cleanup"), &stdout, &stderr) }) // also on failure
	if code := proxy.Run(mode, append(args, "--once"), &stdout, &stderr); code != 0 {
		t.Fatalf("--once: exit %d: %s", code, stderr.String())
	}
	if n := attached(t, cg); n != 8 {
		t.Fatalf("%d programs attached after --once, want 8", n)
	}
	if code := proxy.Run(mode, append(args, "--cleanup"), &stdout, &stderr); code != 0 {
		t.Fatalf("--cleanup: exit %d: %s", code, stderr.String())
	}
	if n := attached(t, cg); n != 0 {
		t.Fatalf("%d programs attached after --cleanup", n)
	}
	if _, err := os.Stat(pins); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pins after --cleanup: %v", err)
	}
}

// attached counts the programs of the attach types the proxy uses on
// cgroup.
func attached(t *testing.T, cgroup string) int {
	f, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, at := range []cebpf.AttachType{cebpf.AttachCGroupInet4Connect, cebpf.AttachCGroupInet6Connect, cebpf.AttachCGroupUDP4Sendmsg,
		cebpf.AttachCGroupUDP6Sendmsg, cebpf.AttachCGroupUDP4Recvmsg, cebpf.AttachCGroupUDP6Recvmsg,
		cebpf.AttachCgroupInet4GetPeername, cebpf.AttachCgroupInet6GetPeername} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: at})
		if err != nil {
			t.Fatal(err)
		}
		n += len(res.Programs)
	}
	return n
}
