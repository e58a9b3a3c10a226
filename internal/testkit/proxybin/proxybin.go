// Package proxybin builds the reference proxies (examples/NAME-proxy) for
// tests that run them as processes: each once per test binary, into a
// temporary directory that Remove deletes.
package proxybin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Builds holds the binaries one test binary built. Its zero value is not
// usable: make it with New.
type Builds struct {
	prefix string

	mu   sync.Mutex
	dir  string            // made on the first build
	bins map[string]string // proxy name → binary
}

// New returns Builds whose directory's name starts with prefix.
func New(prefix string) *Builds {
	return &Builds{prefix: prefix, bins: map[string]string{}}
}

// Binary returns the path of examples/NAME-proxy, built on first use; a
// failed build fails tb.
func (b *Builds) Binary(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := b.build(name)
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

func (b *Builds) build(name string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bin, ok := b.bins[name]; ok {
		return bin, nil
	}
	if b.dir == "" {
		dir, err := os.MkdirTemp("", b.prefix)
		if err != nil {
			return "", fmt.Errorf("building %s-proxy: %w", name, err)
		}
		b.dir = dir
	}
	bin := filepath.Join(b.dir, name+"-proxy")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/"+name+"-proxy")
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s-proxy: %w\n%s", name, err, out)
	}
	b.bins[name] = bin
	return bin, nil
}

// Remove deletes the binaries built so far.
func (b *Builds) Remove() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" {
		return nil
	}
	err := os.RemoveAll(b.dir)
	b.dir, b.bins = "", map[string]string{}
	return err
}

// repoRoot is the module's root: three directories above this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
