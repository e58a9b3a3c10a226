// Command ebpf-proxy is the svcproxy reference proxy with the eBPF backend
// (package ebpf): cgroup programs translate Services at connect(),
// sendmsg(), recvmsg() and getpeername() for the processes of the cgroup
// given by --cgroup, from BPF maps pinned under --bpf-pin-path; with
// --tc-external and --tc-pods, tc programs translate IPv4 and IPv6
// traffic that arrives from outside. See
// docs/reference-proxies.md for its flags; try it without root:
//
//	go run ./examples/ebpf-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main

import (
	"errors"
	"io"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/examples/internal/proxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// mode is the eBPF proxy's proxy.Mode.
var mode = proxy.Mode{
	Name:       "ebpf",
	Render:     render,
	NewBackend: newBackend,
}

func main() { proxy.Main(mode) }

// render writes the map elements a full sync of rs writes.
func render(w io.Writer, rs *ruleset.Ruleset, _ *proxy.Options) ([]svcproxy.Warning, error) {
	_, err := ebpf.Render(rs, nil).Maps().WriteTo(w)
	return nil, err
}

// The Dataplane both families' backends share: one set of programs and
// maps.
var (
	dpOnce sync.Once
	dp     *ebpf.Dataplane
)

func newBackend(family v1.IPFamily, opts *proxy.Options) (engine.Backend, error) {
	if opts.Cgroup == "" && !opts.Cleanup {
		return nil, errors.New("--cgroup is needed: the cgroup v2 directory to attach to (a node passes the root of its cgroup v2 tree)")
	}
	if (len(opts.TCExternal) == 0) != (len(opts.TCPods) == 0) {
		return nil, errors.New("--tc-external and --tc-pods go together")
	}
	dpOnce.Do(func() {
		cfg := ebpf.Config{Cgroup: opts.Cgroup, PinPath: opts.BPFPinPath}
		if len(opts.TCExternal) > 0 {
			cfg.NorthSouth = &ebpf.NorthSouthConfig{External: opts.TCExternal, Pods: opts.TCPods}
		}
		dp = ebpf.NewDataplane(cfg)
	})
	return dp.Executor(family), nil
}
