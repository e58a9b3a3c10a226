package names

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

func TestSafeName(t *testing.T) {
	ok := servicemap.PortName{Namespace: "ns-1", Name: "web-0", Port: "http", Protocol: v1.ProtocolTCP}
	tests := []struct {
		name string
		edit func(n *servicemap.PortName)
		want bool
	}{
		{"DNS labels", func(*servicemap.PortName) {}, true},
		{"unnamed port", func(n *servicemap.PortName) { n.Port = "" }, true},
		{"UDP", func(n *servicemap.PortName) { n.Protocol = v1.ProtocolUDP }, true},
		{"SCTP", func(n *servicemap.PortName) { n.Protocol = v1.ProtocolSCTP }, true},
		{"no protocol", func(n *servicemap.PortName) { n.Protocol = "" }, false},
		{"lower-case protocol", func(n *servicemap.PortName) { n.Protocol = "tcp" }, false},
		{"no namespace", func(n *servicemap.PortName) { n.Namespace = "" }, false},
		{"no name", func(n *servicemap.PortName) { n.Name = "" }, false},
		{"quote in the name", func(n *servicemap.PortName) { n.Name = `web"0` }, false},
		{"upper case in the namespace", func(n *servicemap.PortName) { n.Namespace = "Ns" }, false},
		{"space in the port", func(n *servicemap.PortName) { n.Port = "h ttp" }, false},
		{"dot in the name", func(n *servicemap.PortName) { n.Name = "web.0" }, false},
		{"byte above ASCII in the port", func(n *servicemap.PortName) { n.Port = "h\xe9" }, false},
		{"NUL in the namespace", func(n *servicemap.PortName) { n.Namespace = "ns\x00" }, false},
	}
	for _, tt := range tests {
		n := ok
		tt.edit(&n)
		if got := Safe(n); got != tt.want {
			t.Errorf("%s: Safe(%+v) = %v, want %v", tt.name, n, got, tt.want)
		}
	}
}
