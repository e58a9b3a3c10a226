// Package ebpf is a Service data plane in eBPF at the socket: cgroup
// programs (connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6, in
// bpf/sock.c) translate a Service's frontend into one of its backends
// when a process on the node connects or sends, and translate replies and
// the peer's address back, reading every Service from BPF maps.
//
// It has the shape of the other backends:
//
//   - Render (pure) turns a ruleset.Ruleset into the contents of the maps
//     (Maps): a frontend's key → its group of backends with their count
//     and ClientIP affinity timeout, or a flag (reject: no endpoints,
//     ECONNREFUSED; drop: Local policy without local endpoints, or an
//     unallocated Service-CIDR address, EHOSTUNREACH; firewall, EPERM).
//     A frontend at the unspecified address (a load-balancer IP 0.0.0.0
//     or ::, which the API server accepts) is left out: a key there is a
//     node port's.
//     It keeps the group IDs and backend slots of the previous Contents,
//     so that a change of one Service changes few elements, and from a
//     previous Contents it re-renders only the ports that changed.
//   - Diff (pure) turns two Maps into element changes (Ops), ordered so
//     that the programs never see a group without its backends; Changes
//     gives the same Ops between two Contents in time proportional to the
//     change, AllOps those of a first sync into empty maps.
//   - Maps.Lookup and Translation.Pick are a model, in Go, of the
//     programs' lookups; property tests hold it to trace.Trace.
//   - Dataplane and Executor (Linux) load the programs once, attach them to
//     a cgroup (bpf_link, pinned with Config.PinPath),
//     apply Ops as element updates (no program is reloaded for a
//     Service change), read the maps back in CheckState, and remove
//     programs, links, pins and maps in Cleanup. Maps and Ops list
//     backend slots; the backends map holds each group's slots in chunks
//     of 8 per element, which the executor packs (each element written
//     whole, so that the programs see a chunk before or after a change,
//     never between): a first sync of 100,000 Services × 10 endpoints
//     writes 200,000 backends elements rather than a million, at a fifth
//     of the kernel's CPU and about half the memory per endpoint.
//
// Translation at the socket picks a backend slot with
// bpf_get_prandom_u32(), each of N with probability 1/N (up to 2^32 mod N
// values of 2^32), as the Ruleset's shares say.
//
// # North-south, at tc
//
// With Config.NorthSouth, TCX programs (bpf/tc.c) translate IPv4 and IPv6
// TCP and UDP flows that arrive from outside at node ports, external IPs
// and load-balancer IPs (RenderNorthSouth; its model NorthSouth.Lookup is held
// to trace.Trace for arriving flows): the backend comes from the
// frontend's Maglev table (package maglev: the same on every node for the
// same targets) by a hash of the flow, each target owning ⌊M/N⌋ or ⌈M/N⌉
// of M entries; the source is masqueraded to the node's first
// NodePortAddresses address of the flow's family for
// externalTrafficPolicy Cluster (keeping the client's port) and kept for
// Local; loadBalancerSourceRanges are enforced; replies are translated
// back. Both families share the maps (16-byte addresses, IPv4 in its
// IPv4-mapped form), and each Executor syncs and checks its own family's
// elements. Packets the programs do not parse pass untranslated: IPv4
// with options or fragmented, IPv6 with extension headers, protocols
// other than TCP and UDP. Flows are tracked in BPF LRU hash tables
// of the programs' own rather than in the kernel's conntrack through its
// kfuncs: the node's netfilter stays untouched, the tables need no
// netfilter module, and a flow's state is a lookup away in every program
// that translates it; the cost is that an entry lives until the LRU
// evicts it (no TCP state, no timeouts: a TCP SYN picks its backend
// afresh, and a flow the programs leave alone deletes the entries of a
// translated flow with its tuple), and that two clients with the same
// source port masqueraded to one backend collide (kube-proxy's masquerade
// picks another port). Measured under load: a new TCP connection through
// an IPv4 node port took 255 µs against 236 µs to a pod directly (medians
// of 200, TestKernelNorthSouth). A flow to a frontend without endpoints is
// refused as kube-proxy's reject (iptables REJECT, nftables reject)
// refuses it: the program turns the packet into an ICMP port unreachable
// (type 3 code 3) or ICMPv6 port unreachable (type 1 code 4) quoting it,
// from the frontend, and sends that back out of the interface it came in
// on (bpf_redirect), so that a connected UDP socket fails with
// ECONNREFUSED. A TCP SYN is answered with the RST|ACK that refuses it
// instead: the client's connect fails with ECONNREFUSED as well, but a
// reset that meets a socket whose owner holds it is queued for it, where
// the kernel drops an ICMP error then (an IPv6 connection from a
// namespace on the node was refused only when its SYN was retransmitted,
// 1 s later, with a plain nftables reject too). Unlike the kernel's own
// ICMP errors these are not rate-limited. The flows kube-proxy drops are
// dropped. The links are not pinned. A Maglev table is one element of
// 32 KiB (MaglevTable: up to MaglevMax entries of 2 bytes), whose entries
// are slots of the group with the table's ID in the socket programs'
// backends map, which the tc programs share: a change of a Service's
// endpoints rewrites its table whole, after the slots are written and
// before the slots it no longer names are cleared, and the map holds
// 65,536 tables (about one per NodePort or LoadBalancer Service port and
// family). A sync that changes no port with a node port, external IP or
// load-balancer IP leaves the tc maps alone; another renders the
// north-south contents whole, computing again only the tables whose
// slots changed (about 2 ms each at the default size), and diffs them
// with the last: 10–45 ms at 10,000 generated Services (1,350 tables),
// against 2.6 s with every table computed. Health check node ports are served by the proxy's own servers
// (package healthcheck), which tc leaves alone.
//
// # What holds at the socket, and what does not
//
// Translation at connect() serves the flows of processes on the node (the
// node's own and, with the programs on the cgroup v2 root, its pods'):
// the source is a pod or the node, so a flow to an external frontend of a
// port with externalTrafficPolicy Local goes to the cluster targets
// (kube-proxy's short-circuit). Masquerading has no meaning without NAT:
// the backend sees the client's own address. A dropped flow cannot time
// out at the socket: it fails with EHOSTUNREACH at once. ClientIP
// affinity is keyed by the client's network namespace (its cookie), the
// socket-level form of a client IP. Node ports are served on the
// addresses of Config.NodePortAddresses only (none when it is empty),
// not on 127.0.0.1. SCTP keys are rendered, but only TCP and UDP are
// tested. Flows that arrive from outside the node are the tc programs'
// (below).
//
// A connected UDP socket translated to an endpoint that a sync then
// removes from every group is destroyed (bpf/destroy.c: a UDP socket
// iterator calling the bpf_sock_destroy kfunc, Linux 6.5), the
// socket-level counterpart of kube-proxy's conntrack flush: the kernel
// disconnects it with ECONNABORTED pending, so its next send fails with
// EDESTADDRREQ and its next receive with ECONNABORTED, and the
// application's new socket is translated afresh. Only sockets the programs
// translated to that endpoint are destroyed (their cookie is in the
// reverse map), in the network namespaces of Config.SocketNamespaces: an
// iterator sees one namespace, so a node lists its pods'. An endpoint
// removed from a UDP Service but still in a group of another Service is
// not treated as removed. Unconnected UDP sockets are translated at every
// sendmsg and move at once.
package ebpf
