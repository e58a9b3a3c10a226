// Command nftables-proxy is the svcproxy reference proxy with the nftables
// backend: it serves Kubernetes Services from the table "kube-proxy" in the
// ip and ip6 families: full syncs through sigs.k8s.io/knftables (nft),
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
		Name: "nftables",
		Render: func(w io.Writer, rs *ruleset.Ruleset) error {
			script, _, err := nftables.Script(rs, nftables.Options{})
			if err != nil {
				return err
			}
			_, err = io.WriteString(w, script)
			return err
		},
		NewBackend: func(family v1.IPFamily) (engine.Backend, error) {
			return nftables.NewExecutor(nftables.ExecutorConfig{Family: family, Netlink: true})
		},
	})
}
