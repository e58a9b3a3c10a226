//go:build linux

package ebpf_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ebpf"
)

// With a pin path, the programs keep serving after the Dataplane is
// closed (a proxy that exits); a new Dataplane on the same pins takes the
// maps over as they are (its first Sync changes nothing) and updates the
// links to its programs; Cleanup then detaches them and removes the pins.
func TestKernelPinnedCleanup(t *testing.T) {
	l := newLab(t, 2)
	bpffs := filepath.Join(t.TempDir(), "bpffs")
	if err := os.Mkdir(bpffs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mounting a private bpffs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(bpffs, 0); err != nil {
			t.Errorf("unmounting %s: %v", bpffs, err)
		}
	})
	cfg := ebpf.Config{Cgroup: l.cgroup, PinPath: filepath.Join(bpffs, "svcproxy")}
	objs := []any{service("web", "198.19.0.10", v1.ProtocolTCP), slice("web", v1.ProtocolTCP, l.podEPs(false, "node-a", 0, 1)...)}
	ctx := context.Background()

	first := ebpf.NewDataplane(cfg)
	t.Cleanup(func() { first.Cleanup() })
	if _, err := first.Executor(v1.IPv4Protocol).Sync(ctx, buildRuleset(t, l, objs...)); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:80", Count: 10}), "198.19.0.10:80"); n["pod0"]+n["pod1"] != 10 {
		t.Fatalf("after Close with pins: %v, want both pods", n)
	}

	second := ebpf.NewDataplane(cfg)
	t.Cleanup(func() { second.Cleanup() })
	res, err := second.Executor(v1.IPv4Protocol).Apply(ctx, buildRuleset(t, l, objs...))
	if err != nil {
		t.Fatal(err)
	}
	if d := res; !res.Full || d.Puts+d.Deletes != 0 {
		t.Errorf("first Sync over pinned maps: full %v, %+v; want full with no change", res.Full, d)
	}
	if got := attachedPrograms(t, l.cgroup); len(got) != 8 {
		t.Errorf("%d programs attached after the second load, want 8", len(got))
	}
	if n := tally(t, l.run(request{Op: "tcp", Network: "tcp4", Dst: "198.19.0.10:80", Count: 10}), "198.19.0.10:80"); n["pod0"]+n["pod1"] != 10 {
		t.Fatalf("after the second load: %v", n)
	}
	if err := second.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if got := attachedPrograms(t, l.cgroup); len(got) != 0 {
		t.Errorf("after Cleanup: %v attached", got)
	}
	if _, err := os.Stat(cfg.PinPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Cleanup, the pin path: %v", err)
	}
}
