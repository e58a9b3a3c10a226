// Command nftables-proxy is the svcproxy reference proxy with the nftables
// backend: it serves Kubernetes Services from the table "kube-proxy" in the
// ip and ip6 families (with --nftables-layout flat, from the flat layout's
// table "svcproxy-flat"): full syncs through sigs.k8s.io/knftables (nft),
// incremental ones over netlink (nftables.ExecutorConfig.Netlink). See
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
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() { proxy.Main(mode) }

// mode is the nftables reference proxy.
var mode = proxy.Mode{
	Name:       "nftables",
	Render:     render,
	NewBackend: newBackend,
}

// options are the nftables.Options of the proxy's flags.
func options(opts *proxy.Options) (nftables.Options, error) {
	if opts.NFTablesLayout == "" {
		return nftables.Options{}, nil
	}
	layout, err := nftables.ParseLayout(opts.NFTablesLayout)
	return nftables.Options{Layout: layout}, err
}

// render writes the nft script of a full sync of rs into no table (for the
// flat layout, the one `nft -f` script that replaces its table) and returns
// the render's warnings.
func render(w io.Writer, rs *ruleset.Ruleset, opts *proxy.Options) ([]svcproxy.Warning, error) {
	o, err := options(opts)
	if err != nil {
		return nil, err
	}
	var script string
	var res nftables.Result
	if o.Layout == nftables.LayoutFlat {
		_, script, res = nftables.FlatScript(rs, o)
	} else if script, res, err = nftables.Script(rs, o); err != nil {
		return nil, err
	}
	_, err = io.WriteString(w, script)
	return res.Warnings, err
}

func newBackend(family v1.IPFamily, opts *proxy.Options) (engine.Backend, error) {
	o, err := options(opts)
	if err != nil {
		return nil, err
	}
	return nftables.NewExecutor(nftables.ExecutorConfig{Family: family, Options: o, Netlink: true})
}
