package iptables

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

func TestNames(t *testing.T) {
	name := servicemap.PortName{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: v1.ProtocolTCP}
	ep := netip.MustParseAddrPort("10.180.0.1:80")
	for _, n := range []Names{{}, DefaultNames(), mustNames("KUBE")} {
		// kube-proxy's names for the same ServicePort.
		if got := n.ServiceChain(name); got != "KUBE-SVC-XPGD46QRK7WJZT7O" {
			t.Errorf("ServiceChain = %s", got)
		}
		if got := n.EndpointChain(name, ep); got != "KUBE-SEP-SXIVWICOYRO3J4NJ" {
			t.Errorf("EndpointChain = %s", got)
		}
		for got, want := range map[string]string{
			n.LocalChain(name):    "KUBE-SVL-XPGD46QRK7WJZT7O",
			n.ExternalChain(name): "KUBE-EXT-XPGD46QRK7WJZT7O",
			n.FirewallChain(name): "KUBE-FW-XPGD46QRK7WJZT7O",
			n.Services():          "KUBE-SERVICES",
			n.ExternalServices():  "KUBE-EXTERNAL-SERVICES",
			n.NodePorts():         "KUBE-NODEPORTS",
			n.Postrouting():       "KUBE-POSTROUTING",
			n.MarkMasq():          "KUBE-MARK-MASQ",
			n.Forward():           "KUBE-FORWARD",
			n.ProxyFirewall():     "KUBE-PROXY-FIREWALL",
		} {
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		}
	}

	cni := mustNames("CNI_1-X")
	if got := cni.ServiceChain(name); got != "CNI_1-X-SVC-XPGD46QRK7WJZT7O" {
		t.Errorf("custom ServiceChain = %s", got)
	}
	for _, c := range append(cni.TopLevel(), cni.EndpointChain(name, ep), cni.ExternalChain(name)) {
		if len(c) > MaxChainNameLen {
			t.Errorf("%s is longer than %d", c, MaxChainNameLen)
		}
		if !cni.Owns(c) || DefaultNames().Owns(c) {
			t.Errorf("ownership of %s", c)
		}
	}

	for _, bad := range []string{"", "-K", "K-", "A--B", "A B", "KUBE\"", "LONGPREF", "KUBE-SVC", "KUBE-SEPX", "KUBE-FW", "é"} {
		if _, err := NewNames(bad); err == nil {
			t.Errorf("NewNames(%q) accepted", bad)
		}
	}
	for _, good := range []string{"KUBE", "CNI", "a", "KUBE-X", "MY_PRX"} {
		if _, err := NewNames(good); err != nil {
			t.Errorf("NewNames(%q): %v", good, err)
		}
	}

	d := DefaultNames()
	for c, owned := range map[string]bool{
		"KUBE-SERVICES":              true,
		"KUBE-MASQ-NONPOD":           true,
		"KUBE-SEP-SXIVWICOYRO3J4NJ":  true,
		"KUBE-SEP-SXIVWICOYRO3J4N":   false, // too short
		"KUBE-SEP-SXIVWICOYRO3J4NJA": false,
		"KUBE-SEP-sxivwicoyro3j4nj":  false,
		"KUBE-SEP-SXIVWICOYRO3J4N1":  false, // not base32
		"KUBE-FIREWALL":              true,  // the localnet guard, kube-proxy's since kubelet stopped writing it
		"KUBE-KUBELET-CANARY":        false, // kubelet's
		"KUBE-PROXY-CANARY":          true,  // the Executor's flush canary, named as kube-proxy's
		"KUBE-XYZ-SXIVWICOYRO3J4NJ":  false,
		"DOCKER":                     false,
	} {
		if d.Owns(c) != owned {
			t.Errorf("Owns(%s) = %v", c, !owned)
		}
	}
}
