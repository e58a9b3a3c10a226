package proxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/state"
)

const (
	// manifestPoll is how often the watcher stats the manifests.
	manifestPoll = 250 * time.Millisecond
	// manifestSettle is how long the manifests must stay unchanged (the
	// same files with the same sizes and modification times) before they
	// are read, so that a file being written is not applied half-way. The
	// writers it waits for (an editor saving, cp, a script writing one
	// document after the other) pause for far less between writes; and a
	// change is read at most manifestPoll + manifestSettle = 750 ms after
	// its last write, which with the read leaves the sync within the
	// documented --min-sync-period + 1 s.
	manifestSettle = 500 * time.Millisecond
)

// manifestWatcher decides when the manifests have changed and settled, and
// reads them. Between changes it only stats them; it reads and hashes their
// contents only when a stat changed.
type manifestWatcher struct {
	path   string
	settle time.Duration

	seen      string    // the signature last seen
	seenSince time.Time // when it was first seen
	read      string    // the signature when the contents were last read
	hash      [32]byte  // the contents last read
	// applied is the last input applied.
	applied *manifestInput
}

// manifestInput is one read of the manifests.
type manifestInput struct {
	objs     *manifests.Objects
	warnings []svcproxy.Warning
	// perFile is the number of objects in each file, by base name.
	perFile map[string]int
}

func newManifestWatcher(path string, settle time.Duration) *manifestWatcher {
	return &manifestWatcher{path: path, settle: settle}
}

// signature describes the manifests as stat sees them: each file's name,
// size and modification time, or the error that listing them gave.
func signature(path string) string {
	files, err := manifests.Files(path)
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", f, err)
			continue
		}
		fmt.Fprintf(&b, "%s %d %d\n", f, info.Size(), info.ModTime().UnixNano())
	}
	return b.String()
}

// poll stats the manifests at now and reports whether they should be read:
// they changed since the last read and have not changed for the settle
// interval.
func (w *manifestWatcher) poll(now time.Time) bool {
	sig := signature(w.path)
	if sig != w.seen {
		w.seen, w.seenSince = sig, now
		return false
	}
	return sig != w.read && now.Sub(w.seenSince) >= w.settle
}

// load reads and parses the manifests. It returns a nil input and no error
// when their contents are the same as at the last read (a file touched, or
// rewritten unchanged). An error names the file and, where it can, the
// object, as manifests.Load does; the same broken contents are reported
// once.
func (w *manifestWatcher) load() (*manifestInput, error) {
	if w.seen == "" {
		w.seen = signature(w.path)
	}
	w.read = w.seen
	files, err := manifests.Files(w.path)
	if err != nil {
		return nil, err
	}
	contents := make([][]byte, len(files))
	h := sha256.New()
	for i, f := range files {
		if contents[i], err = os.ReadFile(f); err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(contents[i]))
		h.Write(contents[i])
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	if w.applied != nil && sum == w.hash {
		return nil, nil
	}
	w.hash = sum
	in := &manifestInput{objs: &manifests.Objects{}, perFile: map[string]int{}}
	for i, f := range files {
		objs, warnings, err := manifests.Parse(contents[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		in.objs.Services = append(in.objs.Services, objs.Services...)
		in.objs.EndpointSlices = append(in.objs.EndpointSlices, objs.EndpointSlices...)
		in.objs.Nodes = append(in.objs.Nodes, objs.Nodes...)
		in.warnings = append(in.warnings, warnings...)
		in.perFile[filepath.Base(f)] = len(objs.Services) + len(objs.EndpointSlices) + len(objs.Nodes)
	}
	return in, nil
}

// losses names the files of before that are gone from after, or hold less
// than half of the objects they held, with their counts: "a.yaml: 20 → 0
// objects".
func losses(before, after *manifestInput) []string {
	if before == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(before.perFile)) {
		was, now := before.perFile[name], after.perFile[name]
		if was > 0 && 2*now < was {
			out = append(out, fmt.Sprintf("%s: %d → %d objects", name, was, now))
		}
	}
	return out
}

// counts is the number of Services, EndpointSlices and Nodes of in, for
// the reload log.
func (in *manifestInput) counts() [3]int {
	if in == nil {
		return [3]int{}
	}
	return [3]int{len(in.objs.Services), len(in.objs.EndpointSlices), len(in.objs.Nodes)}
}

// watch polls the manifests until ctx is done and applies them when they
// changed and settled: it logs what changed by count, warns about files
// that lost most of their objects, and asks for a sync. A broken input is
// reported and counted, and ignored: the rules stay as they were.
func (p *proxy) watch(ctx context.Context, w *manifestWatcher, poll time.Duration) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !w.poll(time.Now()) {
			continue
		}
		in, err := w.load()
		if err != nil {
			p.metrics.manifestErrors.Inc()
			p.log.Error(fmt.Sprintf("bad manifests: %v: keeping the rules as they are", err))
			continue
		}
		if in != nil {
			p.applyManifests(w, in)
		}
	}
}

// applyManifests replaces the state with in and asks for a sync.
func (p *proxy) applyManifests(w *manifestWatcher, in *manifestInput) {
	for _, loss := range losses(w.applied, in) {
		p.log.Warn("manifest file lost most of its objects; applying it as it is", "file", loss)
	}
	before, after := w.applied.counts(), in.counts()
	p.log.Info("manifests reloaded",
		"services", fmt.Sprintf("%d → %d", before[0], after[0]),
		"endpointSlices", fmt.Sprintf("%d → %d", before[1], after[1]),
		"nodes", fmt.Sprintf("%d → %d", before[2], after[2]))
	w.applied = in
	p.metrics.manifestReloads.Inc()
	p.logWarnings(append(in.warnings, p.state.Replace(stateObjects(in.objs))...))
	p.request()
}

// stateObjects are the objects of a manifests input, for State.Replace.
func stateObjects(o *manifests.Objects) state.Objects {
	return state.Objects{Services: o.Services, EndpointSlices: o.EndpointSlices, Nodes: o.Nodes}
}
