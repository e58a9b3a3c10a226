package proxybin

import (
	"os"
	"testing"
)

func TestBuildOnceAndRemove(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a proxy")
	}
	b := New("proxybin-test-")
	first := b.Binary(t, "userspace")
	info, err := os.Stat(first)
	if err != nil || info.Mode()&0o111 == 0 {
		t.Fatalf("built binary %s: %v, mode %v", first, err, info)
	}
	before := info.ModTime()
	if again := b.Binary(t, "userspace"); again != first {
		t.Errorf("second Binary = %s, want the first build %s", again, first)
	}
	if info, _ := os.Stat(first); !info.ModTime().Equal(before) {
		t.Errorf("second Binary rebuilt %s", first)
	}
	if _, err := b.build("no-such"); err == nil {
		t.Error("building examples/no-such-proxy: no error")
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("after Remove, %s: %v, want it gone", first, err)
	}
	if err := b.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}
