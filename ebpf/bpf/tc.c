// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// North-south translation for svcproxy (package ebpf): tc (TCX) programs
// for IPv4 and IPv6 TCP and UDP that arrive from outside at node ports,
// external IPs and load-balancer IPs. A packet whose source is one of the
// node's own addresses must not arrive on an interface (the kernel drops
// it as a martian), so the translations are split around routing:
//
//   - svcp_tc_in, ingress of the interfaces facing the outside: picks a
//     backend from the frontend's Maglev table (the same on every node for
//     the same targets) by a hash of the flow, translates the destination
//     and records the flow in LRU tables (a packet to a frontend without
//     endpoints is refused as kube-proxy's reject refuses it, with an
//     answer sent back out of the interface, see reject; what kube-proxy
//     drops is dropped; loadBalancerSourceRanges are enforced from
//     svcp_ranges);
//   - svcp_tc_masq, egress of the interfaces facing the pods: masquerades
//     the source to the node's address where the Service says so (the
//     client's port is kept);
//   - svcp_tc_unmasq, ingress of the interfaces facing the pods: sends a
//     masqueraded flow's replies back to the client;
//   - svcp_tc_reply, egress of the interfaces facing the outside: the
//     replies' source becomes the frontend again.
//
// Addresses in the maps are 16 bytes, an IPv4 address in its IPv4-mapped
// form (::ffff:a.b.c.d), as in bpf/sock.c. The Go model of svcp_tc_in's
// lookups is NorthSouth.Lookup.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define FLAG_REJECT 1
#define FLAG_DROP 2
#define FLAG_FIREWALL 4

struct svc_key {
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct ext_value {
	__u32 id;      // the Maglev table
	__u32 flags;   // FLAG_REJECT, FLAG_DROP: rejected, dropped; FLAG_FIREWALL: svcp_ranges
	__u32 masq[4]; // the node's address to masquerade to; zero: keep the source
	__u32 fw;      // the key of its source ranges in svcp_ranges
};

struct be_value {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

// The backends of bpf/sock.c (the map is shared): a group's slots in
// chunks of BE_CHUNK.
#define BE_CHUNK 8

struct be_key {
	__u32 id;
	__u32 chunk;
};

struct be_chunk {
	struct be_value be[BE_CHUNK];
};

// A Maglev table: entry i is the slot, in the backends group of the
// table's ID, of the backend that flows hashed to i reach. Its first
// maglev_size entries are used.
#define MAGLEV_MAX 16381

struct mg_table {
	__u16 slot[MAGLEV_MAX];
};

struct ct_key {
	__u32 saddr[4], daddr[4];
	__u16 sport, dport; // network order
	__u8 proto;
	__u8 pad[3];
};

#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

struct ct_value {
	__u32 addr[4];  // the new address
	__u16 port;     // the new port, network order
	__u16 pad;
	__u32 addr2[4]; // svcp_ct_fwd: the masquerade address (zero: none)
};

volatile const __u32 maglev_size = 16381;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 16);
	__type(key, struct svc_key);
	__type(value, struct ext_value);
} svcp_ext SEC(".maps");

// A load-balancer IP frontend with FLAG_FIREWALL lets through the sources
// in its source ranges: keys {32 + the prefix length in the 16-byte form,
// the frontend's id, the prefix}.
struct range_key {
	__u32 prefixlen;
	__u32 id;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 16);
	__type(key, struct range_key);
	__type(value, __u8);
} svcp_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 16);
	__type(key, __u32);
	__type(value, struct mg_table);
} svcp_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 19);
	__type(key, struct be_key);
	__type(value, struct be_chunk);
} svcp_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, __u32[4]);
	__type(value, __u8);
} svcp_node_addrs SEC(".maps");

// svcp_ct_fwd: client → frontend, as it arrives, to the backend and the
// masquerade address; svcp_ct_masq: client → backend to the masquerade
// address; svcp_ct_unmasq: backend → node to the client; svcp_ct_rev:
// backend → client to the frontend.
#define CT_MAP(name)                                                                                                   \
	struct {                                                                                                       \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);                                                                   \
		__uint(max_entries, 1 << 16);                                                                          \
		__type(key, struct ct_key);                                                                            \
		__type(value, struct ct_value);                                                                        \
	} name SEC(".maps")

CT_MAP(svcp_ct_fwd);
CT_MAP(svcp_ct_masq);
CT_MAP(svcp_ct_unmasq);
CT_MAP(svcp_ct_rev);

#define IP_OFF ETH_HLEN
#define IP_CSUM_OFF (IP_OFF + 10)
#define IP4_SRC_OFF (IP_OFF + 12)
#define IP4_DST_OFF (IP_OFF + 16)
#define IP6_SRC_OFF (IP_OFF + 8)
#define IP6_DST_OFF (IP_OFF + 24)
#define L4_OFF4 (IP_OFF + 20)
#define L4_OFF6 (IP_OFF + 40)

// pkt is a parsed packet: its flow, its family and whether it opens a TCP
// connection (SYN without ACK).
struct pkt {
	struct ct_key k;
	int v6;
	int syn;
};

static __always_inline void set4(__u32 *a, __u32 v4)
{
	a[0] = 0;
	a[1] = 0;
	a[2] = bpf_htonl(0xffff);
	a[3] = v4;
}

static __always_inline int l4_off(const struct pkt *p) { return p->v6 ? L4_OFF6 : L4_OFF4; }

// parse reads the flow of an IPv4 packet without IP options or an IPv6
// packet without extension headers, TCP or UDP and not a fragment; false
// for any other packet.
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	__u8 proto;
	__u8 *l4;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
			return 0;
		proto = ip->protocol;
		set4(p->k.saddr, ip->saddr);
		set4(p->k.daddr, ip->daddr);
		p->v6 = 0;
		l4 = (void *)(ip + 1);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		proto = ip6->nexthdr;
		__builtin_memcpy(p->k.saddr, &ip6->saddr, 16);
		__builtin_memcpy(p->k.daddr, &ip6->daddr, 16);
		p->v6 = 1;
		l4 = (void *)(ip6 + 1);
	} else {
		return 0;
	}
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return 0;
	__u16 *ports = (void *)l4;
	if ((void *)(ports + 2) > end)
		return 0;
	p->k.sport = ports[0];
	p->k.dport = ports[1];
	p->k.proto = proto;
	p->syn = 0;
	if (proto == IPPROTO_TCP) {
		__u8 *flags = l4 + 13;
		if ((void *)(flags + 1) > end)
			return 0;
		p->syn = (*flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	}
	return 1;
}

// forget deletes the entries of a translated flow whose tuple after
// translation is k's, when k is a flow the programs leave alone: the
// backend's port is reused by a client talking to it directly, and the
// entries (which have no timeout of their own) must not capture it.
static __always_inline void forget(const struct ct_key *k)
{
	struct ct_key r = {.sport = k->dport, .dport = k->sport, .proto = k->proto};
	__builtin_memcpy(r.saddr, k->daddr, 16);
	__builtin_memcpy(r.daddr, k->saddr, 16);
	bpf_map_delete_elem(&svcp_ct_masq, k);
	bpf_map_delete_elem(&svcp_ct_rev, &r);
}

static __always_inline int same(const __u32 *a, const __u32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

// rewrite replaces the source (src) or destination address and port of
// p's packet with addr and port, fixing the IPv4 header's checksum and
// the TCP or UDP checksum (whose pseudo-header holds the addresses).
static __always_inline int rewrite(struct __sk_buff *skb, const struct pkt *p, int src, __u32 *addr, __u16 port)
{
	__u8 proto = p->k.proto;
	int csum = l4_off(p) + (proto == IPPROTO_TCP ? 16 : 6);
	__u64 mangled = proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 from[4];
	__builtin_memcpy(from, src ? p->k.saddr : p->k.daddr, 16);
	__u16 pfrom = src ? p->k.sport : p->k.dport;
	if (!same(from, addr)) {
		if (!p->v6) {
			if (bpf_l4_csum_replace(skb, csum, from[3], addr[3], BPF_F_PSEUDO_HDR | mangled | 4) ||
			    bpf_l3_csum_replace(skb, IP_CSUM_OFF, from[3], addr[3], 4) ||
			    bpf_skb_store_bytes(skb, src ? IP4_SRC_OFF : IP4_DST_OFF, &addr[3], 4, 0))
				return -1;
		} else {
			__s64 diff = bpf_csum_diff(from, 16, addr, 16, 0);
			if (diff < 0 || bpf_l4_csum_replace(skb, csum, 0, diff, BPF_F_PSEUDO_HDR | mangled) ||
			    bpf_skb_store_bytes(skb, src ? IP6_SRC_OFF : IP6_DST_OFF, addr, 16, 0))
				return -1;
		}
	}
	if (pfrom != port) {
		if (bpf_l4_csum_replace(skb, csum, pfrom, port, mangled | 2) ||
		    bpf_skb_store_bytes(skb, l4_off(p) + (src ? 0 : 2), &port, 2, 0))
			return -1;
	}
	return 0;
}

// fold folds a 32-bit sum into the 16-bit ones' complement checksum.
static __always_inline __u16 fold(__s64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

// The headers of an ICMP (ICMPv6) port unreachable and the start of the
// packet it answers, which it quotes: the IP header and the first 8
// bytes after it.
struct icmp4_err {
	__u8 type, code;
	__u16 csum;
	__u32 unused;
	__u8 quote[28];
};

struct icmp6_err {
	__u8 type, code;
	__u16 csum;
	__u32 unused;
	__u8 quote[48];
};

// A TCP header without options.
struct tcp_hdr {
	__u16 sport, dport;
	__u32 seq, ack;
	__u8 doff, flags;
	__u16 window, csum, urg;
};

// The pseudo-headers of the TCP and ICMPv6 checksums.
struct pseudo4 {
	__u32 saddr, daddr;
	__u8 zero, proto;
	__u16 len;
};

struct pseudo6 {
	__u32 saddr[4], daddr[4];
	__u32 len;
	__u8 zero[3], next;
};

// answer replaces p's packet with msg, a message of protocol proto and
// size bytes whose checksum is at *csum, from the address p was sent to
// back to its source, and sends it out of the interface p arrived on.
static __always_inline int answer(struct __sk_buff *skb, const struct pkt *p, __u8 proto, void *msg, __u32 size,
				  __u16 *csum)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return TC_ACT_SHOT;
	struct ethhdr neth = {.h_proto = eth->h_proto};
	__builtin_memcpy(neth.h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(neth.h_source, eth->h_dest, ETH_ALEN);
	__s64 sum = 0;
	if (p->v6) {
		struct pseudo6 ph = {.len = bpf_htonl(size), .next = proto};
		__builtin_memcpy(ph.saddr, p->k.daddr, 16);
		__builtin_memcpy(ph.daddr, p->k.saddr, 16);
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0);
	} else if (proto == IPPROTO_TCP) {
		struct pseudo4 ph = {.saddr = p->k.daddr[3], .daddr = p->k.saddr[3], .proto = proto, .len = bpf_htons(size)};
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0);
	}
	if (sum < 0)
		return TC_ACT_SHOT;
	sum = bpf_csum_diff(NULL, 0, msg, size, sum);
	if (sum < 0)
		return TC_ACT_SHOT;
	*csum = fold(sum);
	if (!p->v6) {
		struct iphdr ip = {
			.version = 4,
			.ihl = 5,
			.tot_len = bpf_htons(20 + size),
			.ttl = 64,
			.protocol = proto,
			.saddr = p->k.daddr[3],
			.daddr = p->k.saddr[3],
		};
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&ip, sizeof(ip), 0);
		if (sum < 0)
			return TC_ACT_SHOT;
		ip.check = fold(sum);
		if (bpf_skb_change_tail(skb, L4_OFF4 + size, 0) || bpf_skb_store_bytes(skb, 0, &neth, sizeof(neth), 0) ||
		    bpf_skb_store_bytes(skb, IP_OFF, &ip, sizeof(ip), 0) || bpf_skb_store_bytes(skb, L4_OFF4, msg, size, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(skb->ifindex, 0);
	}
	struct ipv6hdr ip6 = {
		.version = 6,
		.payload_len = bpf_htons(size),
		.nexthdr = proto,
		.hop_limit = 64,
	};
	__builtin_memcpy(&ip6.saddr, p->k.daddr, 16);
	__builtin_memcpy(&ip6.daddr, p->k.saddr, 16);
	if (bpf_skb_change_tail(skb, L4_OFF6 + size, 0) || bpf_skb_store_bytes(skb, 0, &neth, sizeof(neth), 0) ||
	    bpf_skb_store_bytes(skb, IP_OFF, &ip6, sizeof(ip6), 0) || bpf_skb_store_bytes(skb, L4_OFF6, msg, size, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

// reject answers p's packet, to a frontend without endpoints, as
// kube-proxy's reject (iptables REJECT, nftables reject) refuses it: with
// an ICMP port unreachable (type 3 code 3) or ICMPv6 port unreachable
// (type 1 code 4) that quotes it, so that the client's TCP or connected
// UDP socket fails with ECONNREFUSED. A TCP SYN is answered with the
// RST|ACK that refuses it instead: the same ECONNREFUSED, but a reset
// that meets a socket its owner holds is queued for it, where the kernel
// drops such an ICMP error and the connect waits for the SYN's
// retransmission (IPv6 connections from a namespace on the node were
// refused only after 1 s).
static __always_inline int reject(struct __sk_buff *skb, const struct pkt *p)
{
	if (p->syn) {
		__u32 seq;
		if (bpf_skb_load_bytes(skb, l4_off(p) + 4, &seq, 4))
			return TC_ACT_SHOT;
		struct tcp_hdr t = {
			.sport = p->k.dport,
			.dport = p->k.sport,
			.ack = bpf_htonl(bpf_ntohl(seq) + 1),
			.doff = 5 << 4,
			.flags = TCP_RST | TCP_ACK,
		};
		return answer(skb, p, IPPROTO_TCP, &t, sizeof(t), &t.csum);
	}
	if (!p->v6) {
		struct icmp4_err m = {.type = 3, .code = 3};
		if (bpf_skb_load_bytes(skb, IP_OFF, m.quote, sizeof(m.quote)))
			return TC_ACT_SHOT;
		return answer(skb, p, IPPROTO_ICMP, &m, sizeof(m), &m.csum);
	}
	struct icmp6_err m = {.type = 1, .code = 4};
	if (bpf_skb_load_bytes(skb, IP_OFF, m.quote, sizeof(m.quote)))
		return TC_ACT_SHOT;
	return answer(skb, p, IPPROTO_ICMPV6, &m, sizeof(m), &m.csum);
}

// flow_hash is the flow's hash that picks its Maglev entry: a function of
// the packet alone, so that every node picks the same backend.
static __always_inline __u32 flow_hash(const struct ct_key *k)
{
	__u32 h = 2166136261u;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		h = (h ^ k->saddr[i]) * 16777619u;
		h = (h ^ k->daddr[i]) * 16777619u;
	}
	h = (h ^ (((__u32)k->sport << 16) | k->dport)) * 16777619u;
	h = (h ^ k->proto) * 16777619u;
	h ^= h >> 15;
	h *= 0x2c1b3c6dU;
	h ^= h >> 12;
	return h;
}

SEC("tc")
int svcp_tc_in(struct __sk_buff *skb)
{
	struct pkt p = {};
	if (!parse(skb, &p))
		return TC_ACT_OK;
	struct ct_key *k = &p.k;
	// A new TCP connection picks its backend afresh, also where its tuple
	// is an old one's.
	struct ct_value *ct = p.syn ? NULL : bpf_map_lookup_elem(&svcp_ct_fwd, k);
	struct ct_value fwd;
	if (ct) {
		fwd = *ct;
	} else {
		struct svc_key sk = {.port = bpf_ntohs(k->dport), .proto = k->proto};
		__builtin_memcpy(sk.addr, k->daddr, 16);
		struct ext_value *v = bpf_map_lookup_elem(&svcp_ext, &sk);
		if (!v && bpf_map_lookup_elem(&svcp_node_addrs, sk.addr)) {
			// The node port key: ::ffff:0.0.0.0 or ::.
			if (p.v6)
				sk.addr[2] = 0;
			sk.addr[0] = sk.addr[1] = sk.addr[3] = 0;
			v = bpf_map_lookup_elem(&svcp_ext, &sk);
		}
		if (!v) {
			if (p.syn || k->proto == IPPROTO_UDP)
				forget(k);
			return TC_ACT_OK;
		}
		if (v->flags & FLAG_FIREWALL) {
			struct range_key rk = {.prefixlen = 32 + 128, .id = v->fw};
			__builtin_memcpy(rk.addr, k->saddr, 16);
			if (!bpf_map_lookup_elem(&svcp_ranges, &rk))
				return TC_ACT_SHOT;
		}
		if (v->flags & FLAG_REJECT)
			return reject(skb, &p);
		if (v->flags & FLAG_DROP)
			return TC_ACT_SHOT;
		__u32 id = v->id, idx = flow_hash(k) % maglev_size;
		struct mg_table *t = bpf_map_lookup_elem(&svcp_maglev, &id);
		if (!t || idx >= MAGLEV_MAX)
			return TC_ACT_SHOT;
		__u16 slot = t->slot[idx];
		struct be_key bk = {.id = id, .chunk = slot / BE_CHUNK};
		struct be_chunk *c = bpf_map_lookup_elem(&svcp_backends, &bk);
		if (!c)
			return TC_ACT_SHOT;
		struct be_value *be = &c->be[slot % BE_CHUNK];
		if (be->port == 0)
			return TC_ACT_SHOT;
		fwd = (struct ct_value){.port = bpf_htons(be->port)};
		__builtin_memcpy(fwd.addr, be->addr, 16);
		__builtin_memcpy(fwd.addr2, v->masq, 16);
		struct ct_key rk = {.sport = fwd.port, .dport = k->sport, .proto = k->proto};
		__builtin_memcpy(rk.saddr, fwd.addr, 16);
		__builtin_memcpy(rk.daddr, k->saddr, 16);
		struct ct_value rev = {.port = k->dport};
		__builtin_memcpy(rev.addr, k->daddr, 16);
		bpf_map_update_elem(&svcp_ct_fwd, k, &fwd, BPF_ANY);
		bpf_map_update_elem(&svcp_ct_rev, &rk, &rev, BPF_ANY);
		if (fwd.addr2[0] | fwd.addr2[1] | fwd.addr2[2] | fwd.addr2[3]) {
			struct ct_key mk = {.sport = k->sport, .dport = fwd.port, .proto = k->proto};
			__builtin_memcpy(mk.saddr, k->saddr, 16);
			__builtin_memcpy(mk.daddr, fwd.addr, 16);
			struct ct_value masq = {.port = k->sport};
			__builtin_memcpy(masq.addr, fwd.addr2, 16);
			struct ct_key uk = {.sport = fwd.port, .dport = k->sport, .proto = k->proto};
			__builtin_memcpy(uk.saddr, fwd.addr, 16);
			__builtin_memcpy(uk.daddr, fwd.addr2, 16);
			struct ct_value unmasq = {.port = k->sport};
			__builtin_memcpy(unmasq.addr, k->saddr, 16);
			bpf_map_update_elem(&svcp_ct_masq, &mk, &masq, BPF_ANY);
			bpf_map_update_elem(&svcp_ct_unmasq, &uk, &unmasq, BPF_ANY);
		}
	}
	if (rewrite(skb, &p, 0, fwd.addr, fwd.port))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

// translate rewrites the source (src) or the destination of a packet whose
// flow is in m to the value's address and port.
static __always_inline int translate(struct __sk_buff *skb, void *m, int src)
{
	struct pkt p = {};
	if (!parse(skb, &p))
		return TC_ACT_OK;
	struct ct_value *ct = bpf_map_lookup_elem(m, &p.k);
	if (!ct)
		return TC_ACT_OK;
	struct ct_value to = *ct;
	return rewrite(skb, &p, src, to.addr, to.port) ? TC_ACT_SHOT : TC_ACT_OK;
}

SEC("tc")
int svcp_tc_masq(struct __sk_buff *skb) { return translate(skb, &svcp_ct_masq, 1); }

SEC("tc")
int svcp_tc_unmasq(struct __sk_buff *skb) { return translate(skb, &svcp_ct_unmasq, 0); }

SEC("tc")
int svcp_tc_reply(struct __sk_buff *skb) { return translate(skb, &svcp_ct_rev, 1); }

char _license[] SEC("license") = "Dual MIT/GPL";
