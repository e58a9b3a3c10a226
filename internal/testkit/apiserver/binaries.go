//go:build linux

package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// EnvBinDir names the directory that holds the kube-apiserver and etcd
// binaries, as e2e/apiserver/build.sh prints it.
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

// findBinaries returns the executables in $SVCPROXY_APISERVER_BIN_DIR. When
// the variable is unset or a binary is missing, it skips t with how to build
// them, or fails t under SVCPROXY_E2E=required.
func findBinaries(t testing.TB) binaries {
	t.Helper()
	dir := os.Getenv(EnvBinDir)
	b := binaries{etcd: filepath.Join(dir, "etcd"), apiserver: filepath.Join(dir, "kube-apiserver")}
	var problem string
	switch {
	case dir == "":
		problem = EnvBinDir + " is not set"
	default:
		for _, bin := range []string{b.etcd, b.apiserver} {
			if info, err := os.Stat(bin); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
				problem = fmt.Sprintf("%s is not an executable (%s=%s)", bin, EnvBinDir, dir)
				break
			}
		}
	}
	if problem == "" {
		return b
	}
	msg := "API-server test needs kube-apiserver and etcd: " + problem +
		"; build them with `export " + EnvBinDir + "=$(e2e/apiserver/build.sh)` (a cold build takes tens of minutes)"
	if os.Getenv(netns.EnvRequired) == "required" {
		t.Fatalf("%s (%s=required, so this fails instead of skipping)", msg, netns.EnvRequired)
	}
	t.Skipf("%s; skipping (set %s=required to fail instead)", msg, netns.EnvRequired)
	return b
}
