// Package nfttrace evaluates an nftables table, given as text, for the first
// packet of a new flow, and answers with a trace.Outcome: the question
// trace.Trace answers from a Ruleset, answered from the rules instead. It
// judges rules independently of the code that wrote them: what
// `nft list table` or `nft -j list table` reads back from the kernel, or a
// rendered transaction or knftables Fake dump (see Parse).
//
// # What is modelled
//
// The packet goes through the netfilter hooks in order, and through the
// table's base chains of each hook by priority:
//
//   - arriving on an interface: prerouting; then input when its destination
//     is the node's own (Packet.ToNode or a loopback address, and no DNAT),
//     else forward and postrouting;
//   - from the node (Packet.FromNode): output, postrouting; then, to the
//     node's own address, prerouting (the filter chains only: the flow's NAT
//     is already chosen) and input.
//
// Rules are evaluated in order with nftables' semantics for jump, goto,
// return, accept, drop, reject and base-chain policies. The expressions are
// those of the two layouts of the nftables package, kube-proxy's and the
// flat one: ip/ip6 saddr and daddr, meta l4proto, th/tcp/udp/sctp dport and
// sport (tcp, udp and sctp only match their protocol, also inside a
// concatenation), concatenations of them, named and anonymous sets (with
// prefixes and ranges, also in concatenations: interval sets), sets and
// maps typed by `type` or by `typeof`, verdict maps, data maps to an
// address and a port, meta mark (match with a mask, set with or/xor/and),
// `ct state` (the packet is new), `ct status dnat` (the flow was
// translated), `fib saddr type local` (Packet.FromNode), `fib daddr type
// local` (Packet.ToNode or loopback, before DNAT), `numgen random mod N`
// (each value an exact 1/N share, in a verdict map's key or in a data
// map's key: `dnat ip to ip daddr . th dport . numgen random mod N map
// @targets`, or in an anonymous data map's, as kube-proxy 1.37 writes a
// Service port's endpoints: `dnat ip to numgen random mod N map { 0 :
// ADDR . PORT, … }`), `update @set { ip saddr }` (affinity), the flat layout's
// affinity map (`dnat ip to ip saddr . ip daddr . meta l4proto . th dport
// map @affinity-tcp`; in IPv6, `jhash … mod N seed S` as the kernel
// hashes and `dnat ip6 to K map @a : K2 map @p`; and after DNAT `ct
// original ip daddr` and `ct original proto-dst` in keys, `update @m { KEY
// timeout T : VALUE }` and `delete @m { KEY : VALUE }`), counters, `dnat
// to` and `masquerade`. A rule forks on its numgen only when its evaluation
// reaches it: rules whose matches fail before draw nothing.
//
// # What is not
//
//   - State: conntrack beyond the first packet, replies, and the contents
//     dynamic sets will have. Sets hold the elements the text lists: an
//     affinity set or map listed with an entry for the source sends it to
//     that endpoint, as the kernel would. An update reports its timeout
//     as the Outcome's Affinity; neither it nor a delete changes what the
//     packet's evaluation sees afterwards.
//   - Other tables, families (inet, arp, bridge, netdev), chain types
//     (route), hooks (ingress), and expressions or statements not named
//     above: Parse refuses them, naming the line.
//   - Routing: an address after DNAT is taken not to be the node's own.
//
// The package is pure: no I/O, no clock, no randomness, no logging.
package nfttrace
