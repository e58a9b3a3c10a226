//go:build linux

package nfacct

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestCounterInNamespace creates a counter in a namespace of its own,
// counts real packets into it with an iptables rule, and reads them back;
// the host namespace's objects are not touched.
func TestCounterInNamespace(t *testing.T) {
	netns.Require(t, "iptables", "iptables-save")
	lab := netns.NewLab(t)
	ns := lab.NewNS("nfacct")
	const name = "svcproxy_test_pkts"

	var conn *Conn
	if err := ns.Do(func() (err error) { conn, err = Dial(); return err }); err != nil {
		t.Fatalf("Dial in the namespace: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Get(name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Ensure: %v; want ErrNotFound", err)
	}
	for range 2 { // the second Ensure finds it
		if err := conn.Ensure(name); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	ns.MustRun("iptables", "-w", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", "9", "-m", "nfacct", "--nfacct-name", name, "-j", "ACCEPT")
	const sent = 3
	dst := netip.MustParseAddrPort("127.0.0.1:9")
	for range sent {
		u, err := ns.DialUDP(netip.AddrPort{}, dst)
		if err != nil {
			t.Fatal(err)
		}
		u.Exchange(50 * time.Millisecond) // nobody answers: one packet out
		u.Close()
	}
	c, err := conn.Get(name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if c.Name != name || c.Packets != sent || c.Bytes == 0 {
		t.Errorf("Get = %+v; want %s with %d packets and some bytes", c, name, sent)
	}
	if err := conn.Ensure(name); err != nil {
		t.Fatal(err)
	}
	if again, _ := conn.Get(name); again.Packets != sent {
		t.Errorf("Ensure of an existing counter reset it: %+v", again)
	}
	// The host namespace has no such object: the Conn worked in the
	// namespace only.
	host, err := Dial()
	if err != nil {
		t.Skipf("no nfnetlink_acct reachable in the host namespace to compare with: %v", err)
	}
	defer host.Close()
	if _, err := host.Get(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("the host namespace has %s too (%v): the Conn did not work in the namespace", name, err)
	}
}

// TestNames refuses names the kernel cannot hold, without asking it.
func TestNames(t *testing.T) {
	c := &Conn{}
	for _, name := range []string{"", strings.Repeat("a", MaxNameLength+1)} {
		if _, err := c.Get(name); err == nil {
			t.Errorf("Get(%q): no error", name)
		}
		if err := c.Ensure(name); err == nil {
			t.Errorf("Ensure(%q): no error", name)
		}
	}
}

// TestDecode reads the kernel's replies and refuses what is not one.
func TestDecode(t *testing.T) {
	reply := []byte{0, 0, 0, 0,
		8, 0, attrName, 0, 'a', 'b', 0, 0,
		12, 0, attrPackets, 0, 0, 0, 0, 0, 0, 0, 0, 7,
		12, 0, attrBytes, 0, 0, 0, 0, 0, 0, 0, 1, 0,
	}
	if c, ok := decode(reply); !ok || c != (Counter{Name: "ab", Packets: 7, Bytes: 256}) {
		t.Errorf("decode = %+v, %v", c, ok)
	}
	for _, bad := range [][]byte{nil, {0, 0}, {0, 0, 0, 0, 3, 0}, reply[:4]} {
		if c, ok := decode(bad); ok {
			t.Errorf("decode(%v) = %+v; want nothing", bad, c)
		}
	}
}
