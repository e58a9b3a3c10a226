package iptables

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

// The vectors are kube-proxy's chain names for the same ServicePorts.
func TestHashesMatchKubeProxy(t *testing.T) {
	tests := []struct {
		name     servicemap.PortName
		endpoint string
		want     string
	}{
		{servicemap.PortName{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: v1.ProtocolTCP}, "", "KUBE-SVC-XPGD46QRK7WJZT7O"},
		{servicemap.PortName{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: v1.ProtocolTCP}, "10.180.0.1:80", "KUBE-SEP-SXIVWICOYRO3J4NJ"},
		{servicemap.PortName{Namespace: "default", Name: "kubernetes", Port: "https", Protocol: v1.ProtocolTCP}, "", "KUBE-SVC-NPX46M4PTMTKRN6Y"},
		{servicemap.PortName{Namespace: "kube-system", Name: "kube-dns", Port: "dns", Protocol: v1.ProtocolUDP}, "", "KUBE-SVC-TCOU7JCQXEZGVUNU"},
	}
	for _, tt := range tests {
		var got string
		if tt.endpoint == "" {
			got = "KUBE-SVC-" + servicePortHash(tt.name)[:16]
		} else {
			got = "KUBE-SEP-" + endpointHash(tt.name, netip.MustParseAddrPort(tt.endpoint))[:16]
		}
		if got != tt.want {
			t.Errorf("%v %s: got %s, want %s", tt.name, tt.endpoint, got, tt.want)
		}
	}
}
