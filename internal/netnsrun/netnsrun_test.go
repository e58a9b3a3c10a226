//go:build linux

package netnsrun_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnsrun"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestDo: a command started inside Do runs in the namespace, the calling
// process stays where it was, and Do fails after Close.
func TestDo(t *testing.T) {
	lab := netns.NewLab(t)
	target := lab.NewNS("runner")
	path := filepath.Join("/run/netns", target.Name)
	want, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	targetID := target.MustRun("readlink", "/proc/self/ns/net")

	ns, err := netnsrun.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var inside []byte
	if err := ns.Do(func() error {
		var err error
		inside, err = exec.Command("readlink", "/proc/self/ns/net").Output()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(inside)); got != strings.TrimSpace(targetID) || got == want {
		t.Errorf("a command started in Do runs in %s; want the target %s, not the caller's %s", got, strings.TrimSpace(targetID), want)
	}
	for range 4 { // the threads that ran Do were moved back
		if err := ns.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.Readlink("/proc/self/ns/net"); err != nil || got != want {
		t.Errorf("the process moved from %s to %s (%v)", want, got, err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error { return nil }); err == nil {
		t.Error("Do after Close succeeded")
	}
	if err := ns.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := netnsrun.Open(filepath.Join("/run/netns", "svcp-no-such-namespace")); err == nil {
		t.Error("Open of a missing namespace succeeded")
	}
}
