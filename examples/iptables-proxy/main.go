// Command iptables-proxy is the svcproxy reference proxy with the iptables
// backend: it serves Kubernetes Services with kube-proxy's chains
// (KUBE-SERVICES, KUBE-SVC-…, KUBE-SEP-…) in the filter and nat tables,
// applied with iptables-restore and ip6tables-restore. See
// docs/reference-proxies.md for its flags; try it without root:
//
//	go run ./examples/iptables-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() { proxy.Main(mode) }

// mode is the iptables reference proxy.
var mode = proxy.Mode{
	Name: "iptables",
	// A dry run knows no nfacct counters: it renders the rules without
	// them, as kube-proxy writes them on a kernel that has none.
	Render: func(w io.Writer, rs *ruleset.Ruleset, opts *proxy.Options) ([]svcproxy.Warning, error) {
		_, err := w.Write(iptables.RenderFor(iptables.DefaultNames(), rs, iptables.Kernel{TCPBeLiberal: opts.TCPBeLiberal}))
		return nil, err // iptables.RenderFor writes every Service port
	},
	NewBackend: func(family v1.IPFamily, opts *proxy.Options) (engine.Backend, error) {
		return iptables.NewExecutor(iptables.ExecutorConfig{Family: family, NFAcct: true, TCPBeLiberal: opts.TCPBeLiberal})
	},
}
