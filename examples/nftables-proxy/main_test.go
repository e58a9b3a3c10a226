package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/examples/internal/proxy"
)

// contested has two Services with one external IP: b, with endpoints, owns
// it; a's reject element there is not rendered, with a warning.
const contested = `apiVersion: v1
kind: Service
metadata: {namespace: ns, name: a}
spec:
  clusterIP: 198.19.0.1
  externalIPs: [198.18.0.100]
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: b}
spec:
  clusterIP: 198.19.0.2
  externalIPs: [198.18.0.100]
  ports: [{name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: ns, name: b-1, labels: {kubernetes.io/service-name: b}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [198.18.64.2]}]
`

// --dry-run prints the nft script alone on stdout and the render's
// warnings on stderr, in both layouts.
func TestDryRunWarnsOnStderr(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(contested), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		layout  string
		warning string
	}{
		{"", `Service ns/a: port \"http\"/TCP: 198.18.0.100:80/TCP is also Service port ns/b:http's, which takes it: not served there`},
		{"flat", `Service ns/a: port \"http\"/TCP: 198.18.0.100:80/TCP is also Service port ns/b:http's, which takes it: not served there`},
	} {
		t.Run("layout="+tc.layout, func(t *testing.T) {
			args := []string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--dry-run"}
			if tc.layout != "" {
				args = append(args, "--nftables-layout", tc.layout)
			}
			var out, errs bytes.Buffer
			if code := proxy.Run(mode, args, &out, &errs); code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, errs.String())
			}
			if !strings.Contains(errs.String(), tc.warning) {
				t.Errorf("stderr does not warn %s:\n%s", tc.warning, errs.String())
			}
			if !strings.Contains(out.String(), "198.19.0.2") || strings.Contains(out.String(), "level=") {
				t.Errorf("stdout is not the script alone:\n%s", out.String())
			}
		})
	}
}
