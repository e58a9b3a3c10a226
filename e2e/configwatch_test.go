//go:build linux

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestConfigFileChangeExits: as kube-proxy 1.37, a proxy started with
// --config exits with status 1 when the file is written, after a log line
// naming it, so that kubelet restarts it with the new file; the rules stay.
func TestConfigFileChangeExits(t *testing.T) {
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	path := filepath.Join(t.TempDir(), "config.yaml")
	config := `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: ` + netns.PodCIDR4.String() + "," + netns.PodCIDR6.String() + `
conntrack: {maxPerCore: 0}
`
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProxyWith(t, c, "iptables", proxySetup{args: []string{"--config", path}},
		service("web", ips(47)), slice("web", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
	select {
	case <-p.proc.Done():
		t.Fatalf("the proxy exited before the change: %v\n%s", p.proc.Err(), p.log.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(path, []byte(config+"iptables: {masqueradeAll: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the proxy still runs 10s after its --config file changed:\n%s", p.log.String())
	}
	var exit *exec.ExitError
	if err := p.proc.Err(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit: %v; want status 1, as kube-proxy", err)
	}
	if log := p.log.String(); !strings.Contains(log, "configuration file changed") || !strings.Contains(log, path) {
		t.Errorf("no log line naming the change of %s:\n%s", path, log)
	}
	if saved := c.Node.MustRun("iptables-save", "-t", "nat"); !strings.Contains(saved, "/web:") {
		t.Errorf("the rules did not stay:\n%s", saved)
	}
}
