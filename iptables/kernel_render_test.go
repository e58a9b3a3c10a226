package iptables

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

// The rules kube-proxy v1.37.2 writes with its nfacct counters, as its own
// tests expect them (pkg/proxy/iptables/proxier_test.go), for a NodePort
// Service like nodePortService's.
const (
	kubeProxyInvalidDrop        = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP"
	kubeProxyInvalidDropCounted = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP"
	kubeProxyLocalhostNodePort  = "-A KUBE-NODEPORTS -m comment --comment ns1/web:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 30080 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-"
	kubeProxyNodePort           = "-A KUBE-NODEPORTS -m comment --comment ns1/web:p80 -m tcp -p tcp --dport 30080 -j KUBE-EXT-"
)

// nodePortRuleset is one NodePort Service with two endpoints, in family
// v6 or IPv4, serving localhost NodePorts when localhost.
func nodePortRuleset(t *testing.T, v6, localhost bool) *ruleset.Ruleset {
	cfg := testConfig()
	cfg.LocalhostNodePorts = localhost
	ip := "198.19.0.10"
	if v6 {
		cfg = ruleset.Config{Family: v1.IPv6Protocol, Node: cfg.Node}
		ip = "2001:db8:19::10"
	}
	return build(t, cfg, service("ns1", "web", ip, nodePort(30080)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, v6)...))
}

// TestRenderForKernel: the counters and tcp_be_liberal change exactly the
// rules they change in kube-proxy, in full and partial renders, and the
// zero Kernel renders as Render.
func TestRenderForKernel(t *testing.T) {
	both := Kernel{InvalidDroppedCounter: true, LocalhostNodePortsCounter: true}
	for _, tc := range []struct {
		name          string
		v6, localhost bool
		kernel        Kernel
		want, not     []string // line prefixes present, absent
	}{
		{name: "zero Kernel", localhost: true,
			want: []string{kubeProxyInvalidDrop, kubeProxyNodePort},
			not:  []string{"-m nfacct", kubeProxyLocalhostNodePort}},
		{name: "both counters", localhost: true, kernel: both,
			want: []string{kubeProxyInvalidDropCounted, kubeProxyLocalhostNodePort, kubeProxyNodePort},
			not:  []string{kubeProxyInvalidDrop + "\n"}},
		{name: "invalid counter only", localhost: true, kernel: Kernel{InvalidDroppedCounter: true},
			want: []string{kubeProxyInvalidDropCounted, kubeProxyNodePort},
			not:  []string{kubeProxyLocalhostNodePort}},
		{name: "localhost counter only", localhost: true, kernel: Kernel{LocalhostNodePortsCounter: true},
			want: []string{kubeProxyInvalidDrop, kubeProxyLocalhostNodePort},
			not:  []string{kubeProxyInvalidDropCounted}},
		{name: "no localhost NodePorts: no localhost counter", kernel: both,
			want: []string{kubeProxyInvalidDropCounted, kubeProxyNodePort},
			not:  []string{kubeProxyLocalhostNodePort}},
		{name: "IPv6: no localhost counter", v6: true, localhost: true, kernel: both,
			want: []string{kubeProxyInvalidDropCounted, kubeProxyNodePort},
			not:  []string{kubeProxyLocalhostNodePort}},
		{name: "tcp_be_liberal: no drop of INVALID packets", localhost: true,
			kernel: Kernel{TCPBeLiberal: true, InvalidDroppedCounter: true, LocalhostNodePortsCounter: true},
			want:   []string{kubeProxyLocalhostNodePort, kubeProxyNodePort},
			not:    []string{"-A KUBE-FORWARD -m conntrack --ctstate INVALID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := nodePortRuleset(t, tc.v6, tc.localhost)
			full := string(RenderFor(DefaultNames(), rs, tc.kernel))
			// A partial render of a change rewrites the same top-level
			// chains.
			old := build(t, rs.Config())
			partial, err := RenderPartialFor(DefaultNames(), old, rs, ruleset.Diff(old, rs), tc.kernel)
			if err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{"RenderFor": full, "RenderPartialFor": string(partial)} {
				for _, w := range tc.want {
					if !hasLinePrefix(text, w) {
						t.Errorf("%s: no line %q in\n%s", name, w, text)
					}
				}
				for _, n := range tc.not {
					if strings.Contains(text, n) {
						t.Errorf("%s: %q should not be there:\n%s", name, n, text)
					}
				}
			}
			if _, err := applyRestore(newModel(), []byte(full)); err != nil {
				t.Errorf("model rejects the rendering: %v", err)
			}
			// kube-proxy's order: the localhost rule right before the
			// node port's own.
			if i := strings.Index(full, kubeProxyLocalhostNodePort); i >= 0 {
				next := full[strings.IndexByte(full[i:], '\n')+i+1:]
				if !strings.HasPrefix(next, kubeProxyNodePort) {
					t.Errorf("the localhost counter's rule is not followed by the node port's:\n%s", full)
				}
			}
			if tc.kernel == (Kernel{}) && full != string(Render(DefaultNames(), rs)) {
				t.Error("RenderFor with the zero Kernel differs from Render")
			}
		})
	}
}

func hasLinePrefix(text, prefix string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}
