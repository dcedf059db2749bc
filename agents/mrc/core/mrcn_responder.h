/* The responder half of a QP: the twin of agents/mrc/responder.py (Responder), whose
 * module docstring documents the behaviour (PSN bitmap in 64-PSN chunks above the
 * cumulative PSN, placement by offset, SACK coalescing, CE echo, trims, immediates, RC
 * go-back-N). Each function names the Python method it mirrors.
 *
 * Ownership: the memory region (base, len) belongs to the caller and must outlive the
 * responder. Outputs are queues the caller drains: control packets (SACK, NACK, probe
 * response) as encoded bytes with the EV to send them on, and RECV_RDMA_WITH_IMM
 * completions as plain structs. Times are double seconds as passed by the caller;
 * wire timestamps u64 ns. Functions return 0 or a negative MRCN_E* code. After
 * MRCN_ENOMEM the responder's state may be partly updated (Python's MemoryError). */
#ifndef MRCN_RESPONDER_H
#define MRCN_RESPONDER_H

#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_codec.h"
#include "mrcn_evmap.h"
#include "mrcn_reverse.h"

/* PSN chunks kept above the cumulative PSN: a window of mpr_dest * 128 PSNs (mpr_dest
 * <= 255, mrc.h) spans at most 511 chunks from the cumulative PSN's chunk. */
#define MRCN_RESPONDER_CHUNKS 512u
#define MRCN_RESPONDER_MAX_MPR_DEST 255u

/* The QPConfig fields the responder reads (types.QPConfig). */
typedef struct mrcn_responder_config {
    int64_t sack_every;            /* data packets per SACK */
    double ack_delay_s;            /* SACK hold, seconds */
    double ack_coalesce_s;         /* adaptive SACK hold, seconds (0: off) */
    int64_t always_skip_ce_run;    /* CE marks in a row on one EV before ALWAYS_SKIP */
} mrcn_responder_config;

/* One queued control packet (responder._ctrl_out's (bytes, EV)). */
typedef struct mrcn_ctrl {
    uint8_t bytes[MRCN_MAX_CONTROL_BYTES];
    uint32_t len;
    uint32_t ev;                   /* the EV to send it on */
} mrcn_ctrl;

enum mrcn_wc_status { MRCN_WC_SUCCESS = 0, MRCN_WC_WR_FLUSH_ERR = 1 };

/* One RECV_RDMA_WITH_IMM completion (types.WorkCompletion of the responder): SUCCESS
 * carries the immediate and the PSN of the message's last packet (byte_len 0);
 * WR_FLUSH_ERR carries only the receive's wr_id (imm and psn are Python's None). */
typedef struct mrcn_wc {
    double time;                   /* seconds */
    uint64_t wr_id;
    uint32_t imm;
    uint32_t psn;
    uint8_t status;                /* enum mrcn_wc_status */
} mrcn_wc;

typedef struct mrcn_chunk {
    uint32_t ch;                   /* PSN >> 6 */
    uint8_t used;
    uint64_t bits;                 /* bit i: PSN (ch << 6) + i received */
} mrcn_chunk;

typedef struct mrcn_dirty {
    uint32_t ch;
    uint32_t ev;                   /* latest arrival's EV and stamp */
    uint64_t ts;
} mrcn_dirty;

typedef struct mrcn_imm {
    uint32_t psn;
    uint32_t imm;
} mrcn_imm;

typedef struct mrcn_responder {
    uint32_t qpn;
    int rc;                        /* transport RC (go-back-N) instead of MRC */
    mrcn_responder_config cfg;
    uint32_t dest_qpn;
    uint32_t mpr_dest;             /* PSN window in units of 128 PSNs */
    int64_t max_wimm_dest;
    uint8_t *mem;                  /* registered region, caller-owned */
    size_t mem_len;
    int has_mem;                   /* 0: no region (Python's None) */
    uint64_t rcv_cum;              /* every PSN below it received */
    mrcn_chunk chunks[MRCN_RESPONDER_CHUNKS];   /* by ch % MRCN_RESPONDER_CHUNKS */
    size_t n_chunks;
    mrcn_dirty *dirty;             /* dict order; unique ch */
    size_t n_dirty, cap_dirty;
    int64_t sack_pending;
    int has_deadline;
    double ack_deadline;           /* seconds, valid when has_deadline */
    double last_data_at;           /* seconds; -inf before the first data packet */
    mrcn_imm *imm_heap;            /* min-heap on psn */
    size_t n_imm, cap_imm;
    uint64_t *recvs;               /* ring of posted receives' wr_id, oldest first */
    size_t recv_head, n_recvs, cap_recvs;
    int seq_err_sent;
    mrcn_evmap ce_run;             /* EV -> a = CE marks in a row, b = `clean` then */
    int64_t clean;
    int64_t above;                 /* PSNs received above rcv_cum */
    mrcn_ctrl *out;
    size_t n_out, cap_out;
    mrcn_wc *wcs;
    size_t n_wcs, cap_wcs;
    mrcn_evmap reverse_evs;        /* forward EV -> t = last arrival time */
    mrcn_reverse reverse;
    uint64_t bad_packets, rx_packets, rx_bytes, rx_duplicates, rx_ooo, rx_access_errors;
    uint64_t rx_out_of_window, rx_no_recv;
} mrcn_responder;

/* Responder.__init__. `mem` may be NULL when `has_mem` is 0 or mem_len is 0; mpr_dest
 * and max_wimm_dest start at QPAttr's defaults (8, 128). */
void mrcn_responder_init(mrcn_responder *r, uint32_t qpn, const mrcn_responder_config *cfg,
                         int rc, uint8_t *mem, size_t mem_len, int has_mem);
void mrcn_responder_free(mrcn_responder *r);
/* Setting Responder.mpr_dest; MRCN_EINVAL above 255 (the chunk ring's bound, mrc.h's). */
int mrcn_responder_set_mpr_dest(mrcn_responder *r, uint32_t mpr_dest);

/* Responder.on_data: one DATA datagram (`ecn`: its IP header carried CE). MRCN_EPROTO or
 * MRCN_ECRC for bytes packet.unpack_data refuses (ProtocolError; nothing changed);
 * MRCN_ESTATE when a completion finds no posted receive (after stop; IndexError). */
int mrcn_responder_on_data(mrcn_responder *r, const uint8_t *buf, size_t len, double now,
                           int ecn);
/* Responder.on_probe_req: queue the response to a probe request on its rsp_ev. */
int mrcn_responder_on_probe_req(mrcn_responder *r, const mrcn_probe *req);
/* Responder.post_recv. */
int mrcn_responder_post_recv(mrcn_responder *r, uint64_t wr_id);
/* Responder.on_timer: send the held SACKs if their hold is over. */
int mrcn_responder_on_timer(mrcn_responder *r, double now);
/* Responder.stop: drop output and the held SACK; flush posted receives. */
int mrcn_responder_stop(mrcn_responder *r, double now);
/* Responder.deadline: 1 and *at (seconds) when a held SACK is due, else 0. */
int mrcn_responder_deadline(const mrcn_responder *r, double *at);

/* Responder.receive_batch, in steps so that the caller runs its own one-by-one
 * dispatch (`slow`) between them:
 *     begin; for each datagram: fast() == 1 -> next; 0 -> state written back, run the
 *     one-by-one dispatch, then reload() (or, if the QP left its state, dispatch the
 *     rest one by one and stop); after the last: end().
 * The locals of the Python loop live in the batch struct. */
typedef struct mrcn_responder_batch {
    uint64_t cum;
    int64_t pending;
    double last;
    int has_hold_gap;
    double hold_gap;               /* the gap of the packet that starts a hold, seconds */
    uint64_t packets, nbytes;
    int clear;                     /* no chunk and no immediate pending */
} mrcn_responder_batch;

void mrcn_responder_batch_begin(mrcn_responder *r, mrcn_responder_batch *b);
/* 1: the datagram was an in-order data packet, placed; 0: not (state written back);
 * negative: MRCN_ENOMEM. `marked`: its IP header carried CE. The region must be set. */
int mrcn_responder_batch_fast(mrcn_responder *r, mrcn_responder_batch *b, const uint8_t *buf,
                              size_t len, int marked, double now);
void mrcn_responder_batch_reload(mrcn_responder *r, mrcn_responder_batch *b);
void mrcn_responder_batch_end(mrcn_responder *r, mrcn_responder_batch *b, double now);

#endif
