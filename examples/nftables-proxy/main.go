// Command nftables-proxy is the svcproxy reference proxy with the nftables
// backend: it serves Kubernetes Services from the table "kube-proxy" in the
// ip and ip6 families, applied through sigs.k8s.io/knftables. See
// REFERENCE-PROXY.md for its flags; try it without root:
//
//	go run ./examples/nftables-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"context"
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

func main() {
	proxy.Main(proxy.Mode{Name: "nftables", NewBackend: newBackend})
}

func newBackend(family v1.IPFamily, dryRun bool) (proxy.Backend, error) {
	if dryRun {
		return dryRunBackend{}, nil
	}
	exec, err := nftables.NewExecutor(nftables.ExecutorConfig{Family: family})
	if err != nil {
		return nil, err
	}
	return backend{exec}, nil
}

// backend applies Rulesets through an nftables.Executor.
type backend struct{ exec *nftables.Executor }

func (b backend) Render(w io.Writer, rs *ruleset.Ruleset) error { return dryRunBackend{}.Render(w, rs) }

func (b backend) Sync(ctx context.Context, rs *ruleset.Ruleset) error {
	_, err := b.exec.Sync(ctx, rs)
	return err
}

func (b backend) Cleanup(ctx context.Context) error { return b.exec.Cleanup(ctx) }

// dryRunBackend only renders: it needs neither root nor nft.
type dryRunBackend struct{}

func (dryRunBackend) Render(w io.Writer, rs *ruleset.Ruleset) error {
	script, _, err := nftables.Script(rs, nftables.Options{})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, script)
	return err
}

func (dryRunBackend) Sync(context.Context, *ruleset.Ruleset) error { return errDryRun }

func (dryRunBackend) Cleanup(context.Context) error { return errDryRun }

var errDryRun = errorString("dry run: nothing is applied")

type errorString string

func (e errorString) Error() string { return string(e) }
