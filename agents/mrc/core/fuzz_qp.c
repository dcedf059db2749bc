/* libFuzzer target: a sequence of untrusted datagrams and timer ticks fed to one QP in RTS
 * (a requester with a write in flight and a responder with a small memory region and posted
 * receives), as a peer and a hostile fabric could deliver them. Any crash, sanitizer report,
 * or broken invariant (a datagram out of the transmit queue's bounds, an event the queue
 * says it holds but cannot give) is a finding.
 *
 * Input: records of [op u8][len u16, big endian][len bytes]. The low two bits of op pick the
 * action: 0 receive, 1 receive with ECN CE, 3 a receive batch of the bytes cut in two, and
 * 2 advance the clock by `len` microseconds and run the timers (no bytes follow). Bit 2 of op rewrites the datagram's
 * last four bytes with its CRC-32 so that mutations get past the integrity check. After each
 * record the QP's datagrams are taken and its events drained. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mrcn_codec.h"
#include "mrcn_qp.h"

#define MEM_BYTES 65536u

static uint8_t g_mem[MEM_BYTES];
static uint8_t g_write[20000];

static mrcn_qp *bring_up(void)
{
    mrcn_qp_config cfg = {
        .rc = 0, .payload_bytes = 1024, .time_scale = 1.0, .min_rto_s = 0.010,
        .initial_rto_s = 0.0, .sack_every = 8, .ack_delay_s = 0.0005, .ack_coalesce_s = 0.0,
        .reorder_threshold = 3, .ooo_threshold = 5, .ooo_time_frac = 0.25, .ev_loss_run = 2,
        .loss_inference = 1,
        .probe_interval_s = 0.005, .probe_timeout_s = 0.002, .probe_successes = 3,
        .ev_min_active = 1, .skip_timeout_s = 0.001, .always_skip_ce_run = 8,
        .ev_event_mask = 3, .max_burst = 256, .cnp_interval_s = 0.0001,
    };
    mrcn_cc cc;
    mrcn_nscc_params p;
    mrcn_nscc_params_default(&p);
    if (mrcn_cc_init_nscc(&cc, cfg.payload_bytes, &p) != MRCN_OK)
        abort();
    mrcn_qp *qp = NULL;
    if (mrcn_qp_create(&qp, 7, &cfg, &cc, 42, 54, g_mem, sizeof g_mem, 1) != MRCN_OK)
        abort();
    static const uint32_t evs[] = {1, 2, 3, 4};
    mrcn_qp_attr attr = {.mpr = 8, .mpr_dest = 8, .max_wimm = 128, .max_wimm_dest = 128,
                         .timeout = 12, .retry_linear_cnt = 7, .retry_exp_cnt = 7};
    if (mrcn_qp_init_evs(qp, evs, 4, 1, 3) != MRCN_OK ||
        mrcn_qp_set_reverse_evs(qp, evs, 4) != MRCN_OK ||
        mrcn_qp_set_attr(qp, MRCN_QPS_INIT, &attr) != MRCN_OK)
        abort();
    mrcn_qp_set_dest_qpn(qp, 9);
    if (mrcn_qp_set_attr(qp, MRCN_QPS_RTR, &attr) != MRCN_OK ||
        mrcn_qp_set_attr(qp, MRCN_QPS_RTS, &attr) != MRCN_OK)
        abort();
    for (uint64_t i = 0; i < 4; i++)
        mrcn_qp_post_recv(qp, i);
    if (mrcn_qp_post_write(qp, 1, g_write, sizeof g_write, 0, true, 5, NULL) != MRCN_OK)
        abort();
    return qp;
}

static void drain(mrcn_qp *qp, mrcn_txq *q, double now)
{
    mrcn_txq_reset(q);
    if (mrcn_qp_datagrams_to_send(qp, now, q) < 0)
        return;
    for (size_t i = 0; i < q->count; i++)   /* every entry lies inside the arena */
        if (q->pkts[i].off + q->pkts[i].len > q->used)
            abort();
    size_t pending = mrcn_qp_events_pending(qp);
    mrcn_event e;
    for (size_t i = 0; i < pending; i++)
        if (mrcn_qp_next_event(qp, &e) != 1)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mrcn_qp *qp = bring_up();
    mrcn_txq q;
    mrcn_txq_init(&q);
    double now = 0.0;
    drain(qp, &q, now);
    uint8_t buf[65536];
    size_t at = 0;
    while (at + 3 <= size) {
        uint8_t op = data[at];
        size_t len = (size_t)data[at + 1] << 8 | data[at + 2];
        at += 3;
        if ((op & 3) == 2) {
            now += (double)len * 1e-6;
            mrcn_qp_handle_timer(qp, now);
            drain(qp, &q, now);
            continue;
        }
        if (len > size - at)
            len = size - at;
        memcpy(buf, data + at, len);
        at += len;
        if ((op & 4) && len >= 8) {
            uint32_t crc = mrcn_crc32(buf, len - 4);
            buf[len - 4] = (uint8_t)(crc >> 24);
            buf[len - 3] = (uint8_t)(crc >> 16);
            buf[len - 2] = (uint8_t)(crc >> 8);
            buf[len - 1] = (uint8_t)crc;
        }
        switch (op & 3) {
        case 0:
        case 1:
            mrcn_qp_receive(qp, buf, len, now, op & 1);
            break;
        default: {
            const uint8_t *parts[2] = {buf, buf + len / 2};
            size_t lens[2] = {len / 2, len - len / 2};
            mrcn_qp_receive_batch(qp, parts, lens, NULL, 2, now);
            break;
        }
        }
        drain(qp, &q, now);
    }
    mrcn_txq_free(&q);
    mrcn_qp_destroy(qp);
    return 0;
}
