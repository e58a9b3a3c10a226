//go:build linux

package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/ruleset"
)

// TestKernelScale measures syncs of N Services × 10 endpoints in a real
// kernel (in a namespace of its own), for the N listed in
// SVCPROXY_IPT_SCALE (e.g. "1000,5000"); it is skipped otherwise. It times
// the Executor's full sync into empty tables and into loaded ones, a
// partial sync adding one Service, the state check that precedes a partial
// sync (and the same checks run as one iptables -C each), and, for
// comparison, the same full input
// without its "-S" lines, which iptables-nft 1.8.9 restores in time
// quadratic in the number of chains (SVCPROXY_IPT_SCALE_NOLIST=0 skips
// that one).
func TestKernelScale(t *testing.T) {
	spec := os.Getenv("SVCPROXY_IPT_SCALE")
	if spec == "" {
		t.Skip("set SVCPROXY_IPT_SCALE=1000,5000 to measure syncs at scale")
	}
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ctx := context.Background()
	for i, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		objs := scaleObjects(n)
		rs := build(t, testConfig(), objs...)
		plus := build(t, testConfig(), append(objs, scaleObjects(n + 1)[2*n:]...)...)

		ns := lab.NewNS(fmt.Sprintf("scale%d", i))
		e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, Runner: nsRunner(ns)})
		if err != nil {
			t.Fatal(err)
		}
		timed := func(what string, f func() error) {
			t.Helper()
			start := time.Now()
			if err := f(); err != nil {
				t.Fatalf("N=%d %s: %v", n, what, err)
			}
			t.Logf("N=%d: %-40s %v", n, what, time.Since(start).Round(time.Millisecond))
		}
		var input []byte
		timed("render (full)", func() error { input = Render(Names{}, rs); return nil })
		t.Logf("N=%d: full input %d bytes, %d lines", n, len(input), bytes.Count(input, []byte("\n")))
		timed("full sync, empty tables", func() error { _, err := e.Sync(ctx, rs); return err })
		e.RequestFullSync()
		timed("full sync, loaded tables", func() error { _, err := e.Sync(ctx, rs); return err })
		timed("partial sync, +1 Service", func() error {
			res, err := e.Sync(ctx, plus)
			if err == nil && res.Full {
				err = fmt.Errorf("not a partial sync")
			}
			return err
		})
		for i := range 3 {
			timed(fmt.Sprintf("state check before a partial sync (%d)", i+1), func() error {
				if missing := e.checkState(ctx); missing != "" {
					return errors.New(missing)
				}
				return nil
			})
		}
		timed("the same checks as 14 iptables -C runs", func() error {
			return checkOneByOne(ctx, nsRunner(ns), DefaultNames())
		})
		partial, err := RenderPartial(Names{}, rs, plus, ruleset.Diff(rs, plus))
		if err != nil {
			t.Fatal(err)
		}
		withList := bytes.Replace(bytes.Replace(partial, []byte("*filter\n"), []byte("*filter\n-S\n"), 1), []byte("*nat\n"), []byte("*nat\n-S\n"), 1)
		timed("partial restore again, with -S lines", func() error {
			return nsRunner(ns).Run(ctx, Command{Name: "iptables-restore", Args: []string{"--noflush", "--counters", "-w"}, Stdin: withList})
		})
		timed("partial restore again, without -S", func() error {
			return nsRunner(ns).Run(ctx, Command{Name: "iptables-restore", Args: []string{"--noflush", "--counters", "-w"}, Stdin: partial})
		})
		floor := lab.NewNS(fmt.Sprintf("floor%d", i))
		timed("floor: restore without --noflush", func() error {
			return nsRunner(floor).Run(ctx, Command{Name: "iptables-restore", Args: []string{"--counters", "-w"}, Stdin: bytes.ReplaceAll(input, []byte("\n-S\n"), []byte("\n"))})
		})
		if os.Getenv("SVCPROXY_IPT_SCALE_NOLIST") != "0" {
			noList := bytes.ReplaceAll(input, []byte("\n-S\n"), []byte("\n"))
			fresh := lab.NewNS(fmt.Sprintf("nolist%d", i))
			timed("full restore without -S, empty tables", func() error {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				return nsRunner(fresh).Run(ctx, Command{Name: "iptables-restore", Args: []string{"--noflush", "--counters", "-w"}, Stdin: noList})
			})
		}
	}
}

// checkOneByOne runs the Executor's state check as one `iptables -C` per
// rule, the alternative to its single restore.
func checkOneByOne(ctx context.Context, runner Runner, names Names) error {
	for _, j := range jumps {
		if err := runner.Run(ctx, Command{Name: "iptables", Args: j.args(names, "-C")}); err != nil {
			return err
		}
	}
	return nil
}
