package manifests

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/state"
)

// Input is one read of a manifests path by a Watcher. Its objects, and
// parts of them, are shared with the Inputs of later Reads: the caller must
// not modify them.
type Input struct {
	Objects  *state.Objects
	Warnings []svcproxy.Warning
	// PerFile is the number of objects (Services, EndpointSlices, Nodes
	// and ServiceCIDRs) read from each file, by base name. A file that holds none
	// is present with 0.
	PerFile map[string]int
}

// DefaultMaxFileSize is the largest manifest file a Watcher reads when
// its MaxFileSize is 0: 64 MiB, several times the manifests of 10,000
// Services with 10 endpoints each.
const DefaultMaxFileSize = 64 << 20

// Watcher decides when the manifests at a path have changed and settled,
// and reads them. It is not safe for concurrent use.
//
// Poll only stats the files (the list that Files gives, and each file's
// size and modification time: their signature). The manifests have
// settled when their signature has stayed the same for the settle
// interval: a file being written (an editor saving, cp, a script writing
// one document after the other) changes its size or modification time at
// each write, so it is read only once its writer has paused for longer
// than the settle interval. A writer that may pause longer, or stop
// half-way, must write a file of another name (one Files does not list,
// such as web.yaml.tmp) in the same directory and rename it over the
// manifest: rename is atomic, and the Watcher then sees the old file or
// the new one whole, never a part.
//
// Read reads, hashes and parses only the files whose size or modification
// time changed since the previous Read (the others' objects are kept), each
// as a stream, a document at a time, decoding only the documents whose
// bytes changed (the others' objects are kept too; a changed EndpointSlice
// shares what it has equal with the one of its name it replaces), and
// gives nothing to apply when no file's contents differ, so that a file
// touched or rewritten unchanged gives nothing, and the same broken
// contents give their error once. A file larger than MaxFileSize is an
// error naming it and its size, found before it is read.
type Watcher struct {
	// MaxFileSize is the size in bytes above which a file is refused; 0
	// means DefaultMaxFileSize, a negative size no limit.
	MaxFileSize int64

	path   string
	settle time.Duration

	seen      string    // the signature last seen
	seenSince time.Time // when Poll first saw it
	seenOnce  bool      // seen holds a signature
	read      string    // the signature at the last Read
	readOnce  bool      // read holds a signature
	hashOnce  bool      // hash holds the contents of a previous Read
	hash      [32]byte  // the contents of the previous Read
	// files is what the previous Read found in each file, by path.
	files map[string]*fileRead
}

// fileRead is what one Read found in one file.
type fileRead struct {
	stat     string   // its size and modification time
	hash     [32]byte // its contents
	objs     *state.Objects
	warnings []svcproxy.Warning
	err      error // why it could not be parsed; objs is nil then
	// docs is what each of its documents made, for the next parse of
	// the file to reuse (parse); after an error, the last parse's that
	// succeeded.
	docs docCache
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

// Read reads and parses the manifests, whether or not Poll said so: the
// files whose size or modification time changed since the previous Read.
// It returns a nil Input and no error when their contents (file names and
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
	reads := make(map[string]*fileRead, len(files))
	h := sha256.New()
	var firstErr error
	for _, f := range files {
		r, err := w.readFile(f)
		if err != nil {
			return nil, err
		}
		reads[f] = r
		fmt.Fprintf(h, "%s\x00", f)
		h.Write(r.hash[:])
		if r.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", filepath.Base(f), r.err)
		}
	}
	w.files = reads
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	if w.hashOnce && sum == w.hash {
		return nil, nil
	}
	w.hash, w.hashOnce = sum, true
	if firstErr != nil {
		return nil, firstErr
	}
	in := &Input{Objects: &state.Objects{}, PerFile: map[string]int{}}
	for _, f := range files {
		r := reads[f]
		in.Objects.Services = append(in.Objects.Services, r.objs.Services...)
		in.Objects.EndpointSlices = append(in.Objects.EndpointSlices, r.objs.EndpointSlices...)
		in.Objects.Nodes = append(in.Objects.Nodes, r.objs.Nodes...)
		in.Objects.ServiceCIDRs = append(in.Objects.ServiceCIDRs, r.objs.ServiceCIDRs...)
		in.Warnings = append(in.Warnings, r.warnings...)
		in.PerFile[filepath.Base(f)] = len(r.objs.Services) + len(r.objs.EndpointSlices) + len(r.objs.Nodes) + len(r.objs.ServiceCIDRs)
	}
	return in, nil
}

// readFile returns what file f holds: the previous Read's when its size
// and modification time are the same, else what it holds now, parsed
// only when its contents changed. The error is one that stops the Read
// (f cannot be read, or is too large); one of parsing is in the result.
func (w *Watcher) readFile(f string) (*fileRead, error) {
	info, err := os.Stat(f)
	if err != nil {
		return nil, err
	}
	limit := w.MaxFileSize
	if limit == 0 {
		limit = DefaultMaxFileSize
	}
	if limit > 0 && info.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the limit of %d: not read", filepath.Base(f), info.Size(), limit)
	}
	stat := fmt.Sprintf("%d %d", info.Size(), info.ModTime().UnixNano())
	prev := w.files[f]
	if prev != nil && prev.stat == stat {
		return prev, nil
	}
	hash, err := hashFile(f, limit)
	if err != nil {
		return nil, err
	}
	if prev != nil && prev.hash == hash {
		return &fileRead{stat: stat, hash: hash, objs: prev.objs, warnings: prev.warnings, err: prev.err, docs: prev.docs}, nil
	}
	var prevDocs docCache
	if prev != nil {
		prevDocs = prev.docs
	}
	return parseWatched(f, stat, limit, prevDocs)
}

// hashFile hashes file f as it streams it, failing when it holds more
// than limit bytes (no limit when negative): it may have grown since it
// was stated.
func hashFile(f string, limit int64) ([32]byte, error) {
	file, err := os.Open(f)
	if err != nil {
		return [32]byte{}, err
	}
	defer file.Close()
	h := sha256.New()
	if _, err := copyLimited(h, file, f, limit); err != nil {
		return [32]byte{}, err
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// parseWatched parses file f as a stream, a document at a time, and
// hashes what it parsed: the whole file, also when parsing failed (the
// error is in the result then). A document that prevDocs, what the last
// parse of f made, records is not decoded again. The error it returns
// stops the Read: f cannot be read, or holds more than limit bytes.
func parseWatched(f, stat string, limit int64, prevDocs docCache) (*fileRead, error) {
	file, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	h := sha256.New()
	counted := &countingWriter{w: h}
	var in io.Reader = file
	if limit >= 0 {
		in = io.LimitReader(file, limit+1)
	}
	r := io.TeeReader(in, counted)
	objs, docs := &state.Objects{}, make(docCache, len(prevDocs))
	warnings, perr := parse(objs, r, prevDocs, docs)
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	if limit >= 0 && counted.n > limit {
		return nil, fmt.Errorf("%s: more than the limit of %d bytes: not read", filepath.Base(f), limit)
	}
	read := &fileRead{stat: stat, objs: objs, warnings: warnings, docs: docs}
	if perr != nil {
		read.objs, read.warnings, read.err, read.docs = nil, nil, perr, prevDocs
	}
	h.Sum(read.hash[:0])
	return read, nil
}

// copyLimited copies r to w, failing when r holds more than limit bytes
// (no limit when negative); f names the file in that error.
func copyLimited(w io.Writer, r io.Reader, f string, limit int64) (int64, error) {
	if limit < 0 {
		return io.Copy(w, r)
	}
	n, err := io.Copy(w, io.LimitReader(r, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("%s: more than the limit of %d bytes: not read", filepath.Base(f), limit)
	}
	return n, err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
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
