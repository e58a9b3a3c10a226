package manifests_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/manifests"
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

// oneService is the contents of a file holding one Service.
var oneService = serviceDocs(0, 1)[0]

// watchedFile writes contents to a new file and returns its path.
func watchedFile(t testing.TB, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(contents), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// watchStep is one poll of TestWatcher at a fake time, after an optional
// write.
type watchStep struct {
	at    time.Duration
	write func(path string) error
	// wantRead: the poll says read; then the read finds wantServices
	// Services, or nothing new when wantServices is -1, or fails when
	// wantErr.
	wantRead     bool
	wantServices int
	wantErr      bool
}

func appendDocs(docs ...string) func(string) error {
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

func replaceWith(contents string) func(string) error {
	return func(path string) error { return os.WriteFile(path, []byte(contents), 0o644) }
}

func touch(path string) error { return os.Chtimes(path, time.Time{}, time.Now().Add(time.Hour)) }

// TestWatcher drives the Watcher with a fake clock (the file's modification
// times are real), after a first Read of a file holding one Service: what
// each poll decides, and what each read finds.
func TestWatcher(t *testing.T) {
	const settle = 500 * time.Millisecond
	pieces := serviceDocs(1, 20)
	ms := time.Millisecond
	for _, tt := range []struct {
		name  string
		steps []watchStep
	}{
		{"unchanged: never read", []watchStep{{at: 0}, {at: 500 * ms}, {at: 5000 * ms}}},
		{"written in pieces: read once, whole, after it settled", []watchStep{
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
		{"touched, contents unchanged: read, nothing new", []watchStep{
			{at: 0, write: touch},
			{at: 500 * ms, wantRead: true, wantServices: -1},
			{at: 1000 * ms},
		}},
		{"emptied: applied only after it settled", []watchStep{
			{at: 0, write: replaceWith("")},
			{at: 250 * ms},
			{at: 500 * ms, wantRead: true, wantServices: 0},
		}},
		{"broken: reported once, read again when it changes", []watchStep{
			{at: 0, write: replaceWith("kind: [")},
			{at: 500 * ms, wantRead: true, wantErr: true},
			{at: 1000 * ms},
			{at: 1250 * ms, write: touch},
			{at: 1750 * ms, wantRead: true, wantServices: -1},
			{at: 2000 * ms, write: replaceWith(oneService + oneService)},
			{at: 2500 * ms, wantRead: true, wantServices: 2},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := watchedFile(t, oneService)
			w := manifests.NewWatcher(path, settle)
			if in, err := w.Read(); err != nil || in == nil || len(in.Objects.Services) != 1 {
				t.Fatalf("first Read = %+v, %v; want 1 Service", in, err)
			}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, st := range tt.steps {
				if st.write != nil {
					if err := st.write(path); err != nil {
						t.Fatal(err)
					}
				}
				if got := w.Poll(t0.Add(st.at)); got != st.wantRead {
					t.Fatalf("step %d (%v): Poll says read %v, want %v", i, st.at, got, st.wantRead)
				}
				if st.wantRead {
					checkRead(t, i, w, st)
				}
			}
		})
	}
}

// checkRead reads with w and checks the result against st.
func checkRead(t *testing.T, i int, w *manifests.Watcher, st watchStep) {
	t.Helper()
	in, err := w.Read()
	switch {
	case st.wantErr:
		if err == nil || !strings.HasPrefix(err.Error(), "services.yaml: ") {
			t.Errorf("step %d: Read error %v, want one naming services.yaml", i, err)
		}
	case err != nil:
		t.Fatalf("step %d: %v", i, err)
	case st.wantServices < 0 && in != nil:
		t.Errorf("step %d: Read %d Services, want nothing new", i, len(in.Objects.Services))
	case st.wantServices >= 0 && (in == nil || len(in.Objects.Services) != st.wantServices):
		t.Errorf("step %d: Read %+v, want %d Services", i, in, st.wantServices)
	}
}

// TestWatcherWithoutFirstRead: a Watcher that was never read says read once
// the manifests settled, even when their signature is empty (an empty
// directory), and a path that does not exist gives its error once.
func TestWatcherWithoutFirstRead(t *testing.T) {
	const settle = time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		path    func(t *testing.T) string
		wantErr bool
	}{
		{"file", func(t *testing.T) string { return watchedFile(t, oneService) }, false},
		{"empty directory", func(t *testing.T) string { return t.TempDir() }, false},
		{"missing path", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := manifests.NewWatcher(tt.path(t), settle)
			for _, at := range []time.Duration{0, settle - 1} {
				if w.Poll(t0.Add(at)) {
					t.Fatalf("Poll at %v says read before the settle interval", at)
				}
			}
			if !w.Poll(t0.Add(settle)) {
				t.Fatal("Poll after the settle interval does not say read")
			}
			in, err := w.Read()
			if gotErr := err != nil; gotErr != tt.wantErr || (!tt.wantErr && in == nil) {
				t.Fatalf("Read = %+v, %v; want an Input: %v, an error: %v", in, err, !tt.wantErr, tt.wantErr)
			}
			if w.Poll(t0.Add(10 * settle)) {
				t.Error("Poll says read again with nothing changed")
			}
		})
	}
}

func TestLosses(t *testing.T) {
	input := func(perFile map[string]int) *manifests.Input { return &manifests.Input{PerFile: perFile} }
	for _, tt := range []struct {
		name          string
		before, after *manifests.Input
		want          []string
	}{
		{"first read", nil, input(map[string]int{"a.yaml": 3}), nil},
		{"emptied", input(map[string]int{"a.yaml": 20, "b.yaml": 4}), input(map[string]int{"a.yaml": 0, "b.yaml": 4}),
			[]string{"a.yaml: 20 → 0 objects"}},
		{"removed", input(map[string]int{"a.yaml": 2}), input(map[string]int{}), []string{"a.yaml: 2 → 0 objects"}},
		{"most lost", input(map[string]int{"a.yaml": 20}), input(map[string]int{"a.yaml": 5}), []string{"a.yaml: 20 → 5 objects"}},
		{"two files, name order", input(map[string]int{"b.yaml": 2, "a.yaml": 2}), input(map[string]int{}),
			[]string{"a.yaml: 2 → 0 objects", "b.yaml: 2 → 0 objects"}},
		{"half kept", input(map[string]int{"a.yaml": 20}), input(map[string]int{"a.yaml": 10}), nil},
		{"was empty", input(map[string]int{"a.yaml": 0}), input(map[string]int{}), nil},
	} {
		if diff := cmp.Diff(tt.want, manifests.Losses(tt.before, tt.after)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestWatch runs the loop on the wall clock (polling every 10 ms, settle
// 100 ms) over a file that is rewritten, broken, touched and fixed: each
// change reaches onInput or onError once, and the loop ends with ctx.
func TestWatch(t *testing.T) {
	path := watchedFile(t, oneService)
	w := manifests.NewWatcher(path, 100*time.Millisecond)
	if _, err := w.Read(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []string
	record := func(s string) { mu.Lock(); defer mu.Unlock(); events = append(events, s) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Watch(ctx, 10*time.Millisecond,
			func(in *manifests.Input) { record(fmt.Sprintf("%d Services", len(in.Objects.Services))) },
			func(err error) { record("error") })
	}()
	for _, write := range []func(string) error{
		replaceWith(oneService + oneService), replaceWith("kind: ["), touch, replaceWith(oneService),
	} {
		if err := write(path); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // settle, and room for a wrong extra event
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Watch did not return within 2 s of its context's end")
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"2 Services", "error", "1 Services"}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestWatcherParsesChangedFilesOnly: a Read after one file of a directory
// changed keeps the objects of the others as they were (the same
// pointers: not parsed again), and of the changed file's documents it
// decodes only those that changed: the others keep their objects, the
// new and the changed ones have new objects.
func TestWatcherParsesChangedFilesOnly(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	for path, contents := range map[string]string{a: strings.Join(serviceDocs(0, 2), ""), b: strings.Join(serviceDocs(2, 2), "")} {
		if err := os.WriteFile(path, []byte(contents), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w := manifests.NewWatcher(dir, 0)
	first, err := w.Read()
	if err != nil || first == nil || len(first.Objects.Services) != 4 {
		t.Fatalf("first Read: %+v, %v", first, err)
	}
	// b.yaml: s2 changed (another port), s3 as it was, s4 new.
	docs := serviceDocs(2, 3)
	docs[0] = strings.Replace(docs[0], "port: 80", "port: 81", 1)
	if err := os.WriteFile(b, []byte(strings.Join(docs, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := w.Read()
	if err != nil || next == nil || len(next.Objects.Services) != 5 {
		t.Fatalf("Read after b.yaml changed: %+v, %v", next, err)
	}
	for i, same := range []bool{true, true, false, true} {
		if got := next.Objects.Services[i] == first.Objects.Services[i]; got != same {
			t.Errorf("Service %s: the same object %v, want %v", next.Objects.Services[i].Name, got, same)
		}
	}
	if p := next.Objects.Services[2].Spec.Ports[0].Port; p != 81 {
		t.Errorf("the changed s2 has port %d, want 81", p)
	}
	if name := next.Objects.Services[4].Name; name != "s4" {
		t.Errorf("the new document's Service is %s, want s4", name)
	}
}

// sliceDoc is an EndpointSlice document of Service web with an endpoint
// on node-a at each of addrs.
func sliceDoc(name string, addrs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  namespace: ns\n  name: %s\n"+
		"  labels: {kubernetes.io/service-name: web}\naddressType: IPv4\nports: [{name: p, port: 8080, protocol: TCP}]\nendpoints:\n", name)
	for _, a := range addrs {
		fmt.Fprintf(&b, "- addresses: [%s]\n  conditions: {ready: true}\n  nodeName: node-a\n", a)
	}
	return b.String() + "---\n"
}

// TestWatcherSharesUnchangedParts: an EndpointSlice whose document changed
// is decoded again, and holds what the Parse of the file holds, but shares
// with the previous one of its name the parts that are equal (labels,
// ports, each endpoint equal at the same index), and not the ones that
// changed; another slice shares nothing with it.
func TestWatcherSharesUnchangedParts(t *testing.T) {
	before := sliceDoc("web-1", "198.18.64.2", "198.18.64.3") + sliceDoc("web-2", "198.18.64.4")
	after := sliceDoc("web-1", "198.18.64.2", "198.18.64.9") + sliceDoc("web-2", "198.18.64.4", "198.18.64.5")
	path := watchedFile(t, before)
	w := manifests.NewWatcher(path, 0)
	first, err := w.Read()
	if err != nil || first == nil {
		t.Fatalf("first Read: %+v, %v", first, err)
	}
	if err := os.WriteFile(path, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	next, err := w.Read()
	if err != nil || next == nil {
		t.Fatalf("Read after the change: %+v, %v", next, err)
	}
	parsed, _, err := manifests.Parse([]byte(after))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(parsed.EndpointSlices, next.Objects.EndpointSlices); diff != "" {
		t.Errorf("the Watcher's slices differ from Parse's (-Parse +Watcher):\n%s", diff)
	}
	old, now := first.Objects.EndpointSlices, next.Objects.EndpointSlices
	for _, c := range []struct {
		what       string
		got, share bool
	}{
		{"web-1 is a new object", now[0] != old[0], true},
		{"web-1's labels", fmt.Sprintf("%p", now[0].Labels) == fmt.Sprintf("%p", old[0].Labels), true},
		{"web-1's ports", &now[0].Ports[0] == &old[0].Ports[0], true},
		{"web-1's unchanged endpoint's node name", now[0].Endpoints[0].NodeName == old[0].Endpoints[0].NodeName, true},
		{"web-1's changed endpoint's node name", now[0].Endpoints[1].NodeName == old[0].Endpoints[1].NodeName, false},
		{"web-1's and web-2's first endpoint's node name", now[0].Endpoints[0].NodeName == now[1].Endpoints[0].NodeName, false},
		{"web-2's unchanged endpoint's node name", now[1].Endpoints[0].NodeName == old[1].Endpoints[0].NodeName, true},
	} {
		if c.got != c.share {
			t.Errorf("%s: shared %v, want %v", c.what, c.got, c.share)
		}
	}
}

// TestWatcherMaxFileSize: a file larger than MaxFileSize is a one-line
// error naming it and its size, and its objects are not applied; once
// within the limit it is read.
func TestWatcherMaxFileSize(t *testing.T) {
	contents := strings.Join(serviceDocs(0, 10), "")
	path := watchedFile(t, contents)
	w := manifests.NewWatcher(path, 0)
	w.MaxFileSize = int64(len(contents)) - 1
	in, err := w.Read()
	want := fmt.Sprintf("services.yaml: %d bytes, more than the limit of %d: not read", len(contents), len(contents)-1)
	if in != nil || err == nil || err.Error() != want {
		t.Fatalf("Read of a file 1 byte too large: %v, %v; want the error %q", in, err, want)
	}
	if err := os.WriteFile(path, []byte(contents+"\n"), 0o644); err != nil { // a new size, so that it is read again
		t.Fatal(err)
	}
	w.MaxFileSize = int64(len(contents)) + 1
	if in, err := w.Read(); err != nil || in == nil || len(in.Objects.Services) != 10 {
		t.Fatalf("Read within the limit: %v, %v", in, err)
	}
}
