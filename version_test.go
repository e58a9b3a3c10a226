package svcproxy_test

import (
	"os"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy"
)

// TestKubeProxyVersionPinned checks that KubeProxyVersion is the
// k8s.io/kubernetes version the API-server suite builds kube-proxy from.
func TestKubeProxyVersionPinned(t *testing.T) {
	const gomod = "e2e/apiserver/tools/kubernetes/go.mod"
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	var pinned []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
			pinned = append(pinned, f[1])
		}
	}
	if len(pinned) != 1 {
		t.Fatalf("%s: want one k8s.io/kubernetes requirement, found versions %q", gomod, pinned)
	}
	if pinned[0] != svcproxy.KubeProxyVersion {
		t.Errorf("svcproxy.KubeProxyVersion = %s, but %s pins k8s.io/kubernetes %s", svcproxy.KubeProxyVersion, gomod, pinned[0])
	}
}
