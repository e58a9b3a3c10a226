package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// serviceDocs is n Service documents of a multi-document YAML file, each
// ending with its separator.
func serviceDocs(first, n int) []string {
	var docs []string
	for i := first; i < first+n; i++ {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {namespace: ns, name: s%d}\n"+
			"spec:\n  clusterIP: 198.19.1.%d\n  ports: [{name: p, port: 80}]\n---\n", i, i))
	}
	return docs
}

// TestManifestWatcher drives the watcher with a fake clock (the file's
// modification times are real): what each poll decides, and what each read
// finds.
func TestManifestWatcher(t *testing.T) {
	const settle = 500 * time.Millisecond
	type step struct {
		at    time.Duration // poll time
		write func(path string) error
		// wantRead: the poll says read; then the read finds wantServices
		// Services, or nothing new when wantServices is -1, or fails
		// when wantErr.
		wantRead     bool
		wantServices int
		wantErr      bool
	}
	appendDocs := func(docs ...string) func(string) error {
		return func(path string) error {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(strings.Join(docs, ""))
			return err
		}
	}
	replace := func(content string) func(string) error {
		return func(path string) error { return os.WriteFile(path, []byte(content), 0o644) }
	}
	touch := func(path string) error {
		return os.Chtimes(path, time.Time{}, time.Now().Add(time.Hour))
	}
	pieces := serviceDocs(1, 20)
	ms := time.Millisecond
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"written in pieces: read once, whole, after it settled", []step{
			{at: 0, write: appendDocs(pieces[0:5]...)},
			{at: 300 * ms},
			{at: 400 * ms, write: appendDocs(pieces[5:10]...)},
			{at: 800 * ms, write: appendDocs(pieces[10:15]...)},
			{at: 1200 * ms, write: appendDocs(pieces[15:20]...)},
			{at: 1600 * ms},
			{at: 1699 * ms},
			{at: 1700 * ms, wantRead: true, wantServices: 21},
			{at: 2500 * ms},
		}},
		{"touched, contents unchanged: read, nothing new", []step{
			{at: 0, write: touch},
			{at: 500 * ms, wantRead: true, wantServices: -1},
			{at: 1000 * ms},
		}},
		{"emptied: applied only after it settled", []step{
			{at: 0, write: replace("")},
			{at: 250 * ms},
			{at: 500 * ms, wantRead: true, wantServices: 0},
		}},
		{"broken: reported once, read again when it changes", []step{
			{at: 0, write: replace("kind: [")},
			{at: 500 * ms, wantRead: true, wantErr: true},
			{at: 1000 * ms},
			{at: 1250 * ms, write: replace(goodService)},
			{at: 1750 * ms, wantRead: true, wantServices: 1},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "services.yaml")
			if err := os.WriteFile(path, []byte(goodService+"---\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			w := newManifestWatcher(path, settle)
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			in, err := w.load()
			if err != nil {
				t.Fatal(err)
			}
			w.applied = in
			for i, st := range tt.steps {
				if st.write != nil {
					if err := st.write(path); err != nil {
						t.Fatal(err)
					}
				}
				if got := w.poll(t0.Add(st.at)); got != st.wantRead {
					t.Fatalf("step %d (%v): poll says read %v, want %v", i, st.at, got, st.wantRead)
				}
				if !st.wantRead {
					continue
				}
				in, err := w.load()
				switch {
				case st.wantErr:
					if err == nil || !strings.HasPrefix(err.Error(), "services.yaml: ") {
						t.Errorf("step %d: read error %v, want one naming services.yaml", i, err)
					}
				case err != nil:
					t.Fatalf("step %d: %v", i, err)
				case st.wantServices < 0 && in != nil:
					t.Errorf("step %d: read %d Services, want nothing new", i, len(in.objs.Services))
				case st.wantServices >= 0 && (in == nil || len(in.objs.Services) != st.wantServices):
					t.Errorf("step %d: read %+v, want %d Services", i, in, st.wantServices)
				}
				if in != nil {
					w.applied = in
				}
			}
		})
	}
}

func TestLosses(t *testing.T) {
	input := func(perFile map[string]int) *manifestInput { return &manifestInput{perFile: perFile} }
	for _, tt := range []struct {
		name          string
		before, after *manifestInput
		want          []string
	}{
		{"first read", nil, input(map[string]int{"a.yaml": 3}), nil},
		{"emptied", input(map[string]int{"a.yaml": 20, "b.yaml": 4}), input(map[string]int{"a.yaml": 0, "b.yaml": 4}),
			[]string{"a.yaml: 20 → 0 objects"}},
		{"removed", input(map[string]int{"a.yaml": 2}), input(map[string]int{}), []string{"a.yaml: 2 → 0 objects"}},
		{"most lost", input(map[string]int{"a.yaml": 20}), input(map[string]int{"a.yaml": 5}), []string{"a.yaml: 20 → 5 objects"}},
		{"half kept", input(map[string]int{"a.yaml": 20}), input(map[string]int{"a.yaml": 10}), nil},
		{"was empty", input(map[string]int{"a.yaml": 0}), input(map[string]int{}), nil},
	} {
		if diff := cmp.Diff(tt.want, losses(tt.before, tt.after)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// syncedCounts is the number of Services in each Ruleset the backend
// synced.
func (b *fakeBackend) syncedCounts() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, rs := range b.synced {
		out = append(out, len(rs.Services()))
	}
	return out
}

// TestWatchAppliesSettledFilesOnly runs the watcher, polling every 50 ms
// with a settle interval of 1 s, against a file that a writer appends 20
// Services to, one every 20 ms with a pause of 400 ms (8 polls) after the
// tenth: no sync ever sees a part of them. Emptying the file is
// applied with a warning naming it, and a broken file is counted.
func TestWatchAppliesSettledFilesOnly(t *testing.T) {
	backend := &fakeBackend{family: v1.IPv4Protocol}
	p, eng := testProxy(t, backend)
	var logs logBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	path := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(goodService+"---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const poll, settle = 50 * time.Millisecond, time.Second
	w := newManifestWatcher(path, settle)
	in, err := w.load()
	if err != nil {
		t.Fatal(err)
	}
	w.applied = in
	p.state.Replace(stateObjects(in.objs))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); eng.Run(ctx) }()
	go func() { defer wg.Done(); p.watch(ctx, w, poll) }()
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, 2*time.Second, "the first sync", func() bool { return len(backend.syncedCounts()) == 1 })

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range serviceDocs(1, 20) {
		if _, err := f.WriteString(doc); err != nil {
			t.Fatal(err)
		}
		pause := 20 * time.Millisecond
		if i == 9 {
			pause = 8 * poll
		}
		time.Sleep(pause)
	}
	f.Close()
	waitFor(t, 3*time.Second, "the sync of the whole file", func() bool { return len(backend.syncedCounts()) == 2 })
	time.Sleep(settle) // room for a wrong extra sync
	if diff := cmp.Diff([]int{1, 21}, backend.syncedCounts()); diff != "" {
		t.Errorf("Services per sync (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), `msg="manifests reloaded" services="1 → 21" endpointSlices="0 → 0" nodes="0 → 0"`) {
		t.Errorf("no reload log with the counts:\n%s", logs.String())
	}

	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the sync of the emptied file", func() bool { return len(backend.syncedCounts()) == 3 })
	if !strings.Contains(logs.String(), `level=WARN msg="manifest file lost most of its objects; applying it as it is" file="services.yaml: 21 → 0 objects"`) {
		t.Errorf("no warning naming the emptied file:\n%s", logs.String())
	}

	if err := os.WriteFile(path, []byte("kind: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the broken file counted", func() bool {
		return counterValue(t, p.metrics, "svcproxy_manifest_errors_total") == 1
	})
	if got := counterValue(t, p.metrics, "svcproxy_manifest_reloads_total"); got != 2 {
		t.Errorf("svcproxy_manifest_reloads_total = %v, want 2", got)
	}
}

// logBuffer collects log output written from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// BenchmarkManifestWatcherIdlePoll is the cost of one poll of an unchanged
// file of SVCPROXY_BENCH_SERVICES Services (default 10,000): a stat, no
// read. The watcher polls 4 times a second.
func BenchmarkManifestWatcherIdlePoll(b *testing.B) {
	n := 10000
	if v := os.Getenv("SVCPROXY_BENCH_SERVICES"); v != "" {
		fmt.Sscan(v, &n)
	}
	path := filepath.Join(b.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(serviceDocs(0, n), "")), 0o644); err != nil {
		b.Fatal(err)
	}
	w := newManifestWatcher(path, manifestSettle)
	if _, err := w.load(); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ResetTimer()
	for i := range b.N {
		if w.poll(now.Add(time.Duration(i) * manifestPoll)) {
			b.Fatal("an unchanged file was read again")
		}
	}
}
