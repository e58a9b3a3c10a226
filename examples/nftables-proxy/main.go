// Command nftables-proxy is the svcproxy reference proxy with the nftables
// backend: it serves Kubernetes Services from the table "kube-proxy" in the
// ip and ip6 families, in kube-proxy's layout (package nftables), or with
// --nftables-layout flat from the flat layout's table "svcproxy-flat"
// (package nftables/flat): full syncs through sigs.k8s.io/knftables (nft),
// incremental ones over netlink (ExecutorConfig.Netlink of either). See
// docs/reference-proxies.md for its flags; try it without root:
//
//	go run ./examples/nftables-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() { proxy.Main(mode) }

// mode is the nftables reference proxy.
var mode = proxy.Mode{
	Name:       "nftables",
	Render:     render,
	NewBackend: newBackend,
}

// flatLayout reports whether the proxy's flags choose the flat layout
// (proxy.ParseFlags accepts only "kube-proxy", "flat" and "").
func flatLayout(opts *proxy.Options) bool { return opts.NFTablesLayout == "flat" }

// render writes the nft script of a full sync of rs into no table (for the
// flat layout, the one `nft -f` script that replaces its table) and returns
// the render's warnings.
func render(w io.Writer, rs *ruleset.Ruleset, opts *proxy.Options) ([]svcproxy.Warning, error) {
	var script string
	var warnings []svcproxy.Warning
	if flatLayout(opts) {
		var res flat.Result
		_, script, res = flat.Script(rs, flat.Options{})
		warnings = res.Warnings
	} else {
		var res nftables.Result
		var err error
		if script, res, err = nftables.Script(rs, nftables.Options{}); err != nil {
			return nil, err
		}
		warnings = res.Warnings
	}
	_, err := io.WriteString(w, script)
	return warnings, err
}

func newBackend(family v1.IPFamily, opts *proxy.Options) (engine.Backend, error) {
	if flatLayout(opts) {
		return flat.NewExecutor(flat.ExecutorConfig{Family: family, Netlink: true})
	}
	return nftables.NewExecutor(nftables.ExecutorConfig{Family: family, Netlink: true})
}
