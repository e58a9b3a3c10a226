//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "netns: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	echoPort    = 8080
	droppedPort = 8081 // a DROP rule in the node covers this port
	closedPort  = 9    // nobody listens
	quick       = 2 * time.Second
	blackhole   = 300 * time.Millisecond
)

func TestCluster(t *testing.T) {
	t.Parallel()
	Require(t, "iptables", "nft")
	hostForward, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := NewCluster(t, ClusterSpec{Pods: 2, RemotePods: 1, Clients: 1})
	c.StartEcho(echoPort)
	for _, p := range c.Pods {
		if _, err := p.StartEcho(p.Label, droppedPort); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("cluster of %d namespaces built in %v", len(c.Lab.Namespaces()), time.Since(start))
	client := c.Clients[0]

	// The DROP rules live in the node namespace only: iptables for IPv4, nft
	// for IPv6, so both tools are shown to work inside a lab namespace.
	for _, proto := range []string{"tcp", "udp"} {
		c.Node.MustRun("iptables", "-w", "5", "-A", "FORWARD", "-p", proto, "--dport", fmt.Sprint(droppedPort), "-j", "DROP")
	}
	c.Node.MustRun("nft", "add table inet svcptest")
	c.Node.MustRun("nft", "add chain inet svcptest drops { type filter hook forward priority 0 ; }")
	c.Node.MustRun("nft", fmt.Sprintf("add rule inet svcptest drops meta nfproto ipv6 meta l4proto { tcp, udp } th dport %d drop", droppedPort))

	// t.Run returns once the parallel IPv4 and IPv6 subtests have finished.
	t.Run("families", func(t *testing.T) { familyTests(t, c) })
	t.Run("isolation", func(t *testing.T) {
		if out := c.Node.MustRun("cat", "/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"); out != "1\n1\n" {
			t.Errorf("node forwarding sysctls = %q, want 1 and 1", out)
		}
		if got, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); string(got) != string(hostForward) {
			t.Errorf("host ip_forward changed from %q to %q", hostForward, got)
		}
		if out := client.MustRun("iptables", "-w", "5", "-S", "FORWARD"); strings.Contains(out, fmt.Sprint(droppedPort)) {
			t.Errorf("node's DROP rule visible in client namespace:\n%s", out)
		}
		if out := client.MustRun("ip", "-o", "link"); strings.Count(out, "\n") != 2 {
			t.Errorf("client namespace should have lo and eth0 only:\n%s", out)
		}
		// Every thread of this process is back in the host namespace.
		home, err := os.Stat("/proc/self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				if st, err := os.Stat("/proc/thread-self/ns/net"); err != nil || !os.SameFile(st, home) {
					t.Errorf("a thread is not in the host namespace (%v)", err)
				}
			})
		}
		wg.Wait()
	})
}

// familyTests checks routing, addresses and error kinds in c, for IPv4 and
// IPv6 in parallel.
func familyTests(t *testing.T, c *Cluster) {
	client := c.Clients[0]
	for _, v6 := range []bool{false, true} {
		fam := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
		t.Run(fam, func(t *testing.T) {
			t.Parallel()
			cip := client.IP(v6)
			for _, pod := range c.Pods {
				dst := netip.AddrPortFrom(pod.IP(v6), echoPort)
				t.Run("tcp/"+pod.Label, func(t *testing.T) {
					begin := time.Now()
					r, err := client.TCP(dst, quick)
					if err != nil {
						t.Fatal(err)
					}
					// Over 1s means a SYN was retransmitted: the lab was not
					// ready (e.g. IPv6 neighbour discovery waiting on DAD).
					if took := time.Since(begin); took > 900*time.Millisecond {
						t.Errorf("took %v", took)
					}
					if r.Identity != pod.Label || r.Source.Addr() != cip || r.From != dst {
						t.Errorf("reply %+v, want identity %s, source %s (no NAT), from %s", r, pod.Label, cip, dst)
					}
				})
				t.Run("udp/"+pod.Label, func(t *testing.T) {
					local := netip.AddrPortFrom(netip.Addr{}, 40000)
					u, err := client.DialUDP(local, dst)
					if err != nil {
						t.Fatal(err)
					}
					defer u.Close()
					for i := range 2 { // the same flow twice
						r, err := u.Exchange(quick)
						if err != nil {
							t.Fatalf("exchange %d: %v", i, err)
						}
						want := netip.AddrPortFrom(cip, 40000)
						if r.Identity != pod.Label || r.Source != want || r.From != dst {
							t.Errorf("exchange %d: reply %+v, want identity %s, source %s, from %s", i, r, pod.Label, want, dst)
						}
					}
				})
			}
			pod0 := c.Pods[0]
			t.Run("refused", func(t *testing.T) {
				dst := netip.AddrPortFrom(pod0.IP(v6), closedPort)
				begin := time.Now()
				_, err := client.TCP(dst, quick)
				wantErr(t, "tcp", err, ErrRefused, time.Since(begin), time.Second)
				// Many in a row: ICMP errors are not rate-limited in a lab.
				for i := range 10 {
					begin = time.Now()
					_, err = client.UDP(dst, quick)
					wantErr(t, fmt.Sprintf("udp %d", i), err, ErrRefused, time.Since(begin), time.Second)
				}
			})
			t.Run("dropped", func(t *testing.T) {
				dst := netip.AddrPortFrom(pod0.IP(v6), droppedPort)
				begin := time.Now()
				_, err := client.TCP(dst, blackhole)
				wantErr(t, "tcp", err, ErrTimeout, time.Since(begin), 2*blackhole)
				begin = time.Now()
				_, err = client.UDP(dst, blackhole)
				wantErr(t, "udp", err, ErrTimeout, time.Since(begin), 2*blackhole)
				// Not dropped from the node itself: the rule is in FORWARD.
				if r, err := c.Node.TCP(dst, quick); err != nil || r.Identity != pod0.Label {
					t.Errorf("node → %s: %+v, %v", dst, r, err)
				}
			})
			t.Run("service-ip-blackholed", func(t *testing.T) {
				svc := ServiceCIDR4.Addr().Next()
				if v6 {
					svc = ServiceCIDR6.Addr().Next()
				}
				_, err := client.TCP(netip.AddrPortFrom(svc, 80), blackhole)
				if !errors.Is(err, ErrTimeout) {
					t.Errorf("tcp to untranslated Service IP %s: %v, want %v", svc, err, ErrTimeout)
				}
			})
			t.Run("pod-to-remote-pod", func(t *testing.T) {
				remote := c.Pods[len(c.Pods)-1]
				if remote.Node != c.Remote {
					t.Fatalf("last pod %s is not on the remote node", remote.Label)
				}
				r, err := pod0.TCP(netip.AddrPortFrom(remote.IP(v6), echoPort), quick)
				if err != nil || r.Identity != remote.Label || r.Source.Addr() != pod0.IP(v6) {
					t.Errorf("%s → %s: %+v, %v", pod0.Label, remote.Label, r, err)
				}
			})
			t.Run("held-connection", func(t *testing.T) {
				conn, err := client.Dial("tcp", netip.AddrPort{}, netip.AddrPortFrom(pod0.IP(v6), echoPort), quick)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(quick))
				buf := make([]byte, 512)
				n, err := conn.Read(buf)
				if err != nil || !strings.HasPrefix(string(buf[:n]), "svcproxy-echo pod0 ") {
					t.Fatalf("greeting %q, %v", buf[:n], err)
				}
				if _, err := conn.Write([]byte("ping\n")); err != nil {
					t.Fatal(err)
				}
				if n, err = conn.Read(buf); err != nil || string(buf[:n]) != "ping\n" {
					t.Fatalf("echo %q, %v", buf[:n], err)
				}
			})
		})
	}

}

func wantErr(t *testing.T, what string, err, want error, took, limit time.Duration) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", what, err, want)
	}
	if took > limit {
		t.Errorf("%s: took %v, want under %v", what, took, limit)
	}
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	Require(t, "sleep")
	var names []string
	var proc *Proc
	t.Run("lab", func(t *testing.T) {
		c := NewCluster(t, ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		for _, ns := range c.Lab.Namespaces() {
			names = append(names, ns.Name)
		}
		var err error
		proc, err = c.Node.Start(c.Node.Command(context.Background(), "sleep", "60"))
		if err != nil {
			t.Fatal(err)
		}
		if out := c.Node.MustRun("ip", "netns", "identify"); !strings.Contains(out, c.Node.Name) {
			t.Errorf("ip netns identify in node = %q", out)
		}
	})
	if len(names) != 3 {
		t.Fatalf("namespaces %v, want node, client0, pod0", names)
	}
	left, err := Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if slices.Contains(left, n) {
			t.Errorf("namespace %s left after cleanup", n)
		}
	}
	select {
	case <-proc.Done():
	default:
		t.Errorf("process %d still running after cleanup", proc.Cmd.Process.Pid)
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	l := NewLab(t)
	ns := l.NewNS("a")
	if err := ns.Do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Do with a panicking fn: %v", err)
	}
	var links string
	if err := ns.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/dev")
		links = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(links, ":") != 1 || !strings.Contains(links, "lo:") {
		t.Errorf("/proc/thread-self/net/dev inside the namespace lists other interfaces than lo:\n%s", links)
	}
	if err := ns.Do(func() error { return errors.ErrUnsupported }); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Do lost fn's error: %v", err)
	}
	other := &NS{Name: "svcp-not-ours", lab: l}
	if _, err := other.Start(ns.Command(context.Background(), "true")); err == nil {
		t.Error("Start accepted a command for another namespace")
	}
}

func TestRequireSkips(t *testing.T) {
	t.Setenv(EnvRequired, "")
	var skipped bool
	t.Run("missing-tool", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Require(t, "svcproxy-no-such-tool")
	})
	if !skipped {
		t.Error("Require did not skip with a missing tool")
	}
}

// TestServiceDNAT shows the shape the proxy tests take: a Service IP
// translated in the node's PREROUTING (from a client) and OUTPUT (from the
// node itself, which relies on the svc0 sink route), then masqueraded.
func TestServiceDNAT(t *testing.T) {
	t.Parallel()
	Require(t, "iptables", "nft")
	c := NewCluster(t, ClusterSpec{Pods: 1})
	c.StartEcho(echoPort)
	pod, client := c.Pods[0], c.Clients[0]
	svc4 := netip.AddrPortFrom(netip.MustParseAddr("198.19.0.10"), 80)
	svc6 := netip.AddrPortFrom(netip.MustParseAddr("2001:db8:19::10"), 80)
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		for _, proto := range []string{"tcp", "udp"} {
			c.Node.MustRun("iptables", "-w", "5", "-t", "nat", "-A", chain, "-d", svc4.Addr().String(), "-p", proto,
				"--dport", "80", "-j", "DNAT", "--to-destination", netip.AddrPortFrom(pod.IPv4, echoPort).String())
		}
	}
	c.Node.MustRun("nft", "add table ip6 svcptest")
	for _, hook := range []string{"prerouting", "output"} {
		c.Node.MustRun("nft", fmt.Sprintf("add chain ip6 svcptest %s { type nat hook %s priority -100 ; }", hook, hook))
		c.Node.MustRun("nft", fmt.Sprintf("add rule ip6 svcptest %s ip6 daddr %s meta l4proto { tcp, udp } th dport 80 dnat to [%s]:%d",
			hook, svc6.Addr(), pod.IPv6, echoPort))
	}
	for _, tc := range []struct {
		svc netip.AddrPort
		v6  bool
	}{{svc4, false}, {svc6, true}} {
		for _, from := range []*Host{client, c.Node} {
			r, err := from.TCP(tc.svc, quick)
			if err != nil || r.Identity != pod.Label || r.From != tc.svc {
				t.Errorf("tcp %s → %s: %+v, %v", from.Label, tc.svc, r, err)
			}
			if from == client && r.Source.Addr() != client.IP(tc.v6) {
				t.Errorf("tcp %s → %s: source %s, want the client's", from.Label, tc.svc, r.Source)
			}
			r, err = from.UDP(tc.svc, quick)
			if err != nil || r.Identity != pod.Label || r.From != tc.svc {
				t.Errorf("udp %s → %s: %+v, %v", from.Label, tc.svc, r, err)
			}
		}
	}
	// Masquerade what the node forwards to the pod: the pod now sees the
	// node's address on its link.
	c.Node.MustRun("iptables", "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-o", "vp64", "-j", "MASQUERADE")
	c.Node.MustRun("nft", "add chain ip6 svcptest post { type nat hook postrouting priority 100 ; }")
	c.Node.MustRun("nft", "add rule ip6 svcptest post oifname vp64 masquerade")
	for _, tc := range []struct {
		svc     netip.AddrPort
		gateway string
	}{{svc4, "198.18.64.1"}, {svc6, "2001:db8:18:40::1"}} {
		r, err := client.TCP(tc.svc, quick)
		if err != nil || r.Source.Addr().String() != tc.gateway {
			t.Errorf("tcp client → %s masqueraded: %+v, %v; want source %s", tc.svc, r, err, tc.gateway)
		}
	}
}
