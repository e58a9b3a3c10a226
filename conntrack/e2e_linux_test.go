//go:build linux

package conntrack_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// Every namespace of these tests is made by internal/testkit/netns (named
// "svcp-<pid>-<lab>-<label>") and removed by its t.Cleanup, on failure too;
// TestMain sweeps any this process left behind. Nothing here reads or writes
// the host namespace's conntrack table, firewall or sysctls (the sysctl test
// only reads host values to show they did not change).

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := netns.Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "conntrack: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	echoPort = 5353
	exchange = 2 * time.Second
)

// family is what the end-to-end test needs of one IP family.
type family struct {
	family    v1.IPFamily
	nlFamily  netlink.InetFamily
	serviceIP string
	nft       string // "ip" or "ip6"
}

var families = []family{
	{v1.IPv4Protocol, unix.AF_INET, "198.19.0.10", "ip"},
	{v1.IPv6Protocol, unix.AF_INET6, "2001:db8:19::10", "ip6"},
}

// dnatRules returns nft commands that send UDP port 53 and TCP port 80 of each
// family's Service IP to target's echo port.
func dnatRules(target *netns.Host) string {
	var b strings.Builder
	b.WriteString("flush chain inet svcp_ct prerouting\n")
	for _, f := range families {
		pod := target.IP(f.family == v1.IPv6Protocol)
		dst := netip.AddrPortFrom(pod, echoPort)
		for _, p := range []struct {
			proto string
			port  int
		}{{"udp", 53}, {"tcp", 80}} {
			fmt.Fprintf(&b, "add rule inet svcp_ct prerouting %s daddr %s %s dport %d dnat %s to %s\n",
				f.nft, f.serviceIP, p.proto, p.port, f.nft, dst)
		}
	}
	return b.String()
}

// nftApply runs an nft script inside ns (never the host namespace).
func nftApply(t *testing.T, ns *netns.Host, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := ns.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s\n%s", ns.Label, err, out, script)
	}
}

// nodeHandle returns a netlink handle whose only socket (NETLINK_NETFILTER) is
// in ns, closed with the test.
func nodeHandle(t *testing.T, ns *netns.NS) *netlink.Handle {
	t.Helper()
	nsh, err := vnetns.GetFromPath("/var/run/netns/" + ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// The seed problem, on a real kernel: a UDP client with a fixed source port
// keeps reaching the old pod through its conntrack entry after the Service's
// DNAT changed, until the executor removes the entry that StaleFilters
// selects; a TCP connection through the same Service IP survives.
func TestE2EStaleUDPEntry(t *testing.T) {
	netns.Require(t, "nft")
	start := time.Now()
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, Clients: 1})
	c.StartEcho(echoPort)
	podA, podB, client, node := c.Pods[0], c.Pods[1], c.Clients[0], c.Node
	nftApply(t, node, "add table inet svcp_ct\nadd chain inet svcp_ct prerouting { type nat hook prerouting priority dstnat; policy accept; }\n"+dnatRules(podA))
	t.Logf("lab built in %v", time.Since(start))

	type conns struct {
		udp *netns.UDPClient
		tcp net.Conn
		rd  *bufio.Reader
	}
	open := map[v1.IPFamily]*conns{}
	for i, f := range families {
		svcIP := netip.MustParseAddr(f.serviceIP)
		local := netip.AddrPortFrom(client.IP(f.family == v1.IPv6Protocol), uint16(40000+i))
		u, err := client.DialUDP(local, netip.AddrPortFrom(svcIP, 53))
		if err != nil {
			t.Fatal(err)
		}
		r, err := u.Exchange(exchange)
		if err != nil || r.Identity != podA.Label {
			t.Fatalf("%s: UDP before the change: %+v, %v; want an answer from %s", f.family, r, err, podA.Label)
		}
		tc, err := client.Dial("tcp", netip.AddrPort{}, netip.AddrPortFrom(svcIP, 80), exchange)
		if err != nil {
			t.Fatalf("%s: TCP: %v", f.family, err)
		}
		t.Cleanup(func() { tc.Close() })
		rd := bufio.NewReader(tc)
		tc.SetDeadline(time.Now().Add(exchange))
		line, err := rd.ReadString('\n')
		if err != nil || !strings.Contains(line, " "+podA.Label+" ") {
			t.Fatalf("%s: TCP greeting %q, %v; want one from %s", f.family, line, err, podA.Label)
		}
		open[f.family] = &conns{udp: u, tcp: tc, rd: rd}
	}

	// The Service now has pod B only.
	nftApply(t, node, dnatRules(podB))
	h := nodeHandle(t, node.NS)
	for _, f := range families {
		r, err := open[f.family].udp.Exchange(exchange)
		if err != nil || r.Identity != podA.Label {
			t.Fatalf("%s: UDP after the DNAT change, before cleanup: %+v, %v; want %s still (its conntrack entry)", f.family, r, err, podA.Label)
		}
		// The handle must list the node's table: our entry is there.
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, f.nlFamily)
		if err != nil {
			t.Fatal(err)
		}
		stale := netip.AddrPortFrom(podA.IP(f.family == v1.IPv6Protocol), echoPort)
		found := false
		for _, fl := range flows {
			if cf, ok := conntrack.FlowFromNetlink(fl); ok && cf.Protocol == v1.ProtocolUDP && cf.ReplySrc == stale &&
				cf.OrigDst == netip.AddrPortFrom(netip.MustParseAddr(f.serviceIP), 53) {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: the node's conntrack table (%d entries) has no UDP entry to %s via %s", f.family, len(flows), stale, f.serviceIP)
		}
	}

	// The cleaner opens its own handle in the node's namespace, by path,
	// as the executors do with their NetNS.
	cleaner, err := conntrack.NewNetlinkCleaner(conntrack.CleanerConfig{NetNS: "/var/run/netns/" + node.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer cleaner.Close()
	for _, f := range families {
		podB4, podB6 := podB.IPv4.String(), podB.IPv6.String()
		ep := podB4
		if f.family == v1.IPv6Protocol {
			ep = podB6
		}
		rs := build(t, f.family,
			svc{name: "dns", clusterIP: f.serviceIP, port: 53, target: echoPort, eps: []string{ep}},
			svc{name: "web", proto: v1.ProtocolTCP, clusterIP: f.serviceIP, port: 80, target: echoPort, eps: []string{ep}},
		)
		filters := conntrack.StaleFilters(rs, conntrack.Options{})
		t0 := time.Now()
		res, err := cleaner.Clean(f.family, filters)
		if err != nil {
			t.Fatalf("%s: Clean: %v", f.family, err)
		}
		t.Logf("%s: Clean(%v) = %+v in %v", f.family, filters, res, time.Since(t0).Round(time.Microsecond))
		if res.Matched != 1 || res.Deleted != 1 || res.Scanned < 2 {
			t.Errorf("%s: Clean = %+v; want exactly the one stale UDP entry deleted out of at least 2 (UDP and TCP)", f.family, res)
		}

		o := open[f.family]
		r, err := o.udp.Exchange(exchange)
		if err != nil || r.Identity != podB.Label {
			t.Errorf("%s: UDP after cleanup, same socket %s: %+v, %v; want an answer from %s", f.family, o.udp.Local(), r, err, podB.Label)
		}
		// The TCP connection made before still talks to pod A.
		o.tcp.SetDeadline(time.Now().Add(exchange))
		if _, err := fmt.Fprintf(o.tcp, "still-there\n"); err != nil {
			t.Errorf("%s: TCP write after cleanup: %v", f.family, err)
		} else if line, err := o.rd.ReadString('\n'); err != nil || line != "still-there\n" {
			t.Errorf("%s: TCP echo after cleanup: %q, %v; want the connection to pod A intact", f.family, line, err)
		}
		// Running again finds nothing more to delete.
		if res, err := cleaner.Clean(f.family, filters); err != nil || res.Deleted != 0 || res.Matched != 0 {
			t.Errorf("%s: second Clean = %+v, %v; want nothing deleted", f.family, res, err)
		}
	}
	if res, err := cleaner.Clean(v1.IPv4Protocol, nil); err != nil || res != (conntrack.CleanResult{}) {
		t.Errorf("Clean with no filters = %+v, %v; want nothing done", res, err)
	}
	if _, err := cleaner.Clean("IPv5", []conntrack.Filter{{Protocol: v1.ProtocolUDP, Frontend: netip.MustParseAddrPort("198.19.0.10:53")}}); err == nil {
		t.Error("Clean of an unknown family gave no error")
	}
	sctp := []conntrack.Filter{{Protocol: v1.ProtocolSCTP, Frontend: netip.MustParseAddrPort("198.19.0.10:3868")}}
	if res, err := cleaner.Clean(v1.IPv4Protocol, sctp); err == nil || !strings.Contains(err.Error(), "SCTP") || res.Scanned != 0 {
		t.Errorf("Clean with SCTP filters only = %+v, %v; want an SCTP error and no listing", res, err)
	}
	// A handle without a netfilter socket would fall back to the calling
	// thread's namespace: refused.
	nsh, err := vnetns.GetFromPath("/var/run/netns/" + node.Name)
	if err != nil {
		t.Fatal(err)
	}
	routeOnly, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	nsh.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer routeOnly.Close()
	if _, err := conntrack.NewNetlinkCleaner(conntrack.CleanerConfig{Handle: routeOnly}); err == nil {
		t.Error("NewNetlinkCleaner accepted a handle without NETLINK_NETFILTER")
	}
	if _, err := conntrack.NewNetlinkCleaner(conntrack.CleanerConfig{Handle: h, NetNS: "/var/run/netns/" + node.Name}); err == nil {
		t.Error("NewNetlinkCleaner accepted both a handle and a namespace")
	}
	t.Logf("total %v", time.Since(start))
}

// The SysctlWriter against the real /proc/sys of a test namespace, with the
// per-namespace sysctls only; the host's values must not move.
func TestE2ESysctlWriterInNamespace(t *testing.T) {
	lab := netns.NewLab(t)
	ns := lab.NewNS("ctsysctl")
	perNetns := []string{
		conntrack.SysctlTCPEstablishedTimeout, conntrack.SysctlTCPCloseWaitTimeout,
		conntrack.SysctlTCPBeLiberal, conntrack.SysctlUDPTimeout, conntrack.SysctlUDPStreamTimeout,
	}
	hostBefore := readHost(t, perNetns)

	var settings []conntrack.Setting
	var changes, again []conntrack.Change
	var before, inside map[string]int
	var modes map[string]os.FileMode
	err := ns.Do(func() error {
		var err error
		if before, err = readAll(perNetns); err != nil {
			return err
		}
		// Values unlike both the host's and the namespace's, so that a
		// write is needed and a leak to the host would show.
		differ := func(n string, plus int) time.Duration {
			return time.Duration(max(before[n], hostBefore[n])+plus) * time.Second
		}
		sizing := conntrack.Sizing{
			TCPEstablishedTimeout: differ(conntrack.SysctlTCPEstablishedTimeout, 3600),
			TCPCloseWaitTimeout:   differ(conntrack.SysctlTCPCloseWaitTimeout, 60),
			UDPTimeout:            differ(conntrack.SysctlUDPTimeout, 7),
			UDPStreamTimeout:      differ(conntrack.SysctlUDPStreamTimeout, 11),
			TCPBeLiberal:          true,
		}
		if settings, err = sizing.Settings(1); err != nil {
			return err
		}
		if changes, err = (conntrack.SysctlWriter{}).Apply(settings); err != nil {
			return err
		}
		if again, err = (conntrack.SysctlWriter{}).Apply(settings); err != nil {
			return err
		}
		if inside, err = readAll(perNetns); err != nil {
			return err
		}
		modes = map[string]os.FileMode{}
		for _, n := range append([]string{conntrack.SysctlMax, conntrack.SysctlBuckets}, perNetns...) {
			st, err := os.Stat("/proc/sys/" + n)
			if err != nil {
				return err
			}
			modes[n] = st.Mode().Perm()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantChanges []conntrack.Change
	for _, s := range settings {
		if before[s.Name] != s.Value {
			wantChanges = append(wantChanges, conntrack.Change{Name: s.Name, Old: before[s.Name], New: s.Value})
		}
	}
	if diff := cmp.Diff(wantChanges, changes); diff != "" || len(changes) < 4 {
		t.Errorf("first Apply (-want +got):\n%s", diff)
	}
	if len(again) != 0 {
		t.Errorf("second Apply changed %v; want nothing", again)
	}
	for _, s := range settings {
		if inside[s.Name] != s.Value {
			t.Errorf("in the namespace %s = %d, want %d", s.Name, inside[s.Name], s.Value)
		}
	}
	if hostAfter := readHost(t, perNetns); fmt.Sprint(hostAfter) != fmt.Sprint(hostBefore) {
		t.Errorf("host sysctls moved: before %v, after %v", hostBefore, hostAfter)
	}
	for _, n := range append([]string{conntrack.SysctlMax, conntrack.SysctlBuckets}, perNetns...) {
		t.Logf("in a network namespace: %s mode %v", n, modes[n])
	}
	for _, n := range []string{conntrack.SysctlMax, conntrack.SysctlBuckets} {
		if modes[n]&0o222 != 0 {
			t.Errorf("%s is writable in a network namespace (mode %v): the docs say global and read-only there", n, modes[n])
		}
	}
	for _, n := range perNetns {
		if modes[n]&0o200 == 0 {
			t.Errorf("%s is read-only in a network namespace (mode %v): the docs say per-namespace", n, modes[n])
		}
	}
}

// readAll reads sysctls in the calling thread's namespace.
func readAll(names []string) (map[string]int, error) {
	out := map[string]int{}
	for _, n := range names {
		v, err := conntrack.ReadSysctl("/proc/sys/" + n)
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}

// readHost reads sysctls in the test process's own namespace (reads only).
func readHost(t *testing.T, names []string) map[string]int {
	t.Helper()
	out, err := readAll(names)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ReadSample against the real /proc from inside a namespace that has
// conntrack entries: the count is the namespace's, not the host's.
func TestE2EReadSampleInNamespace(t *testing.T) {
	netns.Require(t, "nft")
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, Clients: 1})
	c.StartEcho(echoPort)
	// A rule that uses conntrack, so the node tracks the flows below.
	nftApply(t, c.Node, "add table inet svcp_ct\nadd chain inet svcp_ct prerouting { type nat hook prerouting priority dstnat; policy accept; }\n"+
		fmt.Sprintf("add rule inet svcp_ct prerouting ip daddr 198.19.0.10 udp dport 53 dnat ip to %s:%d\n", c.Pods[0].IPv4, echoPort))
	const flows = 5
	for i := range flows {
		u, err := c.Clients[0].DialUDP(netip.AddrPortFrom(c.Clients[0].IPv4, uint16(41000+i)), netip.MustParseAddrPort("198.19.0.10:53"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.Exchange(exchange); err != nil {
			t.Fatal(err)
		}
	}
	var s conntrack.Sample
	var statLines int
	err := c.Node.Do(func() error {
		var err error
		if s, err = conntrack.ReadSample(""); err != nil {
			return err
		}
		b, err := os.ReadFile("/proc/thread-self/net/stat/nf_conntrack")
		statLines = strings.Count(string(b), "\n") - 1
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h := conntrack.Assess(nil, s)
	t.Logf("node namespace: %+v → %s, fill %.6f", s, h.Level, h.Fill)
	if s.Count < flows || s.Count > 100 {
		t.Errorf("Count = %d, want the node namespace's few entries (at least %d)", s.Count, flows)
	}
	if s.Max <= 0 {
		t.Errorf("Max = %d", s.Max)
	}
	if len(s.CPUs) != statLines || len(s.CPUs) == 0 {
		t.Errorf("%d CPU lines parsed, the file has %d", len(s.CPUs), statLines)
	}
	if h.Level != conntrack.LevelOK {
		t.Errorf("Assess = %+v, want ok for a near-empty table", h)
	}
	// A namespace with no conntrack users has an empty table of its own.
	err = c.Clients[0].Do(func() error {
		var err error
		s, err = conntrack.ReadSample("")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Count != 0 {
		t.Errorf("client namespace Count = %d, want 0 (no conntrack users there)", s.Count)
	}
}
