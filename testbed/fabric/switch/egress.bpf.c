// SPDX-License-Identifier: GPL-2.0
/*
 * MRC switch egress: a tc clsact egress program (direct-action) for one
 * router interface. Loaded and configured by testbed/switch/loader.py; the
 * Python twin of the decision logic is testbed/switch/model.py (keep them in
 * step).
 *
 * Virtual ("phantom") queues, as in HULL (Alizadeh et al., NSDI'12) and the
 * NDP trimming switch ndp.p4: qdisc backlog is invisible to BPF, so every
 * packet is counted into a byte counter drained at the link's configured
 * rate (bytes -= rate * elapsed, floor 0, remainder carried in byte*8e9
 * units so no byte is lost to rounding):
 *   H  header-only MRC packets: trimmed headers, and with trimming on, the
 *      control packets (SACK, NACK, probe request and response) (strict
 *      priority: drained first),
 *   Q  everything else (drained with what H leaves).
 * The high class carries what uet-htsim's and NDP's trimming queue
 * (CompositeQueue::receivePacket in sim/compositequeue.cpp) serves at high
 * priority: every header-only packet, ACKs and NACKs included, so that the
 * feedback of a congested path is not queued behind the data it reports on.
 *
 * Per packet of skb->len bytes (L2 frame, what HTB charges):
 *   already trimmed MRC DATA,  -> header class; H += len, or drop if H would
 *   or an MRC control packet      exceed the header queue;
 *   with trimming on
 *   Q + len > trim threshold and a trimmable MRC DATA packet
 *                              -> cut to its header (+ CRC), FLAG_TRIMMED,
 *                                 lengths fixed, CRC-32 recomputed, header
 *                                 class, redirected to this interface's
 *                                 egress so HTB charges the trimmed size;
 *                                 dropped if H would overflow;
 *   otherwise                  -> Q += len (not past the leaf queue limit);
 *                                 CE if ECT and Q > ECN threshold.
 * A redirected packet comes back through this hook carrying MARK_REDIRECTED
 * in skb->mark; it is let through untouched and uncounted (the mark is
 * cleared; veth scrubs marks between namespaces anyway).
 *
 * MRC wire format: agents/mrc/packet.py. Only UDP directly after the IPv6
 * header (SRv6 uSID carries no SRH), zero UDP checksum, no GSO super-packets.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_LEN 14
#define IP6_OFF ETH_LEN
#define UDP_OFF (ETH_LEN + 40)
#define MRC_OFF (UDP_OFF + 8)
#define MRC_DATA_HDR 36
#define MRC_IMM 4
#define MRC_CRC 4
#define MRC_VERSION 1
#define MRC_TYPE_DATA 1
#define MRC_TYPE_SACK 2
#define MRC_TYPE_PROBE_RSP 5
#define MRC_PREFIX 4
#define MRC_CTRL_MAX 52		/* SACK header + CRC, the largest control packet */
#define MRC_FLAG_TRIMMED 0x04
#define MRC_FLAG_TRIMMED_LASTHOP 0x08	/* packet.FLAG_TRIMMED_LASTHOP */
#define OP_FIRST 6
#define OP_LAST 11
#define OP_LAST_IMM 9
#define OP_ONLY_IMM 11
#define IPPROTO_UDP_ 17
#define ECN_MASK 0x30	/* ECN bits inside the second byte of the IPv6 header */
#define ECN_CE 0x30
#define MARK_REDIRECTED 0x80000000u
#define NS_X8 8000000000ULL	/* bits per byte * ns per second */

enum { C_PASSED, C_MARKED, C_TRIMMED, C_DROPPED, C_MAX };

struct config {			/* written once by the loader; see config.py */
	__u64 rate_bps;
	__u64 ecn_bytes;	/* 0: no marking */
	__u64 trim_bytes;	/* 0: no trimming */
	__u64 header_bytes;	/* header queue capacity */
	__u64 queue_bytes;	/* Q stops growing here (the leaf queue limit) */
	__u64 idle_ns;		/* elapsed time that empties any queue */
	__u32 priority;		/* skb->priority of trimmed headers */
	__u32 last_hop;		/* 1: this port faces a host; trims set MRC_FLAG_TRIMMED_LASTHOP */
};

struct vq {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 last_ns;
	__u64 carry;		/* undrained remainder, bytes * 8e9 */
	__u64 q;		/* data queue, bytes */
	__u64 h;		/* header queue, bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vq);
} vqs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

enum kind { K_OTHER, K_DATA, K_HEADER, K_CONTROL };
enum verdict { V_PASS, V_MARK, V_TRIM, V_HEADER, V_DROP };

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		__sync_fetch_and_add(c, n);
}

/* zlib's CRC-32 (reflected 0xEDB88320), bitwise over n <= 40 bytes. */
static __always_inline __u32 crc32(const __u8 *buf, __u32 n)
{
	__u32 crc = 0xFFFFFFFF;

	for (int i = 0; i < MRC_DATA_HDR + MRC_IMM; i++) {
		if (i >= n)
			break;
		crc ^= buf[i];
		for (int b = 0; b < 8; b++)
			crc = (crc >> 1) ^ (0xEDB88320 & (0 - (crc & 1)));
	}
	return ~crc;
}

/* What the packet is, for the queue decision; *hdr_len = trimmed MRC bytes. */
static __always_inline enum kind classify(struct __sk_buff *skb, __u8 *mrc, __u32 *hdr_len)
{
	__u8 nexthdr;
	__u16 udp_csum;

	if (skb->protocol != bpf_htons(ETH_P_IPV6) || skb->gso_segs > 1)
		return K_OTHER;
	if (bpf_skb_load_bytes(skb, IP6_OFF + 6, &nexthdr, 1) || nexthdr != IPPROTO_UDP_)
		return K_OTHER;
	if (skb->len < MRC_OFF + MRC_PREFIX || bpf_skb_load_bytes(skb, MRC_OFF, mrc, MRC_PREFIX) ||
	    mrc[0] != MRC_VERSION)
		return K_OTHER;
	if (mrc[1] >= MRC_TYPE_SACK && mrc[1] <= MRC_TYPE_PROBE_RSP)
		return skb->len <= MRC_OFF + MRC_CTRL_MAX ? K_CONTROL : K_OTHER;
	if (skb->len < MRC_OFF + MRC_DATA_HDR + MRC_IMM ||
	    bpf_skb_load_bytes(skb, MRC_OFF, mrc, MRC_DATA_HDR + MRC_IMM))
		return K_OTHER;
	if (mrc[1] != MRC_TYPE_DATA || mrc[2] < OP_FIRST || mrc[2] > OP_LAST)
		return K_OTHER;
	*hdr_len = MRC_DATA_HDR + ((mrc[2] == OP_LAST_IMM || mrc[2] == OP_ONLY_IMM) ? MRC_IMM : 0);
	if (mrc[3] & MRC_FLAG_TRIMMED)
		return skb->len == MRC_OFF + *hdr_len + MRC_CRC ? K_HEADER : K_OTHER;
	if (skb->len <= MRC_OFF + *hdr_len + MRC_CRC)
		return K_OTHER;		/* no payload to cut */
	if (bpf_skb_load_bytes(skb, UDP_OFF + 6, &udp_csum, 2) || udp_csum)
		return K_OTHER;		/* a checksum we would have to fix */
	return K_DATA;
}

/* Drain both virtual queues to now and decide; runs under the spin lock. */
static __always_inline enum verdict decide(struct vq *v, const struct config *c, __u64 now,
					   __u32 len, __u32 trimmed_len, enum kind k, int ect)
{
	__u64 elapsed = now > v->last_ns ? now - v->last_ns : 0;

	if (now > v->last_ns)
		v->last_ns = now;
	if (elapsed >= c->idle_ns) {
		v->q = v->h = v->carry = 0;
	} else {
		__u64 num = elapsed * c->rate_bps + v->carry;
		__u64 drained = num / NS_X8;

		v->carry = num % NS_X8;
		if (drained >= v->h) {
			drained -= v->h;
			v->h = 0;
			v->q = drained >= v->q ? 0 : v->q - drained;
		} else {
			v->h -= drained;
		}
		if (!v->q && !v->h)
			v->carry = 0;
	}
	if (k == K_HEADER || (k == K_CONTROL && c->trim_bytes)) {
		if (v->h + len > c->header_bytes)
			return V_DROP;
		v->h += len;
		return V_HEADER;
	}
	if (k == K_DATA && c->trim_bytes && v->q + len > c->trim_bytes) {
		if (v->h + trimmed_len > c->header_bytes)
			return V_DROP;
		v->h += trimmed_len;
		return V_TRIM;
	}
	if (v->q + len <= c->queue_bytes)
		v->q += len;
	return ect && c->ecn_bytes && v->q > c->ecn_bytes ? V_MARK : V_PASS;
}

static __always_inline int trim(struct __sk_buff *skb, __u8 *mrc, __u32 hdr_len, __u32 priority,
				__u32 last_hop)
{
	__u32 new_len = MRC_OFF + hdr_len + MRC_CRC;
	__u16 l4 = bpf_htons(8 + hdr_len + MRC_CRC);
	__u32 crc;

	if (bpf_skb_change_tail(skb, new_len, 0))
		return TC_ACT_SHOT;
	/* branch-free: a branch here doubles the verifier's walk of the CRC loop below */
	mrc[3] |= MRC_FLAG_TRIMMED | (__u8)((last_hop & 1) * MRC_FLAG_TRIMMED_LASTHOP);
	crc = bpf_htonl(crc32(mrc, hdr_len));
	if (bpf_skb_store_bytes(skb, MRC_OFF + 3, &mrc[3], 1, 0) ||
	    bpf_skb_store_bytes(skb, MRC_OFF + hdr_len, &crc, 4, 0) ||
	    bpf_skb_store_bytes(skb, IP6_OFF + 4, &l4, 2, 0) ||
	    bpf_skb_store_bytes(skb, UDP_OFF + 4, &l4, 2, 0))
		return TC_ACT_SHOT;
	skb->priority = priority;
	skb->mark |= MARK_REDIRECTED;
	return bpf_redirect(skb->ifindex, 0);
}

SEC("tc")
int mrc_egress(struct __sk_buff *skb)
{
	__u32 zero = 0, hdr_len = 0, segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	__u8 mrc[MRC_DATA_HDR + MRC_IMM] = {};
	__u8 tc1 = 0;
	struct config *c;
	struct vq *v;
	enum verdict verdict;
	enum kind k;
	__u64 now;
	int ect;

	if (skb->mark & MARK_REDIRECTED) {	/* our own trimmed packet, second pass */
		skb->mark &= ~MARK_REDIRECTED;
		return TC_ACT_OK;
	}
	c = bpf_map_lookup_elem(&cfg, &zero);
	v = bpf_map_lookup_elem(&vqs, &zero);
	if (!c || !v || !c->rate_bps)
		return TC_ACT_OK;
	k = classify(skb, mrc, &hdr_len);
	ect = skb->protocol == bpf_htons(ETH_P_IPV6) &&
	      !bpf_skb_load_bytes(skb, IP6_OFF + 1, &tc1, 1) && (tc1 & ECN_MASK) &&
	      (tc1 & ECN_MASK) != ECN_CE;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&v->lock);
	verdict = decide(v, c, now, skb->len, ETH_LEN + 48 + hdr_len + MRC_CRC, k, ect);
	bpf_spin_unlock(&v->lock);

	switch (verdict) {
	case V_DROP:
		count(C_DROPPED, 1);
		return TC_ACT_SHOT;
	case V_TRIM:
		count(C_TRIMMED, 1);
		return trim(skb, mrc, hdr_len, c->priority, c->last_hop);
	case V_HEADER:
		skb->priority = c->priority;
		break;
	case V_MARK:
		tc1 |= ECN_CE;
		if (bpf_skb_store_bytes(skb, IP6_OFF + 1, &tc1, 1, 0))
			return TC_ACT_SHOT;
		count(C_MARKED, segs);
		break;
	default:
		break;
	}
	count(C_PASSED, segs);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
