//go:build linux

package engine

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/iptables"
)

// The kernel test works only in namespaces made by internal/testkit/netns
// and removed by its t.Cleanup, on failure too; TestMain sweeps any left.
// The iptables executor and the conntrack cleaner reach the node's
// namespace through a path and a netlink handle: the test process never
// leaves the host namespace and never touches its firewall or conntrack.

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := netns.Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "engine: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}

// conntrackIn is a conntrack cleaner and a netlink handle whose socket is
// in ns, closed with the test.
func conntrackIn(t *testing.T, ns *netns.NS) (*conntrack.NetlinkCleaner, *netlink.Handle) {
	t.Helper()
	nsh, err := vnetns.GetFromPath(filepath.Join("/run/netns", ns.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	cleaner, err := conntrack.NewNetlinkCleaner(conntrack.CleanerConfig{Handle: h})
	if err != nil {
		t.Fatal(err)
	}
	return cleaner, h
}

// entriesTo counts the UDP conntrack entries of ns whose original
// destination is dst.
func entriesTo(t *testing.T, h *netlink.Handle, dst netip.AddrPort) int {
	t.Helper()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flows {
		if fl, ok := conntrack.FlowFromNetlink(f); ok && fl.Protocol == v1.ProtocolUDP && fl.OrigDst == dst {
			n++
		}
	}
	return n
}

// TestKernelServiceDeletedBeforeSlice: on a real kernel, a UDP client with
// a fixed source port reaches a pod through a Service; the Service is
// deleted while its EndpointSlice stays; the engine's sync of that delete
// removes the client's conntrack entry, so that the client's next packet is
// no longer sent to the pod.
func TestKernelServiceDeletedBeforeSlice(t *testing.T) {
	netns.Require(t, "iptables", "iptables-restore")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, Clients: 1})
	c.StartEcho(5353)
	pod, client := c.Pods[0], c.Clients[0]
	backend, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: v1.IPv4Protocol, NetNS: filepath.Join("/run/netns", c.Node.Name)})
	if err != nil {
		t.Fatal(err)
	}
	cleaner, h := conntrackIn(t, c.Node.NS)
	w := newWorld(t)
	w.addUDPService("dns", "198.19.0.10", pod.IPv4.String())
	var events []SyncEvent
	e, err := New(Config{
		Backends:  map[v1.IPFamily]Backend{v1.IPv4Protocol: backend},
		Provider:  w,
		Conntrack: cleaner,
		OnSync:    func(ev SyncEvent) { events = append(events, ev) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}

	frontend := netip.MustParseAddrPort("198.19.0.10:53")
	u, err := client.DialUDP(netip.AddrPortFrom(client.IPv4, 40053), frontend)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := u.Exchange(2 * time.Second); err != nil || r.Identity != pod.Label {
		t.Fatalf("UDP through the Service: %+v, %v; want an answer from %s", r, err, pod.Label)
	}
	if n := entriesTo(t, h, frontend); n != 1 {
		t.Fatalf("%d conntrack entries to %v after the exchange, want 1", n, frontend)
	}

	w.services.Delete("ns1", "dns")
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := events[len(events)-1].Conntrack[v1.IPv4Protocol]; got.Err != nil || got.Deleted != 1 {
		t.Errorf("cleanup at the Service's delete: %+v; want 1 entry deleted", got)
	}
	if n := entriesTo(t, h, frontend); n != 0 {
		t.Errorf("%d conntrack entries to %v after the Service's delete, want 0", n, frontend)
	}
	if r, err := u.Exchange(500 * time.Millisecond); err == nil {
		t.Errorf("UDP after the Service's delete still answered by %s", r.Identity)
	}
}
