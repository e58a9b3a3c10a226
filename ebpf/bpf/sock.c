// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// Socket-level Service translation for svcproxy (package ebpf): cgroup
// programs that rewrite a Service frontend into one of its backends at
// connect() and sendmsg(), and the backend back into the frontend at
// recvmsg() and getpeername(). Every Service is data in the maps below,
// written by the executor in Go; the Go model of lookup() is
// Maps.Lookup and Translation.Pick (model.go), and the layouts of the
// structs are those of maps.go.
//
// Addresses are 16 bytes everywhere, an IPv4 address in its IPv4-mapped
// form (::ffff:a.b.c.d), so that the IPv6 programs serve IPv4 Services
// to dual-stack sockets with the same keys.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define PROTO_TCP 6
#define PROTO_UDP 17

#define E_PERM 1
#define E_CONNREFUSED 111
#define E_HOSTUNREACH 113

#define FLAG_REJECT 1
#define FLAG_DROP 2
#define FLAG_FIREWALL 4

#define NSEC_PER_SEC 1000000000ULL

struct svc_key {
	__u32 addr[4];
	__u16 port; // host byte order
	__u8 proto;
	__u8 pad;
};

struct svc_value {
	__u32 id;
	__u32 count;
	__u32 flags;
	__u32 affinity; // seconds; 0: none
};

// The backends map holds a group's slots in chunks: element {id, chunk}
// holds slots BE_CHUNK·chunk … BE_CHUNK·chunk+BE_CHUNK−1, an empty slot
// zero. Fewer, larger elements: a first sync of 100,000 Services × 10
// endpoints writes 200,000 elements rather than a million, at a fifth of
// the kernel's CPU.
#define BE_CHUNK 8

struct be_key {
	__u32 id;
	__u32 chunk;
};

struct be_value {
	__u32 addr[4];
	__u16 port; // host byte order
	__u16 pad;
};

struct be_chunk {
	struct be_value be[BE_CHUNK];
};

struct cidr_key {
	__u32 prefixlen;
	__u32 addr[4];
};

struct aff_key {
	__u64 netns;
	__u32 id;
	__u32 pad;
};

struct aff_value {
	__u64 last; // bpf_ktime_get_ns()
	__u32 slot;
	struct be_value be;
};

struct rev_key {
	__u64 cookie; // the socket's
	struct be_value be;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 18);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
} svcp_services SEC(".maps");

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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 18);
	__type(key, __u32[4]);
	__type(value, __u8);
} svcp_clus_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 64);
	__type(key, struct cidr_key);
	__type(value, __u8);
} svcp_svc_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct aff_key);
	__type(value, struct aff_value);
} svcp_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 17);
	__type(key, struct rev_key);
	__type(value, struct be_value);
} svcp_revnat SEC(".maps");

static __always_inline int is_v4mapped(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

static __always_inline int same_backend(const struct be_value *a, const struct be_value *b)
{
	return a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3] && a->port == b->port;
}

// lookup translates addr and port (in place) for a connect() or sendmsg()
// with protocol proto: 1 when translated, 0 when not a Service, or a
// negative errno the call must fail with.
static __always_inline int lookup(struct bpf_sock_addr *ctx, __u32 *addr, __u16 *port, __u8 proto)
{
	struct svc_key k = {};
	__builtin_memcpy(k.addr, addr, 16);
	k.port = *port;
	k.proto = proto;
	struct svc_value *v = bpf_map_lookup_elem(&svcp_services, &k);
	if (!v && bpf_map_lookup_elem(&svcp_node_addrs, k.addr)) {
		// A node port: the family's unspecified address.
		int v4 = is_v4mapped(k.addr);
		k.addr[0] = 0;
		k.addr[1] = 0;
		k.addr[2] = v4 ? bpf_htonl(0xffff) : 0;
		k.addr[3] = 0;
		v = bpf_map_lookup_elem(&svcp_services, &k);
	}
	if (!v) {
		if (bpf_map_lookup_elem(&svcp_clus_addrs, addr))
			return -E_CONNREFUSED;
		struct cidr_key ck = {.prefixlen = 128};
		__builtin_memcpy(ck.addr, addr, 16);
		if (bpf_map_lookup_elem(&svcp_svc_cidrs, &ck))
			return -E_HOSTUNREACH;
		return 0;
	}
	if (v->flags & FLAG_REJECT)
		return -E_CONNREFUSED;
	if (v->flags & FLAG_DROP)
		return -E_HOSTUNREACH;
	if (v->flags & FLAG_FIREWALL)
		return -E_PERM;
	__u32 id = v->id, count = v->count, timeout = v->affinity;
	if (count == 0)
		return -E_CONNREFUSED;

	__u32 slot = bpf_get_prandom_u32() % count;
	struct be_value *be = NULL;
	struct be_chunk *c;
	struct aff_key ak = {};
	__u64 now = 0;
	if (timeout) {
		ak.netns = bpf_get_netns_cookie(ctx);
		ak.id = id;
		now = bpf_ktime_get_ns();
		struct aff_value *a = bpf_map_lookup_elem(&svcp_affinity, &ak);
		if (a && now >= a->last && now - a->last < (__u64)timeout * NSEC_PER_SEC && a->slot < count) {
			struct be_key sk = {.id = id, .chunk = a->slot / BE_CHUNK};
			c = bpf_map_lookup_elem(&svcp_backends, &sk);
			if (c && same_backend(&c->be[a->slot % BE_CHUNK], &a->be)) {
				be = &c->be[a->slot % BE_CHUNK];
				slot = a->slot;
			}
		}
	}
	if (!be) {
		struct be_key bk = {.id = id, .chunk = slot / BE_CHUNK};
		c = bpf_map_lookup_elem(&svcp_backends, &bk);
		if (c)
			be = &c->be[slot % BE_CHUNK];
	}
	if (!be || be->port == 0)
		return -E_CONNREFUSED;
	struct be_value chosen = *be;
	if (timeout) {
		struct aff_value a = {.last = now, .slot = slot, .be = chosen};
		bpf_map_update_elem(&svcp_affinity, &ak, &a, BPF_ANY);
	}
	struct rev_key rk = {.cookie = bpf_get_socket_cookie(ctx), .be = chosen};
	struct be_value orig = {.port = *port};
	__builtin_memcpy(orig.addr, addr, 16);
	bpf_map_update_elem(&svcp_revnat, &rk, &orig, BPF_ANY);
	__builtin_memcpy(addr, chosen.addr, 16);
	*port = chosen.port;
	return 1;
}

// reverse rewrites a backend's addr and port (in place) into the frontend
// the socket sent to, when the socket was translated to it.
static __always_inline void reverse(struct bpf_sock_addr *ctx, __u32 *addr, __u16 *port)
{
	struct rev_key rk = {.cookie = bpf_get_socket_cookie(ctx)};
	__builtin_memcpy(rk.be.addr, addr, 16);
	rk.be.port = *port;
	struct be_value *orig = bpf_map_lookup_elem(&svcp_revnat, &rk);
	if (orig) {
		__builtin_memcpy(addr, orig->addr, 16);
		*port = orig->port;
	}
}

static __always_inline int fail(int err)
{
	bpf_set_retval(err);
	return 0;
}

static __always_inline int translate4(struct bpf_sock_addr *ctx)
{
	__u8 proto = ctx->protocol;
	if (proto != PROTO_TCP && proto != PROTO_UDP)
		return 1;
	__u32 addr[4] = {0, 0, bpf_htonl(0xffff), ctx->user_ip4};
	__u16 port = bpf_ntohs(ctx->user_port);
	int r = lookup(ctx, addr, &port, proto);
	if (r < 0)
		return fail(r);
	if (r > 0) {
		ctx->user_ip4 = addr[3];
		ctx->user_port = bpf_htons(port);
	}
	return 1;
}

static __always_inline int translate6(struct bpf_sock_addr *ctx)
{
	__u8 proto = ctx->protocol;
	if (proto != PROTO_TCP && proto != PROTO_UDP)
		return 1;
	__u32 addr[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
	__u16 port = bpf_ntohs(ctx->user_port);
	int r = lookup(ctx, addr, &port, proto);
	if (r < 0)
		return fail(r);
	if (r > 0) {
		ctx->user_ip6[0] = addr[0];
		ctx->user_ip6[1] = addr[1];
		ctx->user_ip6[2] = addr[2];
		ctx->user_ip6[3] = addr[3];
		ctx->user_port = bpf_htons(port);
	}
	return 1;
}

static __always_inline int reverse4(struct bpf_sock_addr *ctx)
{
	__u32 addr[4] = {0, 0, bpf_htonl(0xffff), ctx->user_ip4};
	__u16 port = bpf_ntohs(ctx->user_port);
	reverse(ctx, addr, &port);
	ctx->user_ip4 = addr[3];
	ctx->user_port = bpf_htons(port);
	return 1;
}

static __always_inline int reverse6(struct bpf_sock_addr *ctx)
{
	__u32 addr[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
	__u16 port = bpf_ntohs(ctx->user_port);
	reverse(ctx, addr, &port);
	ctx->user_ip6[0] = addr[0];
	ctx->user_ip6[1] = addr[1];
	ctx->user_ip6[2] = addr[2];
	ctx->user_ip6[3] = addr[3];
	ctx->user_port = bpf_htons(port);
	return 1;
}

SEC("cgroup/connect4")
int svcp_connect4(struct bpf_sock_addr *ctx) { return translate4(ctx); }

SEC("cgroup/connect6")
int svcp_connect6(struct bpf_sock_addr *ctx) { return translate6(ctx); }

SEC("cgroup/sendmsg4")
int svcp_sendmsg4(struct bpf_sock_addr *ctx) { return translate4(ctx); }

SEC("cgroup/sendmsg6")
int svcp_sendmsg6(struct bpf_sock_addr *ctx) { return translate6(ctx); }

SEC("cgroup/recvmsg4")
int svcp_recvmsg4(struct bpf_sock_addr *ctx) { return reverse4(ctx); }

SEC("cgroup/recvmsg6")
int svcp_recvmsg6(struct bpf_sock_addr *ctx) { return reverse6(ctx); }

SEC("cgroup/getpeername4")
int svcp_getpeer4(struct bpf_sock_addr *ctx) { return reverse4(ctx); }

SEC("cgroup/getpeername6")
int svcp_getpeer6(struct bpf_sock_addr *ctx) { return reverse6(ctx); }

char _license[] SEC("license") = "Dual MIT/GPL";
