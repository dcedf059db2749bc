/* The MRC wire codec: the twin of agents/mrc/packet.py (the specification).
 *
 * Every packet is an 8-byte prefix (ver, type, sub, flags, dest_qpn u32), a
 * type-specific header, for DATA an optional 4-byte immediate and the payload, and a
 * CRC-32 trailer (zlib's CRC-32, here ISA-L's crc32_gzip_refl) over every byte
 * before it; all fields in network byte order. Layouts: packet.py's docstring.
 *
 * mrcn_decode() accepts exactly the byte strings packet.parse() accepts, with the
 * same fields, and rejects exactly what parse() rejects; it reads nothing past
 * `len`. The encoders mirror packet.encode() / encode_data_parts(): they write
 * into a caller buffer and return the packet length in bytes or a negative
 * MRCN_E* code; they never write past `cap`. */
#ifndef MRCN_CODEC_H
#define MRCN_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"

#define MRCN_VERSION 1u

/* Sizes in bytes (packet.py's struct sizes). */
#define MRCN_PREFIX_BYTES 8u
#define MRCN_CRC_BYTES 4u
#define MRCN_IMM_BYTES 4u
#define MRCN_DATA_HDR_BYTES 36u
#define MRCN_SACK_HDR_BYTES 48u
#define MRCN_NACK_HDR_BYTES 24u
#define MRCN_PROBE_HDR_BYTES 28u
#define MRCN_CNP_HDR_BYTES 16u
/* The largest non-DATA packet (a SACK with its CRC). */
#define MRCN_MAX_CONTROL_BYTES (MRCN_SACK_HDR_BYTES + MRCN_CRC_BYTES)

/* PSNs never wrap; 2^32 - 1 is reserved (packet.MAX_PSN). */
#define MRCN_MAX_PSN 0xFFFFFFFEu

enum mrcn_ptype {
    MRCN_PT_DATA = 1,
    MRCN_PT_SACK = 2,
    MRCN_PT_NACK = 3,
    MRCN_PT_PROBE_REQ = 4,
    MRCN_PT_PROBE_RSP = 5,
    MRCN_PT_CNP = 0x81,   /* RoCEv2's CNP opcode (IBTA annex A17) */
};

/* RDMA WRITE opcodes, numbered as RoCEv2's RC opcodes (packet.Opcode). */
enum mrcn_opcode {
    MRCN_OP_WRITE_FIRST = 6,
    MRCN_OP_WRITE_MIDDLE = 7,
    MRCN_OP_WRITE_LAST = 8,
    MRCN_OP_WRITE_LAST_WITH_IMM = 9,
    MRCN_OP_WRITE_ONLY = 10,
    MRCN_OP_WRITE_ONLY_WITH_IMM = 11,
};

/* DATA flags (packet.FLAG_*). */
#define MRCN_FLAG_RTX 0x01u
#define MRCN_FLAG_ACK_REQ 0x02u
#define MRCN_FLAG_TRIMMED 0x04u
#define MRCN_FLAG_TRIMMED_LASTHOP 0x08u   /* only with MRCN_FLAG_TRIMMED */
#define MRCN_DATA_FLAGS 0x0Fu
/* SACK flags. */
#define MRCN_FLAG_ECN_ECHO 0x01u
#define MRCN_SACK_FLAGS 0x01u

/* SACK `m` field (packet.SackMode) and NACK reasons (packet.NackReason). */
enum mrcn_sack_mode { MRCN_SACK_NONE = 0, MRCN_SACK_SKIP_ONCE = 1, MRCN_SACK_ALWAYS_SKIP = 2 };
enum mrcn_nack_reason {
    MRCN_NACK_TRIMMED = 1,
    MRCN_NACK_TRIMMED_LASTHOP = 2,
    MRCN_NACK_NO_BITMAP = 3,
    MRCN_NACK_NO_PKT_BUFFER = 4,
    MRCN_NACK_PSN_OOR_WINDOW = 5,
    MRCN_NACK_SEQ_ERR = 6,
};

/* packet.DataPacket. `length` is the length field (a trimmed packet keeps the
 * original size and carries no payload); the payload is `payload_len` bytes at
 * `payload_off` of the decoded buffer (the decoder copies nothing; encoders take
 * the payload bytes as a separate pointer and ignore payload_off). `has_imm`
 * stands for packet.py's `imm is not None`. */
typedef struct mrcn_data {
    uint32_t dest_qpn;
    uint32_t psn;
    uint32_t ev;
    uint8_t opcode;
    uint8_t flags;
    uint8_t has_imm;
    uint32_t imm;
    uint64_t remote_offset;    /* bytes */
    uint32_t length;           /* bytes */
    uint64_t timestamp_ns;
    size_t payload_off;
    size_t payload_len;
} mrcn_data;

/* packet.SackPacket. */
typedef struct mrcn_sack {
    uint32_t dest_qpn;
    uint32_t cum_psn;          /* every PSN below it received */
    uint32_t sack_base;
    uint64_t bitmap;           /* bit i: PSN sack_base + i received */
    uint32_t ev;               /* echoed */
    uint64_t timestamp_ns;     /* echoed */
    uint32_t ooo_count;
    uint64_t received_bytes;
    uint8_t mode;              /* enum mrcn_sack_mode */
    uint8_t flags;
} mrcn_sack;

/* packet.NackPacket. */
typedef struct mrcn_nack {
    uint32_t dest_qpn;
    uint32_t psn;
    uint32_t ev;
    uint64_t timestamp_ns;     /* echoed */
    uint8_t reason;            /* enum mrcn_nack_reason */
} mrcn_nack;

/* packet.ProbePacket: an EV probe request (response == 0) or response (1). */
typedef struct mrcn_probe {
    uint32_t dest_qpn;
    uint16_t probe_id;
    uint32_t req_ev;
    uint32_t rsp_ev;
    uint64_t timestamp_ns;     /* set by the requester, echoed by the responder */
    uint8_t response;
} mrcn_probe;

/* packet.CnpPacket: CE-marked data arrived on `ev` (latest `psn`). */
typedef struct mrcn_cnp {
    uint32_t dest_qpn;
    uint32_t ev;
    uint32_t psn;
} mrcn_cnp;

/* Any packet: `type` (enum mrcn_ptype) says which member is set; a probe
 * response has type MRCN_PT_PROBE_RSP and probe.response == 1. */
typedef struct mrcn_packet {
    uint8_t type;
    union {
        mrcn_data data;
        mrcn_sack sack;
        mrcn_nack nack;
        mrcn_probe probe;
        mrcn_cnp cnp;
    } u;
} mrcn_packet;

/* 1 if the opcode carries an immediate (packet.OPCODES_WITH_IMM), else 0. */
int mrcn_opcode_has_imm(uint8_t opcode);

/* zlib's CRC-32 of buf[0..len) (ISA-L crc32_gzip_refl(0, ...)); buf may be NULL when len is 0. */
uint32_t mrcn_crc32(const uint8_t *buf, size_t len);
/* Continue a CRC-32 over more bytes, as zlib.crc32(buf, crc). */
uint32_t mrcn_crc32_update(uint32_t crc, const uint8_t *buf, size_t len);

/* Destination QPN (bytes 4..8) without validating the packet (packet.peek_dest_qpn).
 * MRCN_EPROTO if len < 8. */
int mrcn_peek_dest_qpn(const uint8_t *buf, size_t len, uint32_t *dest_qpn);

/* Parse one datagram (packet.parse). MRCN_OK with *out set; MRCN_ECRC when the
 * packet is well formed but its CRC-32 trailer does not match; MRCN_EPROTO for
 * any other invalid byte string (*out then undefined). Reads only buf[0..len). */
int mrcn_decode(const uint8_t *buf, size_t len, mrcn_packet *out);

/* Bytes of a DATA packet on the wire: header, immediate if any, payload, CRC. */
size_t mrcn_data_wire_len(int has_imm, size_t payload_len);

/* packet.encode_data_parts: header (with `length` as the length field, which the
 * caller sets, as packet.py's length=-1 default does, to payload_len for an untrimmed
 * packet), the immediate if has_imm, payload_len bytes of payload copied, then the
 * CRC. No consistency checks, as in Python. Returns the bytes written,
 * MRCN_ENOSPC if cap is short, MRCN_EINVAL if the packet would exceed INT_MAX bytes. */
int mrcn_encode_data_parts(uint8_t *out, size_t cap, uint32_t dest_qpn, uint32_t psn,
                           uint32_t ev, uint8_t opcode, uint8_t flags,
                           uint64_t remote_offset, uint64_t timestamp_ns, int has_imm,
                           uint32_t imm, const uint8_t *payload, size_t payload_len,
                           uint32_t length);

/* packet.encode for each type. DATA checks packet.encode's combinations first
 * (MRCN_EINVAL: has_imm disagrees with the opcode, TRIMMED_LASTHOP without TRIMMED,
 * a trimmed packet with payload, or length != payload_len untrimmed); the others
 * have no checks (any u8 mode/reason/flags encodes, as struct.pack allows).
 * `payload` may be NULL when payload_len is 0. */
int mrcn_encode_data(const mrcn_data *pkt, const uint8_t *payload, uint8_t *out, size_t cap);
int mrcn_encode_sack(const mrcn_sack *pkt, uint8_t *out, size_t cap);
int mrcn_encode_nack(const mrcn_nack *pkt, uint8_t *out, size_t cap);
int mrcn_encode_probe(const mrcn_probe *pkt, uint8_t *out, size_t cap);
int mrcn_encode_cnp(const mrcn_cnp *pkt, uint8_t *out, size_t cap);
/* Dispatch on pkt->type (MRCN_EINVAL for an unknown type); `payload` is DATA's. */
int mrcn_encode(const mrcn_packet *pkt, const uint8_t *payload, uint8_t *out, size_t cap);

#endif
