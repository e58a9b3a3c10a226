// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// North-south translation for svcproxy (package ebpf), a first slice: tc
// (TCX) programs for IPv4 TCP and UDP that arrive from outside at node
// ports, external IPs and load-balancer IPs. A packet whose source is one of
// the node's own addresses must not arrive on an interface (the kernel
// drops it as a martian), so the translations are split around routing:
//
//   - svcp_tc_in, ingress of the interfaces facing the outside: picks a
//     backend from the frontend's Maglev table (the same on every node for
//     the same targets) by a hash of the flow, translates the destination
//     and records the flow in LRU tables (rejected flows are dropped;
//     loadBalancerSourceRanges are enforced from svcp_ranges);
//   - svcp_tc_masq, egress of the interfaces facing the pods: masquerades
//     the source to the node's address where the Service says so (the
//     client's port is kept);
//   - svcp_tc_unmasq, ingress of the interfaces facing the pods: sends a
//     masqueraded flow's replies back to the client;
//   - svcp_tc_reply, egress of the interfaces facing the outside: the
//     replies' source becomes the frontend again.
//
// The Go model of svcp_tc_in's lookups is NorthSouth.Lookup.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
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
	__u32 id;    // the Maglev table
	__u32 flags; // FLAG_REJECT, FLAG_DROP: dropped; FLAG_FIREWALL: svcp_ranges
	__u32 masq;  // the node's IPv4 address to masquerade to (network order); 0: keep the source
	__u32 fw;    // the key of its source ranges in svcp_ranges
};

struct mg_key {
	__u32 id;
	__u32 idx;
};

struct be_value {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

struct ct_key {
	__u32 saddr, daddr; // network order
	__u16 sport, dport; // network order
	__u8 proto;
	__u8 pad[3];
};

#define TCP_SYN 0x02
#define TCP_ACK 0x10

struct ct_value {
	__u32 addr; // the new address, network order
	__u16 port; // the new port, network order
	__u16 pad;
	__u32 addr2; // svcp_ct_fwd: the masquerade address (0: none)
	__u32 pad2;
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
// in its source ranges: keys {32 + prefix length, the frontend's id, the
// prefix}.
struct range_key {
	__u32 prefixlen;
	__u32 id;
	__u32 addr;
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
	__uint(max_entries, 1 << 22);
	__type(key, struct mg_key);
	__type(value, struct be_value);
} svcp_maglev SEC(".maps");

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
#define IP_SRC_OFF (IP_OFF + 12)
#define IP_DST_OFF (IP_OFF + 16)
#define L4_OFF (IP_OFF + 20)

// parse reads the flow of an IPv4 TCP or UDP packet without IP options,
// and whether it opens a TCP connection (SYN without ACK) into *syn when
// syn is not NULL; false for any other packet.
static __always_inline int parse_syn(struct __sk_buff *skb, struct ct_key *k, int *syn)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
		return 0;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return 0;
	__u16 *ports = (void *)(ip + 1);
	if ((void *)(ports + 2) > end)
		return 0;
	k->saddr = ip->saddr;
	k->daddr = ip->daddr;
	k->sport = ports[0];
	k->dport = ports[1];
	k->proto = ip->protocol;
	if (syn && ip->protocol == IPPROTO_TCP) {
		__u8 *flags = (__u8 *)ports + 13;
		if ((void *)(flags + 1) > end)
			return 0;
		*syn = (*flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	}
	return 1;
}

static __always_inline int parse(struct __sk_buff *skb, struct ct_key *k) { return parse_syn(skb, k, NULL); }

// forget deletes the entries of a translated flow whose tuple after
// translation is k's, when k is a flow the programs leave alone: the
// backend's port is reused by a client talking to it directly, and the
// entries (which have no timeout of their own) must not capture it.
static __always_inline void forget(const struct ct_key *k)
{
	struct ct_key r = {.saddr = k->daddr, .daddr = k->saddr, .sport = k->dport, .dport = k->sport, .proto = k->proto};
	bpf_map_delete_elem(&svcp_ct_masq, k);
	bpf_map_delete_elem(&svcp_ct_rev, &r);
}

static __always_inline int csum_off(__u8 proto)
{
	return L4_OFF + (proto == IPPROTO_TCP ? 16 : 6);
}

// rewrite replaces the address at addr_off and the port at port_off,
// fixing the IP and the TCP or UDP checksums.
static __always_inline int rewrite(struct __sk_buff *skb, __u8 proto, int addr_off, __u32 from, __u32 to, int port_off,
				   __u16 pfrom, __u16 pto)
{
	__u64 l4flags = BPF_F_PSEUDO_HDR | (proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0);
	if (from != to) {
		if (bpf_l4_csum_replace(skb, csum_off(proto), from, to, l4flags | 4) ||
		    bpf_l3_csum_replace(skb, IP_CSUM_OFF, from, to, 4) || bpf_skb_store_bytes(skb, addr_off, &to, 4, 0))
			return -1;
	}
	if (pfrom != pto) {
		if (bpf_l4_csum_replace(skb, csum_off(proto), pfrom, pto, (l4flags & BPF_F_MARK_MANGLED_0) | 2) ||
		    bpf_skb_store_bytes(skb, port_off, &pto, 2, 0))
			return -1;
	}
	return 0;
}

// flow_hash is the flow's hash that picks its Maglev entry: a function of
// the packet alone, so that every node picks the same backend.
static __always_inline __u32 flow_hash(const struct ct_key *k)
{
	__u32 h = 2166136261u;
	h = (h ^ k->saddr) * 16777619u;
	h = (h ^ k->daddr) * 16777619u;
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
	struct ct_key k = {};
	int syn = 0;
	if (!parse_syn(skb, &k, &syn))
		return TC_ACT_OK;
	// A new TCP connection picks its backend afresh, also where its tuple
	// is an old one's.
	struct ct_value *ct = syn ? NULL : bpf_map_lookup_elem(&svcp_ct_fwd, &k);
	struct ct_value fwd;
	if (ct) {
		fwd = *ct;
	} else {
		struct svc_key sk = {.addr = {0, 0, bpf_htonl(0xffff), k.daddr}, .port = bpf_ntohs(k.dport), .proto = k.proto};
		struct ext_value *v = bpf_map_lookup_elem(&svcp_ext, &sk);
		if (!v && bpf_map_lookup_elem(&svcp_node_addrs, sk.addr)) {
			sk.addr[3] = 0;
			v = bpf_map_lookup_elem(&svcp_ext, &sk);
		}
		if (!v) {
			if (syn || k.proto == IPPROTO_UDP)
				forget(&k);
			return TC_ACT_OK;
		}
		if (v->flags & FLAG_FIREWALL) {
			struct range_key rk = {.prefixlen = 64, .id = v->fw, .addr = k.saddr};
			if (!bpf_map_lookup_elem(&svcp_ranges, &rk))
				return TC_ACT_SHOT;
		}
		if (v->flags & (FLAG_REJECT | FLAG_DROP))
			return TC_ACT_SHOT;
		struct mg_key mk = {.id = v->id, .idx = flow_hash(&k) % maglev_size};
		struct be_value *be = bpf_map_lookup_elem(&svcp_maglev, &mk);
		if (!be)
			return TC_ACT_SHOT;
		fwd = (struct ct_value){.addr = be->addr[3], .port = bpf_htons(be->port), .addr2 = v->masq};
		struct ct_key rk = {.saddr = fwd.addr, .daddr = k.saddr, .sport = fwd.port, .dport = k.sport, .proto = k.proto};
		struct ct_value rev = {.addr = k.daddr, .port = k.dport};
		bpf_map_update_elem(&svcp_ct_fwd, &k, &fwd, BPF_ANY);
		bpf_map_update_elem(&svcp_ct_rev, &rk, &rev, BPF_ANY);
		if (fwd.addr2) {
			struct ct_key mk = {.saddr = k.saddr, .daddr = fwd.addr, .sport = k.sport, .dport = fwd.port, .proto = k.proto};
			struct ct_value masq = {.addr = fwd.addr2, .port = k.sport};
			struct ct_key uk = {.saddr = fwd.addr, .daddr = fwd.addr2, .sport = fwd.port, .dport = k.sport, .proto = k.proto};
			struct ct_value unmasq = {.addr = k.saddr, .port = k.sport};
			bpf_map_update_elem(&svcp_ct_masq, &mk, &masq, BPF_ANY);
			bpf_map_update_elem(&svcp_ct_unmasq, &uk, &unmasq, BPF_ANY);
		}
	}
	if (rewrite(skb, k.proto, IP_DST_OFF, k.daddr, fwd.addr, L4_OFF + 2, k.dport, fwd.port))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

// translate rewrites the source (src) or the destination of a packet whose
// flow is in m to the value's address and port.
static __always_inline int translate(struct __sk_buff *skb, void *m, int src)
{
	struct ct_key k = {};
	if (!parse(skb, &k))
		return TC_ACT_OK;
	struct ct_value *ct = bpf_map_lookup_elem(m, &k);
	if (!ct)
		return TC_ACT_OK;
	struct ct_value to = *ct;
	int err = src ? rewrite(skb, k.proto, IP_SRC_OFF, k.saddr, to.addr, L4_OFF, k.sport, to.port)
		      : rewrite(skb, k.proto, IP_DST_OFF, k.daddr, to.addr, L4_OFF + 2, k.dport, to.port);
	return err ? TC_ACT_SHOT : TC_ACT_OK;
}

SEC("tc")
int svcp_tc_masq(struct __sk_buff *skb) { return translate(skb, &svcp_ct_masq, 1); }

SEC("tc")
int svcp_tc_unmasq(struct __sk_buff *skb) { return translate(skb, &svcp_ct_unmasq, 0); }

SEC("tc")
int svcp_tc_reply(struct __sk_buff *skb) { return translate(skb, &svcp_ct_rev, 1); }

char _license[] SEC("license") = "Dual MIT/GPL";
