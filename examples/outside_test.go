package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// maxOutsideLines is the size that issue 12 sets for a per-node table
// written outside the module on the public packages.
const maxOutsideLines = 60

// TestOutsideNodeTable builds and runs examples/outside/nodetable, a module
// of its own that uses svcproxy through a replace directive, offline (its
// go.sum must be complete), on the demo manifests; it checks the table, that
// the run left go.mod and go.sum as they were, and the program's length.
func TestOutsideNodeTable(t *testing.T) {
	dir := filepath.Join("outside", "nodetable")
	goMod, goSum := readFile(t, filepath.Join(dir, "go.mod")), readFile(t, filepath.Join(dir, "go.sum"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", ".", filepath.Join("..", "..", "demo", "manifests"), "node-a")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run in %s: %v\n%s", dir, err, stderr.String())
	}
	// From outside: the Local node port of demo/shop reaches only its local
	// endpoint; demo/api has none on node-a and drops; its load-balancer IP
	// has source ranges that an arbitrary client is not in.
	want := `node port 30443/TCP    demo/api:https     dropped
198.19.0.50:443/TCP    demo/api:https     forwarded 198.18.2.51:8443=1
198.19.100.1:443/TCP   demo/api:https     dropped by the source-range firewall
198.19.0.30:80/TCP     demo/cart:http     forwarded 198.18.1.41:8080=1/2 198.18.2.42:8080=1/2
198.19.0.53:53/UDP     demo/dns:dns       forwarded 198.18.1.21:53=1
198.19.0.40:80/TCP     demo/empty:http    rejected
node port 30080/TCP    demo/shop:http     forwarded 198.18.1.31:8080=1
198.19.0.20:80/TCP     demo/shop:http     forwarded 198.18.1.31:8080=1/3 198.18.2.32:8080=1/3 198.18.2.33:8080=1/3
198.19.0.10:80/TCP     demo/web:http      forwarded 198.18.1.11:8080=1/2 198.18.2.12:8080=1/2
`
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Errorf("nodetable output (-want +got):\n%s", diff)
	}
	if stderr.Len() != 0 {
		t.Errorf("nodetable wrote to stderr:\n%s", stderr.String())
	}
	if !bytes.Equal(goMod, readFile(t, filepath.Join(dir, "go.mod"))) || !bytes.Equal(goSum, readFile(t, filepath.Join(dir, "go.sum"))) {
		t.Errorf("go run changed %s's go.mod or go.sum: they are not complete", dir)
	}
	if n := bytes.Count(readFile(t, filepath.Join(dir, "main.go")), []byte("\n")); n > maxOutsideLines {
		t.Errorf("nodetable's main.go has %d lines, more than %d", n, maxOutsideLines)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
