//go:build linux

package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// EnvBinDir names the directory that holds the kube-apiserver, kube-proxy
// and etcd binaries, as e2e/apiserver/build.sh prints it.
const EnvBinDir = "SVCPROXY_APISERVER_BIN_DIR"

// binaries are the paths of the servers' executables.
type binaries struct {
	etcd, apiserver string
}

// Require skips t, with how to build them, unless kube-apiserver and etcd
// are in $SVCPROXY_APISERVER_BIN_DIR; under SVCPROXY_E2E=required it fails t
// instead. Start calls it; a test calls it first to skip before it builds
// anything else.
func Require(t testing.TB) {
	t.Helper()
	findBinaries(t)
}

// KubeProxy returns the path of the kube-proxy binary in
// $SVCPROXY_APISERVER_BIN_DIR (built from the release svcproxy tracks,
// svcproxy.KubeProxyVersion), for tests that run the real kube-proxy
// beside ours. Like Require, it skips t when the binary is missing, or
// fails t under SVCPROXY_E2E=required.
func KubeProxy(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvBinDir)
	bin := filepath.Join(dir, "kube-proxy")
	if problem := notExecutable(dir, bin); problem != "" {
		skipOrFail(t, "kube-proxy", problem)
	}
	return bin
}

// findBinaries returns the executables in $SVCPROXY_APISERVER_BIN_DIR. When
// the variable is unset or a binary is missing, it skips t with how to build
// them, or fails t under SVCPROXY_E2E=required.
func findBinaries(t testing.TB) binaries {
	t.Helper()
	dir := os.Getenv(EnvBinDir)
	b := binaries{etcd: filepath.Join(dir, "etcd"), apiserver: filepath.Join(dir, "kube-apiserver")}
	for _, bin := range []string{b.etcd, b.apiserver} {
		if problem := notExecutable(dir, bin); problem != "" {
			skipOrFail(t, "kube-apiserver and etcd", problem)
			break
		}
	}
	return b
}

// notExecutable says what is wrong with bin, one of the binaries in dir
// ($SVCPROXY_APISERVER_BIN_DIR), or returns "".
func notExecutable(dir, bin string) string {
	if dir == "" {
		return EnvBinDir + " is not set"
	}
	if info, err := os.Stat(bin); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Sprintf("%s is not an executable (%s=%s)", bin, EnvBinDir, dir)
	}
	return ""
}

// skipOrFail skips t, saying which binaries it needs, why they are missing
// and how to build them; under SVCPROXY_E2E=required it fails t instead.
func skipOrFail(t testing.TB, needs, problem string) {
	t.Helper()
	msg := "API-server test needs " + needs + ": " + problem +
		"; build them with `export " + EnvBinDir + "=$(e2e/apiserver/build.sh)` (a cold build takes tens of minutes)"
	if os.Getenv(netns.EnvRequired) == "required" {
		t.Fatalf("%s (%s=required, so this fails instead of skipping)", msg, netns.EnvRequired)
	}
	t.Skipf("%s; skipping (set %s=required to fail instead)", msg, netns.EnvRequired)
}
