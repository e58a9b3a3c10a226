//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestTCPBeLiberal: as kube-proxy, the iptables proxy drops INVALID
// packets in KUBE-FORWARD, counting them in kube-proxy's nfacct counter,
// unless conntrack's tcp_be_liberal is set, which kube-proxy's flag
// --conntrack-tcp-be-liberal and its configuration file's
// conntrack.tcpBeLiberal set in the node's namespace (the host's stays as
// it was).
func TestTCPBeLiberal(t *testing.T) {
	const liberal = "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"
	hostBefore, _ := os.ReadFile(liberal)
	configFile := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "config.yaml")
		err := os.WriteFile(path, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: `+netns.PodCIDR4.String()+","+netns.PodCIDR6.String()+`
conntrack: {maxPerCore: 0, tcpBeLiberal: true}
`), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		drop bool
	}{
		{"default", func(*testing.T) []string { return nil }, true},
		{"flag", func(*testing.T) []string { return []string{"--conntrack-tcp-be-liberal"} }, false},
		{"config file", func(t *testing.T) []string { return []string{"--config", configFile(t)} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
			c.StartEcho(echoPort)
			p := startProxyWith(t, c, "iptables", proxySetup{args: tc.args(t)},
				service("web", ips(46)), slice("web", false, v1.ProtocolTCP, ready(c, c.Pods[0])))
			saved := c.Node.MustRun("iptables-save", "-t", "filter")
			const counted = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP"
			if got := strings.Contains(saved, counted); got != tc.drop {
				t.Errorf("KUBE-FORWARD drops INVALID packets into the nfacct counter: %v, want %v:\n%s", got, tc.drop, saved)
			}
			if !tc.drop && strings.Contains(saved, "INVALID") {
				t.Errorf("tcp_be_liberal set and INVALID packets still dropped:\n%s", saved)
			}
			if set := strings.TrimSpace(c.Node.MustRun("cat", liberal)) == "1"; set == tc.drop {
				t.Errorf("nf_conntrack_tcp_be_liberal set in the node: %v; want %v", set, !tc.drop)
			}
			if !tc.drop && !strings.Contains(p.log.String(), "not installing DROP rules for INVALID packets") {
				t.Errorf("no log line about tcp_be_liberal:\n%s", p.log.String())
			}
		})
	}
	if hostAfter, _ := os.ReadFile(liberal); string(hostAfter) != string(hostBefore) {
		t.Errorf("the host's nf_conntrack_tcp_be_liberal changed: %q, then %q", hostBefore, hostAfter)
	}
}
