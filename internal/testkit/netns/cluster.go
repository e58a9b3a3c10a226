//go:build linux

package netns

import (
	"fmt"
	"net/netip"
	"testing"
)

// Address ranges of a Cluster (see the package documentation).
var (
	NodeCIDR4    = netip.MustParsePrefix("198.18.0.0/24")
	NodeCIDR6    = netip.MustParsePrefix("2001:db8:18::/64")
	ClientCIDR4  = netip.MustParsePrefix("198.18.32.0/19")
	ClientCIDR6  = netip.MustParsePrefix("2001:db8:18:20::/59")
	PodCIDR4     = netip.MustParsePrefix("198.18.64.0/18")
	PodCIDR6     = netip.MustParsePrefix("2001:db8:18:40::/58")
	ServiceCIDR4 = netip.MustParsePrefix("198.19.0.0/16")
	ServiceCIDR6 = netip.MustParsePrefix("2001:db8:19::/108")
)

const (
	maxClients   = 32
	maxPods      = 64
	clientSubnet = 32 // third octet of client0's /24
	podSubnet    = 64 // third octet of pod0's /24
)

// ClusterSpec is the shape of a Cluster.
type ClusterSpec struct {
	Pods       int // pods on the node; with RemotePods at most 64 in all
	RemotePods int // pods on a remote node; > 0 creates it
	Clients    int // client namespaces, at most 32; 0 means 1
}

// Host is a namespace of a Cluster with its addresses.
type Host struct {
	*NS
	IPv4, IPv6 netip.Addr
	// Node is, for a pod or client, the node it hangs off; nil for nodes.
	Node *Host
}

// IP returns the host's IPv6 address if ipv6, else its IPv4 one.
func (h *Host) IP(ipv6 bool) netip.Addr {
	if ipv6 {
		return h.IPv6
	}
	return h.IPv4
}

// Cluster is the lab shape of the proxy end-to-end tests: clients and local
// pods each joined to Node by a veth, remote pods joined to Remote, Remote
// joined to Node. Node forwards and is where the proxy's rules go.
type Cluster struct {
	Lab     *Lab
	Node    *Host   // 198.18.0.1, 2001:db8:18::1
	Remote  *Host   // 198.18.0.2, 2001:db8:18::2; nil without remote pods
	Pods    []*Host // "pod0"…: the local ones first, then the remote ones
	Clients []*Host // "client0"…
}

// NewCluster builds the namespaces of spec in a new Lab (which calls
// Require). Pod i is 198.18.(64+i).2; client j is 198.18.(32+j).2; each
// routes everything through its node, whose address on that link is .1.
// Node and Remote have net.ipv4.ip_forward and net.ipv6.conf.all.forwarding
// set to 1, in their own namespaces only. Node's address is on its link to
// Remote (eth0), or on lo when there is no Remote. Node routes
// ServiceCIDR4/6 to svc0, a sink (see NS.AddSink). No echo servers run until
// StartEcho.
func NewCluster(t testing.TB, spec ClusterSpec) *Cluster {
	t.Helper()
	if spec.Clients == 0 {
		spec.Clients = 1
	}
	if spec.Pods < 0 || spec.RemotePods < 0 || spec.Clients < 0 ||
		spec.Pods+spec.RemotePods > maxPods || spec.Clients > maxClients {
		t.Fatalf("netns: bad ClusterSpec %+v (at most %d pods and %d clients)", spec, maxPods, maxClients)
	}
	l := NewLab(t)
	c := &Cluster{Lab: l}
	c.Node = c.newNode("node", 1)
	if spec.RemotePods > 0 {
		c.Remote = c.newNode("remote", 2)
		l.Veth(c.Node.NS, "eth0", c.Remote.NS, "eth0")
		c.Remote.AddAddr("eth0", netip.PrefixFrom(c.Remote.IPv4, 24))
		c.Remote.AddAddr("eth0", netip.PrefixFrom(c.Remote.IPv6, 64))
		c.Remote.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), c.Node.IPv4, "eth0")
		c.Remote.AddRoute(netip.MustParsePrefix("::/0"), c.Node.IPv6, "eth0")
		c.Node.AddAddr("eth0", netip.PrefixFrom(c.Node.IPv4, 24))
		c.Node.AddAddr("eth0", netip.PrefixFrom(c.Node.IPv6, 64))
	} else {
		c.Node.AddAddr("lo", netip.PrefixFrom(c.Node.IPv4, 32))
		c.Node.AddAddr("lo", netip.PrefixFrom(c.Node.IPv6, 128))
	}
	c.Node.AddSink("svc0")
	c.Node.AddRoute(ServiceCIDR4, netip.Addr{}, "svc0")
	c.Node.AddRoute(ServiceCIDR6, netip.Addr{}, "svc0")

	for j := range spec.Clients {
		c.Clients = append(c.Clients, c.attach(c.Node, fmt.Sprintf("client%d", j), "vc", clientSubnet+j))
	}
	for i := range spec.Pods + spec.RemotePods {
		node := c.Node
		if i >= spec.Pods {
			node = c.Remote
		}
		pod := c.attach(node, fmt.Sprintf("pod%d", i), "vp", podSubnet+i)
		if node == c.Remote {
			for _, p := range []netip.Prefix{subnet4(podSubnet + i), subnet6(podSubnet + i)} {
				c.Node.AddRoute(p, c.Remote.IP(p.Addr().Is6()), "eth0")
			}
		}
		c.Pods = append(c.Pods, pod)
	}
	return c
}

// newNode creates a forwarding node namespace with host number n in
// NodeCIDR4/6.
func (c *Cluster) newNode(label string, n byte) *Host {
	h := &Host{NS: c.Lab.NewNS(label), IPv4: addr4(0, n), IPv6: addr6(0, n)}
	h.Sysctl("net.ipv4.ip_forward", "1")
	h.Sysctl("net.ipv6.conf.all.forwarding", "1")
	return h
}

// attach creates namespace label joined to node by a veth (node side
// "<prefix><n>", host side eth0) on subnet x: node .1, host .2, host's
// default routes via node.
func (c *Cluster) attach(node *Host, label, prefix string, x int) *Host {
	h := &Host{NS: c.Lab.NewNS(label), IPv4: addr4(x, 2), IPv6: addr6(x, 2), Node: node}
	dev := fmt.Sprintf("%s%d", prefix, x)
	c.Lab.Veth(node.NS, dev, h.NS, "eth0")
	node.AddAddr(dev, netip.PrefixFrom(addr4(x, 1), 24))
	node.AddAddr(dev, netip.PrefixFrom(addr6(x, 1), 64))
	h.AddAddr("eth0", netip.PrefixFrom(h.IPv4, 24))
	h.AddAddr("eth0", netip.PrefixFrom(h.IPv6, 64))
	h.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), addr4(x, 1), "eth0")
	h.AddRoute(netip.MustParsePrefix("::/0"), addr6(x, 1), "eth0")
	return h
}

// StartEcho starts an echo server on port in every pod, identified by the
// pod's label, and fails the test on error.
func (c *Cluster) StartEcho(port uint16) {
	c.Lab.t.Helper()
	for _, p := range c.Pods {
		if _, err := p.StartEcho(p.Label, port); err != nil {
			c.Lab.t.Fatal(err)
		}
	}
}

// addr4 is 198.18.x.n.
func addr4(x int, n byte) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(x), n}) }

// addr6 is 2001:db8:18:<x in hex>::<n>.
func addr6(x int, n byte) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x18, 0, byte(x), 15: n})
}

func subnet4(x int) netip.Prefix { return netip.PrefixFrom(addr4(x, 0), 24) }
func subnet6(x int) netip.Prefix { return netip.PrefixFrom(addr6(x, 0), 64) }
