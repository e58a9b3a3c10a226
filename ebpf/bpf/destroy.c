// SPDX-License-Identifier: (MIT OR GPL-2.0-only)
//
// A UDP socket iterator that destroys (bpf_sock_destroy, Linux 6.5) the
// connected UDP sockets that sock.c translated to an endpoint that is gone:
// the socket-level counterpart of kube-proxy's conntrack flush. The
// executor fills svcp_gone with the endpoints a sync removed, shares
// svcp_revnat with sock.c, and runs the iterator in each network namespace
// it is given.

#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10

struct be_value {
	__u32 addr[4];
	__u16 port; // host byte order
	__u16 pad;
};

struct rev_key {
	__u64 cookie;
	struct be_value be;
	__u32 pad;
};

// The fields of the kernel's struct sock_common that are read, relocated
// by name (CO-RE).
struct sock_common {
	__be32 skc_daddr;
	__be16 skc_dport;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct udp_sock;

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, struct be_value);
	__type(value, __u8);
} svcp_gone SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 17);
	__type(key, struct rev_key);
	__type(value, struct be_value);
} svcp_revnat SEC(".maps");

SEC("iter/udp")
int svcp_destroy_udp(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = (struct sock_common *)ctx->udp_sk;
	if (!sk)
		return 0;
	struct rev_key rk = {};
	if (sk->skc_family == AF_INET) {
		rk.be.addr[2] = bpf_htonl(0xffff);
		rk.be.addr[3] = sk->skc_daddr;
	} else if (sk->skc_family == AF_INET6) {
		rk.be.addr[0] = sk->skc_v6_daddr.in6_u.u6_addr32[0];
		rk.be.addr[1] = sk->skc_v6_daddr.in6_u.u6_addr32[1];
		rk.be.addr[2] = sk->skc_v6_daddr.in6_u.u6_addr32[2];
		rk.be.addr[3] = sk->skc_v6_daddr.in6_u.u6_addr32[3];
	} else {
		return 0;
	}
	rk.be.port = bpf_ntohs(sk->skc_dport);
	if (rk.be.port == 0 || !bpf_map_lookup_elem(&svcp_gone, &rk.be))
		return 0;
	// Only sockets sock.c translated to that endpoint.
	rk.cookie = bpf_get_socket_cookie(sk);
	if (!bpf_map_lookup_elem(&svcp_revnat, &rk))
		return 0;
	bpf_sock_destroy(sk);
	return 0;
}

char _license[] SEC("license") = "Dual MIT/GPL";
