// Command iptables-proxy is the svcproxy reference proxy with the iptables
// backend: it serves Kubernetes Services with kube-proxy's chains
// (KUBE-SERVICES, KUBE-SVC-…, KUBE-SEP-…) in the filter and nat tables,
// applied with iptables-restore and ip6tables-restore. See
// the README (or -h) for its flags; try it without root:
//
//	go run ./examples/iptables-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"context"
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() {
	proxy.Main(proxy.Mode{
		Name: "iptables",
		Render: func(w io.Writer, rs *ruleset.Ruleset) error {
			_, err := w.Write(iptables.Render(iptables.DefaultNames(), rs))
			return err
		},
		NewExecutor: func(family v1.IPFamily) (proxy.Executor, error) {
			exec, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: family})
			return executor{exec}, err
		},
	})
}

// executor adapts an iptables.Executor to proxy.Executor.
type executor struct{ *iptables.Executor }

func (e executor) Sync(ctx context.Context, rs *ruleset.Ruleset) (bool, error) {
	res, err := e.Executor.Sync(ctx, rs)
	return res.Full, err
}
