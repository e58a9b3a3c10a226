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

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
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
	in, err := w.Read()
	if err != nil {
		t.Fatal(err)
	}
	w.applied = in
	// The file has no Node: Replace warns about that, once.
	ws := p.state.Replace(*in.Objects)
	warnings.Check(t, "Node", "", "n1", ws, []string{"no Node of this name among the objects"})
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
	if !strings.Contains(logs.String(), `services="21 → 0" endpointSlices="0 → 0" nodes="0 → 0" servicesRemoved=21`) {
		t.Errorf("no reload log with the Services removed:\n%s", logs.String())
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
	if _, err := w.Read(); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ResetTimer()
	for i := range b.N {
		if w.Poll(now.Add(time.Duration(i) * manifestPoll)) {
			b.Fatal("an unchanged file was read again")
		}
	}
}
