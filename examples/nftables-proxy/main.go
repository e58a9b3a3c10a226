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

	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() {
	proxy.Main(proxy.Mode{
		Name:       "nftables",
		Render:     render,
		NewBackend: newBackend,
	})
}

// options are the nftables.Options of the proxy's flags.
func options(opts *proxy.Options) (nftables.Options, error) {
	if opts.NFTablesLayout == "" {
		return nftables.Options{}, nil
	}
	layout, err := nftables.ParseLayout(opts.NFTablesLayout)
	return nftables.Options{Layout: layout}, err
}

// render writes the nft script of a full sync of rs into no table: for the
// flat layout, the one `nft -f` script that replaces its table.
func render(w io.Writer, rs *ruleset.Ruleset, opts *proxy.Options) error {
	o, err := options(opts)
	if err != nil {
		return err
	}
	var script string
	if o.Layout == nftables.LayoutFlat {
		_, script, _ = nftables.FlatScript(rs, o)
	} else if script, _, err = nftables.Script(rs, o); err != nil {
		return err
	}
	_, err = io.WriteString(w, script)
	return err
}

func newBackend(family v1.IPFamily, opts *proxy.Options) (engine.Backend, error) {
	o, err := options(opts)
	if err != nil {
		return nil, err
	}
	return nftables.NewExecutor(nftables.ExecutorConfig{Family: family, Options: o, Netlink: true})
}
