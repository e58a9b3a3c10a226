package manifests

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/state"
)

// Input is one read of a manifests path by a Watcher.
type Input struct {
	Objects  *state.Objects
	Warnings []svcproxy.Warning
	// PerFile is the number of objects (Services, EndpointSlices, Nodes
	// and ServiceCIDRs) read from each file, by base name. A file that holds none
	// is present with 0.
	PerFile map[string]int
}

// Watcher decides when the manifests at a path have changed and settled,
// and reads them. It is not safe for concurrent use.
//
// Poll only stats the files (the list that Files gives, and each file's
// size and modification time: their signature). The manifests have
// settled when their signature has stayed the same for the settle
// interval: a file being written (an editor saving, cp, a script writing
// one document after the other) changes its size or modification time at
// each write, so it is read only once its writer has paused for longer
// than the settle interval. Read reads and hashes the contents and parses
// them only when they differ from the previous Read's, so that a file
// touched or rewritten unchanged gives nothing to apply, and the same
// broken contents give their error once.
type Watcher struct {
	path   string
	settle time.Duration

	seen      string    // the signature last seen
	seenSince time.Time // when Poll first saw it
	seenOnce  bool      // seen holds a signature
	read      string    // the signature at the last Read
	readOnce  bool      // read holds a signature
	hashOnce  bool      // hash holds the contents of a previous Read
	hash      [32]byte  // the contents of the previous Read
}

// NewWatcher returns a Watcher of the file or directory at path (read as
// Load reads it) that waits for its manifests to stay unchanged for settle
// before it says they should be read. It reads nothing yet.
func NewWatcher(path string, settle time.Duration) *Watcher {
	return &Watcher{path: path, settle: settle}
}

// Poll stats the manifests at now and reports whether they should be read:
// their signature differs from the one at the last Read (or there was no
// Read) and has not changed in the settle interval before now. A change
// first seen at time t is reported by the first Poll at or after t+settle
// that sees the same signature. Poll takes the time so that callers and
// tests choose the clock; successive calls must not go back in time.
func (w *Watcher) Poll(now time.Time) bool {
	if w == nil {
		return false
	}
	sig := signature(w.path)
	if !w.seenOnce || sig != w.seen {
		w.seen, w.seenSince, w.seenOnce = sig, now, true
		return false
	}
	return (!w.readOnce || sig != w.read) && now.Sub(w.seenSince) >= w.settle
}

// Read reads and parses the manifests, whether or not Poll said so. It
// returns a nil Input and no error when their contents (file names and
// bytes) are those of the previous Read, whether that one succeeded or
// failed: a touched file gives nothing new, and broken contents give
// their error once. An error names the file and, where it can, the object,
// as Load's does; nothing of a broken input is returned.
func (w *Watcher) Read() (*Input, error) {
	if w == nil {
		return nil, errors.New("manifests: nil Watcher")
	}
	if !w.seenOnce {
		w.seen, w.seenOnce = signature(w.path), true
	}
	w.read, w.readOnce = w.seen, true
	files, err := Files(w.path)
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
	if w.hashOnce && sum == w.hash {
		return nil, nil
	}
	w.hash, w.hashOnce = sum, true
	return parseFiles(files, contents)
}

// parseFiles parses the contents of each of files into one Input.
func parseFiles(files []string, contents [][]byte) (*Input, error) {
	in := &Input{Objects: &state.Objects{}, PerFile: map[string]int{}}
	for i, f := range files {
		objs, warnings, err := Parse(contents[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		in.Objects.Services = append(in.Objects.Services, objs.Services...)
		in.Objects.EndpointSlices = append(in.Objects.EndpointSlices, objs.EndpointSlices...)
		in.Objects.Nodes = append(in.Objects.Nodes, objs.Nodes...)
		in.Objects.ServiceCIDRs = append(in.Objects.ServiceCIDRs, objs.ServiceCIDRs...)
		in.Warnings = append(in.Warnings, warnings...)
		in.PerFile[filepath.Base(f)] = len(objs.Services) + len(objs.EndpointSlices) + len(objs.Nodes) + len(objs.ServiceCIDRs)
	}
	return in, nil
}

// Watch polls the manifests every poll interval, on the wall clock, until
// ctx is done. When Poll says they should be read it calls Read, then
// onInput with a new Input or onError with its error; neither is called
// when the contents are unchanged. Both are called on Watch's goroutine,
// one at a time. A caller that read the manifests with Read before gets
// only the changes since; one that did not gets its first Input after the
// settle interval.
func (w *Watcher) Watch(ctx context.Context, poll time.Duration, onInput func(*Input), onError func(error)) {
	if w == nil || poll <= 0 {
		if onError != nil {
			onError(fmt.Errorf("manifests: Watch of a nil Watcher, or a poll interval of %v", poll))
		}
		return
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !w.Poll(time.Now()) {
			continue
		}
		switch in, err := w.Read(); {
		case err != nil && onError != nil:
			onError(err)
		case err == nil && in != nil && onInput != nil:
			onInput(in)
		}
	}
}

// Losses names the files of before that are gone from after, or hold less
// than half of the objects they held, with their counts, in name order:
// "a.yaml: 20 → 0 objects". A caller may warn about them: a file that lost
// most of its objects is more often a mistake than a wish. A nil before
// (the first input) has no losses.
func Losses(before, after *Input) []string {
	if before == nil || after == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(before.PerFile)) {
		was, now := before.PerFile[name], after.PerFile[name]
		if was > 0 && 2*now < was {
			out = append(out, fmt.Sprintf("%s: %d → %d objects", name, was, now))
		}
	}
	return out
}

// signature describes the manifests as stat sees them: each file's name,
// size and modification time, or the error that listing or stating them
// gave.
func signature(path string) string {
	files, err := Files(path)
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
