//go:build linux

package apiserver_test

import (
	"debug/buildinfo"
	"testing"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
)

// TestKubeProxyIsTrackedRelease checks that the kube-proxy the suites run
// was built from the release svcproxy tracks (its --version is not stamped
// by a plain go build; its build information names the module).
func TestKubeProxyIsTrackedRelease(t *testing.T) {
	bin := apiserver.KubeProxy(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if info.Main.Path != "k8s.io/kubernetes" || info.Main.Version != svcproxy.KubeProxyVersion {
		t.Errorf("%s was built from %s %s, want k8s.io/kubernetes %s", bin, info.Main.Path, info.Main.Version, svcproxy.KubeProxyVersion)
	}
}
