package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// maxOutsideLines is the size that issue 32 sets for a per-node table of
// frontends, shares and verdicts per origin, written outside the module on
// the public packages.
const maxOutsideLines = 50

// TestOutsideNodeTable builds and runs examples/outside/nodetable, a module
// of its own that uses svcproxy through a replace directive, offline (its
// go.sum must be complete), on the demo manifests; it checks the table, that
// the run left go.mod and go.sum as they were, what the program links, and
// its length.
func TestOutsideNodeTable(t *testing.T) {
	dir := filepath.Join("outside", "nodetable")
	goMod, goSum := readFile(t, filepath.Join(dir, "go.mod")), readFile(t, filepath.Join(dir, "go.sum"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", ".", filepath.Join("..", "..", "demo", "manifests"), "node-a", "198.18.0.0/20")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run in %s: %v\n%s", dir, err, stderr.String())
	}
	// From outside, the Local node port of demo/shop reaches only its local
	// endpoint and demo/api's, with none on node-a, drops; from a pod or the
	// node both are short-circuited to every endpoint, the node's flows
	// masqueraded. The node's address is outside the cluster CIDR, so its
	// flows to cluster IPs are masqueraded as the outside's are, and a
	// pod's are not. The load-balancer IP's source ranges let none of the
	// three in.
	want := `node port 30080/TCP   demo/shop:http  outside forwarded 198.18.1.31:8080=1
node port 30080/TCP   demo/shop:http  pod     forwarded 198.18.1.31:8080=1/3 198.18.2.32:8080=1/3 198.18.2.33:8080=1/3 short-circuited
node port 30080/TCP   demo/shop:http  node    forwarded 198.18.1.31:8080=1/3 198.18.2.32:8080=1/3 198.18.2.33:8080=1/3 short-circuited masqueraded
node port 30443/TCP   demo/api:https  outside dropped
node port 30443/TCP   demo/api:https  pod     forwarded 198.18.2.51:8443=1 short-circuited
node port 30443/TCP   demo/api:https  node    forwarded 198.18.2.51:8443=1 short-circuited masqueraded
198.19.0.10:80/TCP    demo/web:http   outside forwarded 198.18.1.11:8080=1/2 198.18.2.12:8080=1/2 masqueraded
198.19.0.10:80/TCP    demo/web:http   pod     forwarded 198.18.1.11:8080=1/2 198.18.2.12:8080=1/2
198.19.0.10:80/TCP    demo/web:http   node    forwarded 198.18.1.11:8080=1/2 198.18.2.12:8080=1/2 masqueraded
198.19.0.20:80/TCP    demo/shop:http  outside forwarded 198.18.1.31:8080=1/3 198.18.2.32:8080=1/3 198.18.2.33:8080=1/3 masqueraded
198.19.0.20:80/TCP    demo/shop:http  pod     forwarded 198.18.1.31:8080=1/3 198.18.2.32:8080=1/3 198.18.2.33:8080=1/3
198.19.0.20:80/TCP    demo/shop:http  node    forwarded 198.18.1.31:8080=1/3 198.18.2.32:8080=1/3 198.18.2.33:8080=1/3 masqueraded
198.19.0.30:80/TCP    demo/cart:http  outside forwarded 198.18.1.41:8080=1/2 198.18.2.42:8080=1/2 masqueraded
198.19.0.30:80/TCP    demo/cart:http  pod     forwarded 198.18.1.41:8080=1/2 198.18.2.42:8080=1/2
198.19.0.30:80/TCP    demo/cart:http  node    forwarded 198.18.1.41:8080=1/2 198.18.2.42:8080=1/2 masqueraded
198.19.0.40:80/TCP    demo/empty:http outside rejected
198.19.0.40:80/TCP    demo/empty:http pod     rejected
198.19.0.40:80/TCP    demo/empty:http node    rejected
198.19.0.50:443/TCP   demo/api:https  outside forwarded 198.18.2.51:8443=1 masqueraded
198.19.0.50:443/TCP   demo/api:https  pod     forwarded 198.18.2.51:8443=1
198.19.0.50:443/TCP   demo/api:https  node    forwarded 198.18.2.51:8443=1 masqueraded
198.19.0.53:53/UDP    demo/dns:dns    outside forwarded 198.18.1.21:53=1 masqueraded
198.19.0.53:53/UDP    demo/dns:dns    pod     forwarded 198.18.1.21:53=1
198.19.0.53:53/UDP    demo/dns:dns    node    forwarded 198.18.1.21:53=1 masqueraded
198.19.100.1:443/TCP  demo/api:https  outside dropped by the source-range firewall
198.19.100.1:443/TCP  demo/api:https  pod     dropped by the source-range firewall
198.19.100.1:443/TCP  demo/api:https  node    dropped by the source-range firewall
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
	// A table printer builds Rulesets through state, not engine: it links
	// neither the engine's metrics nor a backend's netlink.
	list := exec.CommandContext(ctx, "go", "list", "-deps", ".")
	list.Dir, list.Env = dir, cmd.Env
	deps, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps in %s: %v", dir, err)
	}
	for _, dep := range strings.Fields(string(deps)) {
		if strings.Contains(dep, "prometheus") || strings.Contains(dep, "netlink") || strings.HasSuffix(dep, "svcproxy/engine") {
			t.Errorf("nodetable links %s", dep)
		}
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
