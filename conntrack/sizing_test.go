package conntrack_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/conntrack"
)

func TestSizingSettings(t *testing.T) {
	tests := []struct {
		name   string
		sizing conntrack.Sizing
		cpus   int
		want   []conntrack.Setting
	}{
		{
			name:   "zero value leaves everything alone",
			sizing: conntrack.Sizing{},
			cpus:   8,
			want:   nil,
		},
		{
			name:   "defaults, few CPUs: the minimum wins",
			sizing: conntrack.DefaultSizing(),
			cpus:   2,
			want: []conntrack.Setting{
				{Name: conntrack.SysctlMax, Value: 131072},
				{Name: conntrack.SysctlBuckets, Value: 32768, AtLeast: true},
				{Name: conntrack.SysctlTCPEstablishedTimeout, Value: 86400},
				{Name: conntrack.SysctlTCPCloseWaitTimeout, Value: 3600},
			},
		},
		{
			name:   "defaults, 4 CPUs: exactly the minimum",
			sizing: conntrack.DefaultSizing(),
			cpus:   4,
			want: []conntrack.Setting{
				{Name: conntrack.SysctlMax, Value: 131072},
				{Name: conntrack.SysctlBuckets, Value: 32768, AtLeast: true},
				{Name: conntrack.SysctlTCPEstablishedTimeout, Value: 86400},
				{Name: conntrack.SysctlTCPCloseWaitTimeout, Value: 3600},
			},
		},
		{
			name:   "defaults, 16 CPUs: per core wins",
			sizing: conntrack.DefaultSizing(),
			cpus:   16,
			want: []conntrack.Setting{
				{Name: conntrack.SysctlMax, Value: 524288},
				{Name: conntrack.SysctlBuckets, Value: 131072, AtLeast: true},
				{Name: conntrack.SysctlTCPEstablishedTimeout, Value: 86400},
				{Name: conntrack.SysctlTCPCloseWaitTimeout, Value: 3600},
			},
		},
		{
			name:   "MaxPerCore 0: maximum and hash size left alone",
			sizing: conntrack.Sizing{Min: 131072, TCPEstablishedTimeout: time.Hour},
			cpus:   16,
			want:   []conntrack.Setting{{Name: conntrack.SysctlTCPEstablishedTimeout, Value: 3600}},
		},
		{
			name:   "no minimum",
			sizing: conntrack.Sizing{MaxPerCore: 1000},
			cpus:   3,
			want: []conntrack.Setting{
				{Name: conntrack.SysctlMax, Value: 3000},
				{Name: conntrack.SysctlBuckets, Value: 750, AtLeast: true},
			},
		},
		{
			name:   "0 CPUs counts as 1",
			sizing: conntrack.Sizing{MaxPerCore: 1000},
			cpus:   0,
			want: []conntrack.Setting{
				{Name: conntrack.SysctlMax, Value: 1000},
				{Name: conntrack.SysctlBuckets, Value: 250, AtLeast: true},
			},
		},
		{
			name: "UDP timeouts and be_liberal when set",
			sizing: conntrack.Sizing{
				TCPCloseWaitTimeout: 90 * time.Second, TCPBeLiberal: true,
				UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2*time.Minute + 500*time.Millisecond,
			},
			cpus: 1,
			want: []conntrack.Setting{
				{Name: conntrack.SysctlTCPCloseWaitTimeout, Value: 90},
				{Name: conntrack.SysctlTCPBeLiberal, Value: 1},
				{Name: conntrack.SysctlUDPTimeout, Value: 30},
				{Name: conntrack.SysctlUDPStreamTimeout, Value: 120},
			},
		},
	}
	for _, tt := range tests {
		got, err := tt.sizing.Settings(tt.cpus)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: Settings(%d) (-want +got):\n%s", tt.name, tt.cpus, diff)
		}
	}
}

func TestSizingInvalid(t *testing.T) {
	for _, s := range []conntrack.Sizing{
		{MaxPerCore: -1},
		{Min: -1},
		{TCPEstablishedTimeout: -time.Second},
		{UDPTimeout: 500 * time.Millisecond},
	} {
		if _, err := s.Settings(4); err == nil {
			t.Errorf("Settings(%+v) gave no error", s)
		}
	}
}

// fakeSysctls makes a directory standing in for /proc/sys with the values.
func fakeSysctls(t *testing.T, values map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, v := range values {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func readFake(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSysctlWriter(t *testing.T) {
	root := fakeSysctls(t, map[string]string{
		conntrack.SysctlMax:                   "262144\n",
		conntrack.SysctlBuckets:               "16384\n",
		conntrack.SysctlTCPEstablishedTimeout: "432000\n",
		conntrack.SysctlTCPCloseWaitTimeout:   "3600\n",
	})
	settings, err := conntrack.DefaultSizing().Settings(2)
	if err != nil {
		t.Fatal(err)
	}
	w := conntrack.SysctlWriter{Root: root}
	changes, err := w.Apply(settings)
	if err != nil {
		t.Fatal(err)
	}
	want := []conntrack.Change{
		{Name: conntrack.SysctlMax, Old: 262144, New: 131072},
		{Name: conntrack.SysctlBuckets, Old: 16384, New: 32768},
		{Name: conntrack.SysctlTCPEstablishedTimeout, Old: 432000, New: 86400},
	}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("first Apply changes (-want +got):\n%s", diff)
	}
	for name, v := range map[string]string{
		conntrack.SysctlMax:                   "131072",
		conntrack.SysctlBuckets:               "32768",
		conntrack.SysctlTCPEstablishedTimeout: "86400",
		conntrack.SysctlTCPCloseWaitTimeout:   "3600",
	} {
		if got := readFake(t, root, name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	// Applying again changes nothing.
	changes, err = w.Apply(settings)
	if err != nil || len(changes) != 0 {
		t.Errorf("second Apply = %v, %v; want no change", changes, err)
	}
}

func TestSysctlWriterHashOnlyRaised(t *testing.T) {
	root := fakeSysctls(t, map[string]string{
		conntrack.SysctlMax:     "131072",
		conntrack.SysctlBuckets: "65536",
	})
	changes, err := conntrack.SysctlWriter{Root: root}.Apply([]conntrack.Setting{
		{Name: conntrack.SysctlMax, Value: 131072},
		{Name: conntrack.SysctlBuckets, Value: 32768, AtLeast: true},
	})
	if err != nil || len(changes) != 0 {
		t.Errorf("Apply = %v, %v; want no change (a larger hash is kept)", changes, err)
	}
	if got := readFake(t, root, conntrack.SysctlBuckets); got != "65536" {
		t.Errorf("buckets = %s, want 65536", got)
	}
}

func TestSysctlWriterErrors(t *testing.T) {
	root := fakeSysctls(t, map[string]string{
		conntrack.SysctlTCPEstablishedTimeout: "not a number",
		conntrack.SysctlUDPTimeout:            "30",
	})
	changes, err := conntrack.SysctlWriter{Root: root}.Apply([]conntrack.Setting{
		{Name: conntrack.SysctlMax, Value: 131072},                  // missing
		{Name: conntrack.SysctlTCPEstablishedTimeout, Value: 86400}, // garbage
		{Name: "../../etc/passwd", Value: 1},                        // escapes the root
		{Name: "/abs", Value: 1},                                    // absolute
		{Name: conntrack.SysctlUDPTimeout, Value: 60},               // fine: still written
	})
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v does not wrap ErrNotExist for the missing sysctl", err)
	}
	for _, want := range []string{"not an integer", `"../../etc/passwd": not a relative path`, `"/abs": not a relative path`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if diff := cmp.Diff([]conntrack.Change{{Name: conntrack.SysctlUDPTimeout, Old: 30, New: 60}}, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}
