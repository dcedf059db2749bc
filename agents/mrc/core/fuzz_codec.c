/* libFuzzer target for the MRC wire codec (mrcn_codec.c); build and run: fuzz.sh.
 *
 * The decoder takes untrusted datagrams, so every input must be decoded without a read
 * past its end (ASan), and every accepted input must re-encode to the very same bytes:
 * packet.py's parse accepts only canonical encodings, so decode is a bijection onto its
 * accepted set. A mismatch aborts (a finding). Each input is also decoded a second time
 * with a correct CRC trailer written over its last 4 bytes, so that mutations reach the
 * checks behind the CRC instead of failing it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrcn_codec.h"

#define FUZZ_ASSERT(cond)                                                             \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz_codec: %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                  \
        }                                                                             \
    } while (0)

/* zlib's CRC-32, bit by bit (no table): the reference ISA-L must equal. */
static uint32_t crc32_reference(const uint8_t *buf, size_t len)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) {
        crc ^= buf[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void round_trip(const uint8_t *buf, size_t len)
{
    mrcn_packet pkt;
    int rc = mrcn_decode(buf, len, &pkt);
    FUZZ_ASSERT(rc == MRCN_OK || rc == MRCN_EPROTO || rc == MRCN_ECRC);
    uint32_t qpn;
    int peek = mrcn_peek_dest_qpn(buf, len, &qpn);
    FUZZ_ASSERT(peek == (len < MRCN_PREFIX_BYTES ? MRCN_EPROTO : MRCN_OK));
    if (rc != MRCN_OK)
        return;
    FUZZ_ASSERT(qpn == pkt.u.data.dest_qpn);   /* dest_qpn leads every member */
    const uint8_t *payload = NULL;
    if (pkt.type == MRCN_PT_DATA) {
        const mrcn_data *d = &pkt.u.data;
        FUZZ_ASSERT(d->payload_off <= len && d->payload_len <= len - d->payload_off);
        payload = buf + d->payload_off;
    }
    /* Re-encode into a buffer of exactly len bytes (ASan catches a write past it). */
    uint8_t *out = malloc(len);
    FUZZ_ASSERT(out != NULL);
    int n = mrcn_encode(&pkt, payload, out, len);
    FUZZ_ASSERT(n >= 0 && (size_t)n == len);
    FUZZ_ASSERT(memcmp(out, buf, len) == 0);
    /* One byte short must be refused, with nothing written past the cap. */
    FUZZ_ASSERT(mrcn_encode(&pkt, payload, out, len - 1) == MRCN_ENOSPC);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_ASSERT(mrcn_crc32(data, size) == crc32_reference(data, size));
    round_trip(data, size);
    if (size >= MRCN_PREFIX_BYTES + MRCN_CRC_BYTES) {
        uint8_t *fixed = malloc(size);
        FUZZ_ASSERT(fixed != NULL);
        memcpy(fixed, data, size);
        uint32_t crc = mrcn_crc32(fixed, size - MRCN_CRC_BYTES);
        fixed[size - 4] = (uint8_t)(crc >> 24);
        fixed[size - 3] = (uint8_t)(crc >> 16);
        fixed[size - 2] = (uint8_t)(crc >> 8);
        fixed[size - 1] = (uint8_t)crc;
        mrcn_packet pkt;
        FUZZ_ASSERT(mrcn_decode(fixed, size, &pkt) != MRCN_ECRC);
        round_trip(fixed, size);
        free(fixed);
    }
    return 0;
}
