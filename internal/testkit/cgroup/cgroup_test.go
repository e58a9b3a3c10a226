package cgroup_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/cgroup"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestNew: a child of the cgroup v2 root, named by the prefix, gone once
// the (sub)test that made it has ended.
func TestNew(t *testing.T) {
	netns.Require(t)
	var dir string
	t.Run("make", func(t *testing.T) {
		dir = cgroup.New(t, "svcp-cgroup-test")
		root, err := cgroup.Root()
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(dir) != root || !strings.HasPrefix(filepath.Base(dir), "svcp-cgroup-test-") {
			t.Fatalf("cgroup %s, want a child of %s named svcp-cgroup-test-…", dir, root)
		}
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			t.Fatalf("not a cgroup: %v", err)
		}
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("cgroup %s after its test: %v", dir, err)
	}
}
