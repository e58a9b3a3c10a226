// Command iptables-proxy is the svcproxy reference proxy with the iptables
// backend: it serves Kubernetes Services with kube-proxy's chains
// (KUBE-SERVICES, KUBE-SVC-…, KUBE-SEP-…) in the filter and nat tables,
// applied with iptables-restore and ip6tables-restore. See
// REFERENCE-PROXY.md for its flags; try it without root:
//
//	go run ./examples/iptables-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"context"
	"errors"
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() {
	proxy.Main(proxy.Mode{Name: "iptables", NewBackend: newBackend})
}

func newBackend(family v1.IPFamily, dryRun bool) (proxy.Backend, error) {
	if dryRun {
		return dryRunBackend{}, nil
	}
	exec, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: family})
	if err != nil {
		return nil, err
	}
	return backend{exec}, nil
}

// backend applies Rulesets through an iptables.Executor.
type backend struct{ exec *iptables.Executor }

func (backend) Render(w io.Writer, rs *ruleset.Ruleset) error { return dryRunBackend{}.Render(w, rs) }

func (b backend) Sync(ctx context.Context, rs *ruleset.Ruleset) error {
	_, err := b.exec.Sync(ctx, rs)
	return err
}

func (b backend) Cleanup(ctx context.Context) error { return b.exec.Cleanup(ctx) }

// dryRunBackend only renders: it needs neither root nor iptables.
type dryRunBackend struct{}

func (dryRunBackend) Render(w io.Writer, rs *ruleset.Ruleset) error {
	_, err := w.Write(iptables.Render(iptables.DefaultNames(), rs))
	return err
}

var errDryRun = errors.New("dry run: nothing is applied")

func (dryRunBackend) Sync(context.Context, *ruleset.Ruleset) error { return errDryRun }

func (dryRunBackend) Cleanup(context.Context) error { return errDryRun }
