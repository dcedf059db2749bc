/* The MRC wire codec (see mrcn_codec.h): each function names the packet.py code it mirrors. */
#include "mrcn_codec.h"

#include <limits.h>
#include <string.h>

#include <isa-l/crc.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MRCN_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MRCN_ASAN 1
#endif

static inline uint16_t get_be16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t get_be64(const uint8_t *p)
{
    return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

static inline void put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

uint32_t mrcn_crc32_update(uint32_t crc, const uint8_t *buf, size_t len)
{
    if (len == 0)
        return crc;
#ifdef MRCN_ASAN
    /* ISA-L's assembly is not instrumented: touch the range's last byte so that an
     * over-read by our length arithmetic is reported under ASan (fuzz builds). */
    (void)*(const volatile uint8_t *)&buf[len - 1];
#endif
    return crc32_gzip_refl(crc, buf, (uint64_t)len);
}

uint32_t mrcn_crc32(const uint8_t *buf, size_t len)
{
    return mrcn_crc32_update(0, buf, len);
}

int mrcn_peek_dest_qpn(const uint8_t *buf, size_t len, uint32_t *dest_qpn)
{
    if (len < MRCN_PREFIX_BYTES)
        return MRCN_EPROTO;
    *dest_qpn = get_be32(buf + 4);
    return MRCN_OK;
}

/* packet.check_crc on buf[0..len), len >= 12 already checked by the caller. */
static int check_crc(const uint8_t *buf, size_t len)
{
    size_t end = len - MRCN_CRC_BYTES;
    return mrcn_crc32(buf, end) == get_be32(buf + end) ? MRCN_OK : MRCN_ECRC;
}

static int is_opcode(uint8_t op)
{
    return op >= MRCN_OP_WRITE_FIRST && op <= MRCN_OP_WRITE_ONLY_WITH_IMM;
}

int mrcn_opcode_has_imm(uint8_t op)
{
    return op == MRCN_OP_WRITE_LAST_WITH_IMM || op == MRCN_OP_WRITE_ONLY_WITH_IMM;
}

/* packet.unpack_data, the checks in the same order. */
static int decode_data(const uint8_t *buf, size_t n, mrcn_data *d)
{
    if (n < MRCN_DATA_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_EPROTO;
    uint8_t ver = buf[0], opcode = buf[2], flags = buf[3];
    if (ver != MRCN_VERSION || buf[1] != MRCN_PT_DATA)
        return MRCN_EPROTO;
    if (!is_opcode(opcode))
        return MRCN_EPROTO;
    if (flags & ~MRCN_DATA_FLAGS)
        return MRCN_EPROTO;
    if ((flags & MRCN_FLAG_TRIMMED_LASTHOP) && !(flags & MRCN_FLAG_TRIMMED))
        return MRCN_EPROTO;
    d->dest_qpn = get_be32(buf + 4);
    d->psn = get_be32(buf + 8);
    d->ev = get_be32(buf + 12);
    d->remote_offset = get_be64(buf + 16);
    d->length = get_be32(buf + 24);
    d->timestamp_ns = get_be64(buf + 28);
    d->opcode = opcode;
    d->flags = flags;
    if (d->psn > MRCN_MAX_PSN)
        return MRCN_EPROTO;
    size_t start = MRCN_DATA_HDR_BYTES;
    d->has_imm = 0;
    d->imm = 0;
    if (mrcn_opcode_has_imm(opcode)) {
        if (n < start + MRCN_IMM_BYTES + MRCN_CRC_BYTES)
            return MRCN_EPROTO;
        d->has_imm = 1;
        d->imm = get_be32(buf + start);
        start += MRCN_IMM_BYTES;
    }
    size_t end = n - MRCN_CRC_BYTES;   /* >= start: checked above */
    if (flags & MRCN_FLAG_TRIMMED) {
        if (end != start)
            return MRCN_EPROTO;
    } else if (end - start != (size_t)d->length) {
        return MRCN_EPROTO;
    }
    /* Python: off + length > 2**64 - 1, without wrapping. */
    if ((uint64_t)d->length > UINT64_MAX - d->remote_offset)
        return MRCN_EPROTO;
    d->payload_off = start;
    d->payload_len = end - start;
    return check_crc(buf, n);
}

/* packet.unpack_sack. */
static int decode_sack(const uint8_t *buf, size_t n, mrcn_sack *s)
{
    if (n != MRCN_SACK_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_EPROTO;
    if (buf[0] != MRCN_VERSION || buf[1] != MRCN_PT_SACK)
        return MRCN_EPROTO;
    s->mode = buf[2];
    s->flags = buf[3];
    if (s->mode > MRCN_SACK_ALWAYS_SKIP)
        return MRCN_EPROTO;
    if (s->flags & ~MRCN_SACK_FLAGS)
        return MRCN_EPROTO;
    s->dest_qpn = get_be32(buf + 4);
    s->cum_psn = get_be32(buf + 8);
    s->sack_base = get_be32(buf + 12);
    s->bitmap = get_be64(buf + 16);
    s->ev = get_be32(buf + 24);
    s->timestamp_ns = get_be64(buf + 28);
    s->ooo_count = get_be32(buf + 36);
    s->received_bytes = get_be64(buf + 40);
    /* Python also rejects cum_psn > MAX_PSN + 1, which no u32 is. */
    if (s->sack_base > MRCN_MAX_PSN)
        return MRCN_EPROTO;
    return check_crc(buf, n);
}

/* The NACK branch of packet.parse. */
static int decode_nack(const uint8_t *buf, size_t n, mrcn_nack *k)
{
    if (n != MRCN_NACK_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_EPROTO;
    k->reason = buf[2];
    k->dest_qpn = get_be32(buf + 4);
    k->psn = get_be32(buf + 8);
    k->ev = get_be32(buf + 12);
    k->timestamp_ns = get_be64(buf + 16);
    if (buf[0] != MRCN_VERSION || k->reason < MRCN_NACK_TRIMMED || k->reason > MRCN_NACK_SEQ_ERR
        || buf[3] != 0 || k->psn > MRCN_MAX_PSN)
        return MRCN_EPROTO;
    return check_crc(buf, n);
}

/* The PROBE_REQ / PROBE_RSP branch of packet.parse. */
static int decode_probe(const uint8_t *buf, size_t n, mrcn_probe *p)
{
    if (n != MRCN_PROBE_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_EPROTO;
    uint16_t pad = get_be16(buf + 10);
    if (buf[0] != MRCN_VERSION || buf[2] != 0 || buf[3] != 0 || pad != 0)
        return MRCN_EPROTO;
    p->dest_qpn = get_be32(buf + 4);
    p->probe_id = get_be16(buf + 8);
    p->req_ev = get_be32(buf + 12);
    p->rsp_ev = get_be32(buf + 16);
    p->timestamp_ns = get_be64(buf + 20);
    p->response = buf[1] == MRCN_PT_PROBE_RSP;
    return check_crc(buf, n);
}

/* The CNP branch of packet.parse. */
static int decode_cnp(const uint8_t *buf, size_t n, mrcn_cnp *c)
{
    if (n != MRCN_CNP_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_EPROTO;
    c->dest_qpn = get_be32(buf + 4);
    c->ev = get_be32(buf + 8);
    c->psn = get_be32(buf + 12);
    if (buf[0] != MRCN_VERSION || buf[2] != 0 || buf[3] != 0 || c->psn > MRCN_MAX_PSN)
        return MRCN_EPROTO;
    return check_crc(buf, n);
}

int mrcn_decode(const uint8_t *buf, size_t len, mrcn_packet *out)
{
    if (len < MRCN_PREFIX_BYTES + MRCN_CRC_BYTES)
        return MRCN_EPROTO;
    out->type = buf[1];
    switch (buf[1]) {
    case MRCN_PT_DATA: return decode_data(buf, len, &out->u.data);
    case MRCN_PT_SACK: return decode_sack(buf, len, &out->u.sack);
    case MRCN_PT_NACK: return decode_nack(buf, len, &out->u.nack);
    case MRCN_PT_PROBE_REQ:
    case MRCN_PT_PROBE_RSP: return decode_probe(buf, len, &out->u.probe);
    case MRCN_PT_CNP: return decode_cnp(buf, len, &out->u.cnp);
    default: return MRCN_EPROTO;
    }
}

size_t mrcn_data_wire_len(int has_imm, size_t payload_len)
{
    return MRCN_DATA_HDR_BYTES + (has_imm ? MRCN_IMM_BYTES : 0) + payload_len + MRCN_CRC_BYTES;
}

/* Writes the 8-byte prefix. */
static void put_prefix(uint8_t *p, uint8_t type, uint8_t sub, uint8_t flags, uint32_t dest_qpn)
{
    p[0] = MRCN_VERSION;
    p[1] = type;
    p[2] = sub;
    p[3] = flags;
    put_be32(p + 4, dest_qpn);
}

/* packet._seal: the CRC of out[0..hdr) appended; returns the packet length. */
static int seal(uint8_t *out, size_t hdr)
{
    put_be32(out + hdr, mrcn_crc32(out, hdr));
    return (int)(hdr + MRCN_CRC_BYTES);
}

int mrcn_encode_data_parts(uint8_t *out, size_t cap, uint32_t dest_qpn, uint32_t psn,
                           uint32_t ev, uint8_t opcode, uint8_t flags,
                           uint64_t remote_offset, uint64_t timestamp_ns, int has_imm,
                           uint32_t imm, const uint8_t *payload, size_t payload_len,
                           uint32_t length)
{
    if (payload_len > (size_t)INT_MAX - (MRCN_DATA_HDR_BYTES + MRCN_IMM_BYTES + MRCN_CRC_BYTES))
        return MRCN_EINVAL;
    size_t total = mrcn_data_wire_len(has_imm, payload_len);
    if (cap < total)
        return MRCN_ENOSPC;
    put_prefix(out, MRCN_PT_DATA, opcode, flags, dest_qpn);
    put_be32(out + 8, psn);
    put_be32(out + 12, ev);
    put_be64(out + 16, remote_offset);
    put_be32(out + 24, length);
    put_be64(out + 28, timestamp_ns);
    size_t pos = MRCN_DATA_HDR_BYTES;
    if (has_imm) {
        put_be32(out + pos, imm);
        pos += MRCN_IMM_BYTES;
    }
    if (payload_len)
        memcpy(out + pos, payload, payload_len);
    return seal(out, pos + payload_len);
}

/* The DataPacket branch of packet.encode: its checks in its order. */
int mrcn_encode_data(const mrcn_data *pkt, const uint8_t *payload, uint8_t *out, size_t cap)
{
    if (mrcn_opcode_has_imm(pkt->opcode) != (pkt->has_imm != 0))
        return MRCN_EINVAL;
    if ((pkt->flags & MRCN_FLAG_TRIMMED_LASTHOP) && !(pkt->flags & MRCN_FLAG_TRIMMED))
        return MRCN_EINVAL;
    if (pkt->flags & MRCN_FLAG_TRIMMED) {
        if (pkt->payload_len)
            return MRCN_EINVAL;
    } else if ((size_t)pkt->length != pkt->payload_len) {
        return MRCN_EINVAL;
    }
    return mrcn_encode_data_parts(out, cap, pkt->dest_qpn, pkt->psn, pkt->ev, pkt->opcode,
                                  pkt->flags, pkt->remote_offset, pkt->timestamp_ns,
                                  pkt->has_imm, pkt->imm, payload, pkt->payload_len, pkt->length);
}

int mrcn_encode_sack(const mrcn_sack *pkt, uint8_t *out, size_t cap)
{
    if (cap < MRCN_SACK_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_ENOSPC;
    put_prefix(out, MRCN_PT_SACK, pkt->mode, pkt->flags, pkt->dest_qpn);
    put_be32(out + 8, pkt->cum_psn);
    put_be32(out + 12, pkt->sack_base);
    put_be64(out + 16, pkt->bitmap);
    put_be32(out + 24, pkt->ev);
    put_be64(out + 28, pkt->timestamp_ns);
    put_be32(out + 36, pkt->ooo_count);
    put_be64(out + 40, pkt->received_bytes);
    return seal(out, MRCN_SACK_HDR_BYTES);
}

int mrcn_encode_nack(const mrcn_nack *pkt, uint8_t *out, size_t cap)
{
    if (cap < MRCN_NACK_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_ENOSPC;
    put_prefix(out, MRCN_PT_NACK, pkt->reason, 0, pkt->dest_qpn);
    put_be32(out + 8, pkt->psn);
    put_be32(out + 12, pkt->ev);
    put_be64(out + 16, pkt->timestamp_ns);
    return seal(out, MRCN_NACK_HDR_BYTES);
}

int mrcn_encode_probe(const mrcn_probe *pkt, uint8_t *out, size_t cap)
{
    if (cap < MRCN_PROBE_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_ENOSPC;
    put_prefix(out, pkt->response ? MRCN_PT_PROBE_RSP : MRCN_PT_PROBE_REQ, 0, 0, pkt->dest_qpn);
    put_be16(out + 8, pkt->probe_id);
    put_be16(out + 10, 0);
    put_be32(out + 12, pkt->req_ev);
    put_be32(out + 16, pkt->rsp_ev);
    put_be64(out + 20, pkt->timestamp_ns);
    return seal(out, MRCN_PROBE_HDR_BYTES);
}

/* packet.encode_cnp. */
int mrcn_encode_cnp(const mrcn_cnp *pkt, uint8_t *out, size_t cap)
{
    if (cap < MRCN_CNP_HDR_BYTES + MRCN_CRC_BYTES)
        return MRCN_ENOSPC;
    put_prefix(out, MRCN_PT_CNP, 0, 0, pkt->dest_qpn);
    put_be32(out + 8, pkt->ev);
    put_be32(out + 12, pkt->psn);
    return seal(out, MRCN_CNP_HDR_BYTES);
}

int mrcn_encode(const mrcn_packet *pkt, const uint8_t *payload, uint8_t *out, size_t cap)
{
    switch (pkt->type) {
    case MRCN_PT_DATA: return mrcn_encode_data(&pkt->u.data, payload, out, cap);
    case MRCN_PT_SACK: return mrcn_encode_sack(&pkt->u.sack, out, cap);
    case MRCN_PT_NACK: return mrcn_encode_nack(&pkt->u.nack, out, cap);
    case MRCN_PT_PROBE_REQ:
    case MRCN_PT_PROBE_RSP: return mrcn_encode_probe(&pkt->u.probe, out, cap);
    case MRCN_PT_CNP: return mrcn_encode_cnp(&pkt->u.cnp, out, cap);
    default: return MRCN_EINVAL;
    }
}
