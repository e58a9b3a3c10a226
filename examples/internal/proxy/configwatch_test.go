package proxy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestConfigWatcher: as kube-proxy's, a write to the --config file or a
// rename of it stops the proxy with errConfigChanged and a log line naming
// the file and the change; a chmod does not, nor a change before the
// watch ends (ctx done).
func TestConfigWatcher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(path string) error
		stops  bool
		event  string
	}{
		{"write", func(p string) error { return os.WriteFile(p, []byte("mode: nftables\n"), 0o644) }, true, "WRITE"},
		{"rename", func(p string) error { return os.Rename(p, p+".old") }, true, "RENAME"},
		{"chmod", func(p string) error { return os.Chmod(p, 0o600) }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte("mode: iptables\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			w, err := watchConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			var log syncBuffer
			ctx, stop := context.WithCancelCause(context.Background())
			defer stop(nil)
			done := make(chan struct{})
			go func() { w.run(ctx, slog.New(slog.NewTextHandler(&log, nil)), stop); close(done) }()
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ctx.Done():
				if !tc.stops {
					t.Fatalf("stopped by %v; a %s is no change", context.Cause(ctx), tc.name)
				}
				if !errors.Is(context.Cause(ctx), errConfigChanged) {
					t.Errorf("cause %v; want errConfigChanged", context.Cause(ctx))
				}
				<-done
				for _, want := range []string{"configuration file changed", "file=" + path, "event=" + tc.event} {
					if !strings.Contains(log.String(), want) {
						t.Errorf("log %q lacks %q", log.String(), want)
					}
				}
			case <-time.After(500 * time.Millisecond):
				if tc.stops {
					t.Fatalf("not stopped 500ms after a %s", tc.name)
				}
				stop(nil)
				<-done
				if context.Cause(ctx) != context.Canceled {
					t.Errorf("cause %v after the test's stop", context.Cause(ctx))
				}
			}
		})
	}
	if _, err := watchConfig(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("watching a file that does not exist: no error")
	}
}

// TestStopCode: a proxy stopped by a signal exits 0, one stopped because
// its configuration changed exits 1, as kube-proxy.
func TestStopCode(t *testing.T) {
	signal, stop := context.WithCancelCause(context.Background())
	stop(nil)
	changed, stop2 := context.WithCancelCause(context.Background())
	stop2(errConfigChanged)
	if got := stopCode(signal); got != exitOK {
		t.Errorf("signal: exit %d, want %d", got, exitOK)
	}
	if got := stopCode(changed); got != exitFailed || exitFailed != 1 {
		t.Errorf("config changed: exit %d, want 1", got)
	}
}
