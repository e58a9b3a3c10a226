//go:build linux

package iptables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// TestKernelEvaluate: what the kernel gives back is what the evaluator
// reads. For the first 24 cases genEvalCase draws (both families, both
// prefixes), an Executor syncs the Ruleset in a fresh namespace, and the
// output of iptables-save (ip6tables-save) there, in the kernel's canonical
// form (-d ADDR/32, --set-xmark, probabilities with 11 decimals, …), parses
// and sends every packet of the case where the tracer says. Cleanup removes
// the rules between cases.
func TestKernelEvaluate(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ns := lab.NewNS("iptrace")
	ctx := context.Background()
	forwarded := 0
	for seed := range 24 {
		c := genEvalCase.Example(seed)
		family := c.rs.Config().Family
		e, err := NewExecutor(ExecutorConfig{Family: family, Names: c.names, Runner: nsRunner(ns)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Sync(ctx, c.rs); err != nil {
			t.Fatalf("case %d: Sync: %v", seed, err)
		}
		save := "iptables-save"
		if family == v1.IPv6Protocol {
			save = "ip6tables-save"
		}
		saved, err := ns.Run(ctx, save)
		if err != nil {
			t.Fatalf("case %d: %s: %v", seed, save, err)
		}
		if !strings.Contains(saved, "/128 ") && !strings.Contains(saved, "/32 ") {
			t.Fatalf("case %d: %s does not print addresses in the kernel's form:\n%s", seed, save, saved)
		}
		seen := map[string]int{}
		if d := disagreement(c, []byte(saved), seen); d != "" {
			t.Errorf("case %d: %s\n%s output:\n%s", seed, d, save, saved)
		}
		forwarded += seen[ruleset.VerdictForward.String()]
		if err := e.Cleanup(ctx); err != nil {
			t.Fatalf("case %d: Cleanup: %v", seed, err)
		}
	}
	if forwarded == 0 {
		t.Error("no packet was forwarded: the cases miss the statistic cascades")
	}
}

// TestKernelLocalnetGuardHook: the hook on which the localnet guard drops
// what the node itself sends can be seen, which is why iptablesSpec asks
// for the output hook. A UDP datagram the node sends from 198.18.0.1 to
// 127.0.0.1 fails to send with EPERM when the guard sits in KUBE-FIREWALL
// (jumped to from OUTPUT and INPUT), but is sent, and silently dropped after
// the loopback, when the guard sits in filter KUBE-NODEPORTS (INPUT only).
// (A TCP connect times out either way: the kernel retransmits a SYN that
// OUTPUT dropped.) The evaluator, reading iptables-save, places the two
// drops on those hooks.
func TestKernelLocalnetGuardHook(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ns := lab.NewNS("guard")
	ns.AddAddr("lo", netip.MustParsePrefix("198.18.0.1/32"))
	if _, err := ns.StartEcho("node", 9091); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := testConfig()
	cfg.LocalhostNodePorts = true
	e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, Runner: nsRunner(ns)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sync(ctx, build(t, cfg)); err != nil {
		t.Fatal(err)
	}
	to := netip.MustParseAddrPort("127.0.0.1:9091")
	p := trace.Packet{Protocol: v1.ProtocolUDP, Src: netip.MustParseAddrPort("198.18.0.1:40000"), Dst: to, FromNode: true}

	if err := sendUDP(ns, p); !errors.Is(err, syscall.EPERM) {
		t.Errorf("guard in KUBE-FIREWALL: send error %v, want EPERM", err)
	}
	wantDropHook(t, ns, p, "filter OUTPUT")
	if err := sendUDP(ns, trace.Packet{Src: netip.MustParseAddrPort("127.0.0.1:40000"), Dst: to}); err != nil {
		t.Errorf("from 127.0.0.1: %v, want an answer (the guard spares loopback sources)", err)
	}

	guard := []string{"-m", "comment", "--comment", "block incoming localnet connections", "-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8",
		"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP"}
	ns.MustRun("iptables", "-w", "-t", "filter", "-F", "KUBE-FIREWALL")
	ns.MustRun("iptables", append([]string{"-w", "-t", "filter", "-I", "KUBE-NODEPORTS", "1"}, guard...)...)
	if err := sendUDP(ns, p); !errors.Is(err, netns.ErrTimeout) {
		t.Errorf("guard in KUBE-NODEPORTS: %v, want the send to pass and no answer (dropped on input)", err)
	}
	wantDropHook(t, ns, p, "filter INPUT")
	if err := e.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
}

// sendUDP sends one datagram from p.Src's address to p.Dst in ns and waits
// a second for the echo server's answer: the error of the send, a timeout
// (netns.ErrTimeout) when no answer came, or nil.
func sendUDP(ns *netns.NS, p trace.Packet) error {
	c, err := ns.Dial("udp", netip.AddrPortFrom(p.Src.Addr(), 0), p.Dst, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := c.Read(make([]byte, 512)); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("no answer: %w", netns.ErrTimeout)
		}
		return err
	}
	return nil
}

// wantDropHook checks that the evaluator, reading iptables-save in ns,
// drops p on hook.
func wantDropHook(t *testing.T, ns *netns.NS, p trace.Packet, hook string) {
	t.Helper()
	saved, err := ns.Run(context.Background(), "iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := iptrace.Parse([]byte(saved))
	if err != nil {
		t.Fatal(err)
	}
	o, path, err := rules.Evaluate(p)
	if err != nil {
		t.Fatal(err)
	}
	if o.Verdict != ruleset.VerdictDrop || len(path) == 0 || path[len(path)-1].Hook != hook {
		t.Errorf("%v: %s, want dropped on %s; path:\n%s", p, o.Verdict, hook, path)
	}
}
