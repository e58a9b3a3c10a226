// Package netns is the harness that end-to-end tests use to push real packets
// through a real kernel inside network namespaces that the test creates.
//
// # Use
//
//	func TestClusterIP(t *testing.T) {
//		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2, RemotePods: 1})
//		c.StartEcho(8080)                        // every pod answers with its label
//		c.Node.MustRun("iptables-restore", ...)  // or hand c.Node.Command to an executor
//		svc := netip.MustParseAddrPort("198.19.0.10:80")
//		r, err := c.Clients[0].TCP(svc, 2*time.Second)
//		// r.Identity == "pod1", r.Source.Addr() == c.Clients[0].IPv4 (not masqueraded)
//		u, _ := c.Clients[0].DialUDP(netip.AddrPortFrom(netip.Addr{}, 40000), svc)
//		r, err = u.Exchange(time.Second)            // again later: same conntrack flow
//		_, err = c.Clients[0].TCP(noEndpoints, time.Second) // errors.Is(err, netns.ErrRefused)
//	}
//
// # Shape
//
// A [Lab] owns a set of namespaces ([NS]) and everything started in them; it
// is torn down by t.Cleanup, on failure too: sockets closed, processes killed
// by PID (process group), namespaces deleted. [NewCluster] builds the shape
// the proxy tests use on top of a Lab:
//
//	client0 ─┐                       ┌─ pod0   (local pods)
//	client1 ─┼── node ───────────────┼─ pod1
//	         │   (proxy rules here)  └─ eth0 ── remote ─┬─ pod2 (remote pods)
//	                                                    └─ pod3
//
// Every pod and client is a namespace joined to its node by a veth pair with
// its own /24 (IPv4) and /64 (IPv6); the node has forwarding on and routes
// between them, so traffic from a client to a pod crosses the node's
// PREROUTING, FORWARD and POSTROUTING hooks exactly like pod traffic on a real
// node. Routed veths rather than a bridge: no br_netfilter, and hairpin
// (pod → Service → same pod) works without hairpin mode. A "remote" node,
// created when remote pods are requested, is reached from the node over
// a second veth; remote pods route through it. Node-originated traffic to
// Service IPs routes to a sink interface (svc0, see NS.AddSink), so OUTPUT
// DNAT works and packets that are not translated vanish.
//
// # Addresses
//
// Only the benchmarking ranges are used, and nothing links the namespaces to
// the host namespace: no veth into it, no route out.
//
//	nodes    198.18.0.0/24   2001:db8:18::/64     node .1/::1, remote .2/::2
//	clients  198.18.32.0/19  2001:db8:18:20::/59  client j: 198.18.(32+j).2
//	pods     198.18.64.0/18  2001:db8:18:40::/58  pod i:    198.18.(64+i).2
//	services 198.19.0.0/16   2001:db8:19::/108    (never on an interface)
//
// The IPv6 address of a host is its IPv4 third octet written in hex as the
// fourth group: 198.18.65.2 ↔ 2001:db8:18:41::2. Every lab namespace has
// IPv6 duplicate address detection off (addresses, link-local ones included,
// are usable at once) and ICMP error rate limits off (every REJECT is seen).
//
// # Sockets in a namespace: setns, not helper processes
//
// A socket belongs to the network namespace of the thread that created it,
// for its whole life, whichever thread later uses it. [NS.Do] runs a function
// on a fresh goroutine locked to its OS thread, moved into the namespace with
// setns(2); the echo servers and clients create their sockets there and then
// serve or read them from ordinary goroutines. We chose this over re-executing
// the test binary under `ip netns exec` because it needs no TestMain hook in
// every package that uses the harness, no protocol to talk to helper
// processes, and sockets can be kept between calls (a UDP client with a fixed
// source port that sends again later, a TCP connection held open across a
// ruleset change). It is safe because: the Go runtime never clones new
// threads from a locked thread (it uses its template thread since Go 1.10);
// Do checks, by comparing the inode of /proc/thread-self/ns/net with the
// target's, that the thread really is in the namespace before running the
// function; and if moving the thread back fails, Do leaves it locked, so the
// runtime destroys the thread when the goroutine ends. Nothing else in the
// process ever runs in a lab namespace.
//
// Commands run through `ip netns exec` ([NS.Run], [NS.Start], [NS.Command]) or
// `ip -n`, which fail rather than fall back to the host namespace.
// Executors under test should take such an *exec.Cmd factory rather than be
// run inside Do: an executor that starts goroutines would exec from threads
// in the host namespace.
//
// # Echo protocol
//
// [NS.StartEcho] listens on TCP and UDP, IPv4 and IPv6, on one port. On each
// TCP connection the server first writes one line,
//
//	svcproxy-echo <identity> <source address:port it saw>
//
// and then echoes what it reads until EOF or 30s. Each UDP datagram is
// answered with the same line followed by a space and the datagram's payload.
// [Reply] is the parsed form; Reply.Source tells masquerade from a preserved
// client address. Client errors wrap [ErrRefused], [ErrTimeout] or
// [ErrUnreachable] so tests can tell a REJECT from a DROP.
//
// # Running
//
// Tests call [Require] (NewLab does): without root or the tools they skip, or
// fail when SVCPROXY_E2E=required. Namespace names are
// "svcp-<pid>-<lab>-<label>"; [Leftovers] and [Sweep] find and remove this
// process's namespaces, e.g. from TestMain after m.Run.
package netns
