package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/examples/internal/proxy"
)

// --dry-run prints the iptables-restore input alone on stdout and the
// warnings (here about a malformed externalIP) on stderr.
func TestDryRunWarnsOnStderr(t *testing.T) {
	dir := t.TempDir()
	svc := `apiVersion: v1
kind: Service
metadata: {namespace: ns, name: web}
spec:
  clusterIP: 198.19.0.1
  externalIPs: [not-an-ip]
  ports: [{name: http, port: 80}]
`
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	args := []string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--dry-run"}
	if code := proxy.Run(mode, args, &out, &errs); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errs.String())
	}
	if want := `Service ns/web: invalid externalIP \"not-an-ip\" dropped`; !strings.Contains(errs.String(), want) {
		t.Errorf("stderr does not warn %s:\n%s", want, errs.String())
	}
	if !strings.HasPrefix(out.String(), "*") || !strings.Contains(out.String(), "198.19.0.1") || strings.Contains(out.String(), "level=") {
		t.Errorf("stdout is not the iptables-restore input alone:\n%s", out.String())
	}
}

// --dry-run renders as kube-proxy does on a kernel without nfacct counters
// (no -m nfacct), and with --conntrack-tcp-be-liberal without the drop of
// INVALID packets: it reads no sysctl, it follows the flag.
func TestDryRunTCPBeLiberal(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		flags []string
		drop  bool
	}{{nil, true}, {[]string{"--conntrack-tcp-be-liberal"}, false}} {
		var out, errs bytes.Buffer
		args := append([]string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--dry-run"}, tc.flags...)
		if code := proxy.Run(mode, args, &out, &errs); code != 0 {
			t.Fatalf("%v: exit %d, stderr: %s", tc.flags, code, errs.String())
		}
		if got := strings.Contains(out.String(), "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n"); got != tc.drop {
			t.Errorf("%v: drop of INVALID packets %v, want %v:\n%s", tc.flags, got, tc.drop, out.String())
		}
		if strings.Contains(out.String(), "nfacct") {
			t.Errorf("%v: a dry run uses nfacct counters:\n%s", tc.flags, out.String())
		}
	}
}
