//go:build linux

package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// EnvRequired is the environment variable that turns skips into failures
// when set to "required".
const EnvRequired = "SVCPROXY_E2E"

// Require skips t, with the reason, unless the process is root, the
// namespace tools (ip, and any extra tools named) are on PATH and the kernel
// has IPv6. With SVCPROXY_E2E=required it fails t instead of skipping.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, fmt.Sprintf("%q on PATH", tool))
		}
	}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		missing = append(missing, "kernel IPv6 support")
	}
	if len(missing) == 0 {
		return
	}
	msg := "end-to-end test needs " + strings.Join(missing, ", ")
	if os.Getenv(EnvRequired) == "required" {
		t.Fatalf("%s (%s=required, so this fails instead of skipping)", msg, EnvRequired)
	}
	t.Skipf("%s; skipping (set %s=required to fail instead)", msg, EnvRequired)
}

// Prefix is the prefix of every namespace this process creates.
func Prefix() string { return fmt.Sprintf("svcp-%d-", os.Getpid()) }

// Leftovers lists the namespaces whose name starts with this process's
// [Prefix]. After every Lab has been cleaned up it should be empty.
func Leftovers() ([]string, error) {
	all, err := listNetns()
	if err != nil {
		return nil, err
	}
	var ours []string
	for _, n := range all {
		if strings.HasPrefix(n, Prefix()) {
			ours = append(ours, n)
		}
	}
	return ours, nil
}

// Sweep deletes every namespace left by this process (see [Leftovers]) and
// returns the names it deleted. Namespaces of other processes are never
// touched.
func Sweep() ([]string, error) {
	ours, err := Leftovers()
	if err != nil {
		return nil, err
	}
	var errs []string
	for _, n := range ours {
		if err := deleteNetns(n); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return ours, fmt.Errorf("sweep: %s", strings.Join(errs, "; "))
	}
	return ours, nil
}

// listNetns returns the names `ip netns list` shows.
func listNetns() ([]string, error) {
	out, err := runHost(context.Background(), "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

func deleteNetns(name string) error {
	if !strings.HasPrefix(name, Prefix()) {
		return fmt.Errorf("refusing to delete namespace %q: not ours", name)
	}
	netnsMu.Lock()
	defer netnsMu.Unlock()
	_, err := runHost(context.Background(), "ip", "netns", "delete", name)
	return err
}

// runHost runs a command in the test process's own namespaces. Only `ip`
// invocations that name a namespace (netns add/delete/list/exec, ip -n) go
// through here.
func runHost(ctx context.Context, name string, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCommandTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, name, args...)
	setProcAttrs(cmd)
	cmd.WaitDelay = time.Second
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
