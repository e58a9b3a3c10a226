// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// North-south translation for svcproxy (package ebpf), a first slice: tc
// (TCX) programs for IPv4 TCP and UDP that arrive from outside at node
// ports, external IPs and load-balancer IPs. svcp_tc_in, on the ingress of
// the interfaces facing the outside, picks a backend from the frontend's
// Maglev table (the same on every node for the same targets) by a hash of
// the flow, translates the destination, masquerades the source to the
// node's address where the Service says so, and records the flow in an LRU
// table (rejected flows are dropped; loadBalancerSourceRanges are
// enforced from svcp_ranges); svcp_tc_reply, on the ingress of the interfaces facing the pods,
// translates the replies back. The Go model is NorthSouth.Lookup.

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

struct ct_value {
	__u32 addr; // the new destination (forward) or source (reply), network order
	__u16 port;
	__u16 pad;
	__u32 addr2; // forward: the masquerade source; reply: the client to send back to (0: keep)
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct ct_key);
	__type(value, struct ct_value);
} svcp_ct_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct ct_key);
	__type(value, struct ct_value);
} svcp_ct_rev SEC(".maps");

#define IP_OFF ETH_HLEN
#define IP_CSUM_OFF (IP_OFF + 10)
#define IP_SRC_OFF (IP_OFF + 12)
#define IP_DST_OFF (IP_OFF + 16)
#define L4_OFF (IP_OFF + 20)

// parse reads the flow of an IPv4 TCP or UDP packet without IP options;
// false for any other.
static __always_inline int parse(struct __sk_buff *skb, struct ct_key *k)
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
	return 1;
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
	if (!parse(skb, &k))
		return TC_ACT_OK;
	struct ct_value *ct = bpf_map_lookup_elem(&svcp_ct_fwd, &k);
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
		if (!v)
			return TC_ACT_OK;
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
		struct ct_key rk = {.saddr = fwd.addr, .daddr = fwd.addr2 ? fwd.addr2 : k.saddr, .sport = fwd.port, .dport = k.sport, .proto = k.proto};
		struct ct_value rev = {.addr = k.daddr, .port = k.dport, .addr2 = fwd.addr2 ? k.saddr : 0};
		bpf_map_update_elem(&svcp_ct_fwd, &k, &fwd, BPF_ANY);
		bpf_map_update_elem(&svcp_ct_rev, &rk, &rev, BPF_ANY);
	}
	if (rewrite(skb, k.proto, IP_DST_OFF, k.daddr, fwd.addr, L4_OFF + 2, k.dport, fwd.port))
		return TC_ACT_SHOT;
	if (fwd.addr2 && rewrite(skb, k.proto, IP_SRC_OFF, k.saddr, fwd.addr2, L4_OFF, k.sport, k.sport))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("tc")
int svcp_tc_reply(struct __sk_buff *skb)
{
	struct ct_key k = {};
	if (!parse(skb, &k))
		return TC_ACT_OK;
	struct ct_value *ct = bpf_map_lookup_elem(&svcp_ct_rev, &k);
	if (!ct)
		return TC_ACT_OK;
	struct ct_value rev = *ct;
	if (rewrite(skb, k.proto, IP_SRC_OFF, k.saddr, rev.addr, L4_OFF, k.sport, rev.port))
		return TC_ACT_SHOT;
	if (rev.addr2 && rewrite(skb, k.proto, IP_DST_OFF, k.daddr, rev.addr2, L4_OFF + 2, k.dport, k.dport))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual MIT/GPL";
