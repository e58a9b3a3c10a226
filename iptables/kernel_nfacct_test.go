//go:build linux

package iptables

import (
	"context"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/nfacct"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestKernelNFAcct: an Executor with NFAcct creates kube-proxy's two
// counters in the node's namespace and its rules count real packets into
// them: connections to a NodePort on 127.0.0.1 from the node, and TCP
// packets that conntrack finds INVALID forwarded from a client to a pod.
// With TCPBeLiberal the INVALID packets are no longer dropped nor counted.
// The host namespace gets no counter.
func TestKernelNFAcct(t *testing.T) {
	netns.Require(t, kernelTools...)
	hostBefore := hostCounters(t)
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
	c.StartEcho(8080)
	c.Node.Sysctl("net.ipv4.conf.all.route_localnet", "1")
	ctx := context.Background()
	cfg := testConfig()
	cfg.LocalhostNodePorts = true
	rs := build(t, cfg, service("ns1", "web", "198.19.0.10", nodePort(30080)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
	nodeNS := filepath.Join("/run/netns", c.Node.Name)

	e, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, NetNS: nodeNS, NFAcct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Sync(ctx, rs); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := e.NFAcctErr(); err != nil {
		t.Fatalf("NFAcctErr: %v; this kernel has nfnetlink_acct", err)
	}
	saved := c.Node.MustRun("iptables-save")
	// iptables-save orders the matches its own way.
	for _, want := range []string{
		"-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP",
		"-A KUBE-NODEPORTS -d 127.0.0.0/8 -p tcp -m comment --comment \"ns1/web:p80\" -m tcp --dport 30080 -m nfacct --nfacct-name  localhost_nps_accepted_pkts -j KUBE-EXT-",
	} {
		if !hasLinePrefix(saved, want) {
			t.Errorf("iptables-save in the node has no %q:\n%s", want, saved)
		}
	}

	const connections = 3
	for range connections {
		r, err := c.Node.TCP(netip.MustParseAddrPort("127.0.0.1:30080"), 2*time.Second)
		if err != nil || r.Identity != "pod0" {
			t.Fatalf("the NodePort on 127.0.0.1: %+v, %v; want pod0", r, err)
		}
	}
	// Only the first packet of a connection goes through the nat table.
	wantCounter(t, e, CounterLocalhostNodePorts, connections)

	const invalid = 2
	pod := netip.AddrPortFrom(c.Pods[0].IPv4, 8080)
	for range invalid {
		sendSynFin(t, c.Clients[0], pod)
	}
	wantCounter(t, e, CounterInvalidDropped, invalid)

	// tcp_be_liberal: the drop goes, the counter stays where it was.
	liberal, err := NewExecutor(ExecutorConfig{Family: v1.IPv4Protocol, NetNS: nodeNS, NFAcct: true, TCPBeLiberal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer liberal.Close()
	if _, err := liberal.Sync(ctx, rs); err != nil {
		t.Fatalf("Sync with TCPBeLiberal: %v", err)
	}
	if saved := c.Node.MustRun("iptables-save"); strings.Contains(saved, "--ctstate INVALID") {
		t.Errorf("TCPBeLiberal: KUBE-FORWARD still drops INVALID packets:\n%s", saved)
	}
	for range invalid {
		sendSynFin(t, c.Clients[0], pod)
	}
	wantCounter(t, liberal, CounterInvalidDropped, invalid)
	if err := liberal.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if after := hostCounters(t); after != hostBefore {
		t.Errorf("the host namespace's nfacct objects changed: %q, then %q", hostBefore, after)
	}
}

// wantCounter waits (briefly: the packets are already through) until the
// counter name of e reads want, and fails if it does not.
func wantCounter(t *testing.T, e *Executor, name string, want uint64) {
	t.Helper()
	var got uint64
	var err error
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, err = e.Counter(name); err == nil && got == want {
			return
		}
	}
	t.Errorf("counter %s: %d packets, %v; want %d", name, got, err, want)
}

// hostCounters lists, without changing anything, the host namespace's
// nfacct objects ("" when it cannot tell).
func hostCounters(t *testing.T) string {
	conn, err := nfacct.Dial()
	if err != nil {
		return ""
	}
	defer conn.Close()
	all, err := conn.List()
	if err != nil {
		return ""
	}
	var names []string
	for _, c := range all {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

// sendSynFin sends, from the client's namespace, one TCP segment with SYN
// and FIN set to dst: a flag combination conntrack marks INVALID.
func sendSynFin(t *testing.T, client *netns.Host, dst netip.AddrPort) {
	t.Helper()
	err := client.Do(func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		seg := tcpSegment(client.IPv4, dst, 0x01|0x02) // FIN|SYN
		return syscall.Sendto(fd, seg, 0, &syscall.SockaddrInet4{Addr: dst.Addr().As4()})
	})
	if err != nil {
		t.Fatalf("sending a SYN|FIN segment: %v", err)
	}
}

// tcpSegment is a 20-byte TCP header from src:40000 to dst with flags and
// its checksum.
func tcpSegment(src netip.Addr, dst netip.AddrPort, flags byte) []byte {
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], 40000)
	binary.BigEndian.PutUint16(seg[2:], dst.Port())
	binary.BigEndian.PutUint32(seg[4:], 1)
	seg[12] = 5 << 4
	seg[13] = flags
	binary.BigEndian.PutUint16(seg[14:], 65535)
	s, d := src.As4(), dst.Addr().As4()
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, syscall.IPPROTO_TCP, 0, byte(len(seg)))
	binary.BigEndian.PutUint16(seg[16:], checksum(append(pseudo, seg...)))
	return seg
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
