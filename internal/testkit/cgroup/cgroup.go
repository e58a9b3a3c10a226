// Package cgroup makes the child cgroups that kernel tests attach eBPF
// programs to: never the root of the cgroup v2 tree, always a child the
// test made, with a name unique to the process and call, removed when the
// test ends.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// Root is the mount point of the cgroup v2 tree, from /proc/mounts.
func Root() (string, error) {
	data, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", errors.New("no cgroup2 mount in /proc/mounts")
}

var seq atomic.Int64

// New makes the child cgroup prefix-PID-N of the cgroup v2 tree and
// removes it when tb ends, waiting up to 5 s for the kernel to let go of
// the processes that ran in it (they must have ended by then). Without a
// cgroup v2 tree it skips tb, or fails it when netns.EnvRequired is
// "required".
func New(tb testing.TB, prefix string) string {
	tb.Helper()
	root, err := Root()
	if err != nil {
		if os.Getenv(netns.EnvRequired) == "required" {
			tb.Fatalf("cgroup: %v (%s=required)", err, netns.EnvRequired)
		}
		tb.Skipf("cgroup: %v; skipping", err)
	}
	dir := filepath.Join(root, fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("creating cgroup: %v", err)
	}
	tb.Cleanup(func() {
		var err error
		for range 50 {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		tb.Errorf("removing cgroup %s: %v", dir, err)
	})
	return dir
}
