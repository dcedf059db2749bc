/* The requester half of a QP: the twin of agents/mrc/requester.py (Requester), whose module
 * docstring documents the behaviour (packetise writes, spray over EVs, SACK/NACK handling,
 * retransmit oldest first on another EV, RC go-back-N). Loss detection is mrcn_loss.h, the
 * EV probes mrcn_probes.h; all three share struct mrcn_req, as the Python objects share the
 * requester's tables.
 *
 * Also here: the QP's configuration (types.QPConfig as a plain struct, filled by the
 * binding) and the QP's event queue (one queue, as the Python QP's deque shared by both
 * halves and the EV set, so that events keep the order in which they happened).
 *
 * Writes reference the caller's bytes (pointer, length) until they complete, are flushed, or
 * the QP is reset or destroyed: every write posted with an index below
 * mrcn_req.wr_head is no longer referenced. Transmissions are a table by PSN over
 * [tx_base, next_psn); a PSN not ``present`` there is not in Python's ``outstanding``. */
#ifndef MRCN_REQUESTER_H
#define MRCN_REQUESTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_cc.h"
#include "mrcn_codec.h"
#include "mrcn_ev.h"
#include "mrcn_loss.h"
#include "mrcn_probes.h"
#include "mrcn_responder.h"
#include "mrcn_rtt.h"
#include "mrcn_txq.h"

/* types.QPConfig: the fields the engine reads (cc and cc_params become mrcn_cc in the QP). */
typedef struct mrcn_qp_config {
    int rc;                        /* transport RC (go-back-N, one EV) instead of MRC */
    uint32_t payload_bytes;        /* per data packet, >= 1 */
    double time_scale, min_rto_s, initial_rto_s;   /* s (time_scale: a factor) */
    int64_t sack_every;
    double ack_delay_s, ack_coalesce_s;            /* s */
    int64_t reorder_threshold, ooo_threshold;
    double ooo_time_frac;
    uint64_t ev_loss_run;
    int loss_inference;            /* 0: no per-EV threshold nor cross-EV scan (their queues
                                      stay empty): NACKs and timers alone find losses */
    double probe_interval_s, probe_timeout_s;      /* s */
    int64_t probe_successes;
    uint32_t ev_min_active;
    double skip_timeout_s;                         /* s */
    int64_t always_skip_ce_run;
    uint32_t ev_event_mask;
    uint32_t max_burst;            /* datagrams per datagrams_to_send, >= 1 */
    double cnp_interval_s;         /* s, 0: no CNPs */
    int ev_select;                 /* MRCN_EV_SELECT_* (mrcn_ev.h): the spec's rotation or REPS */
} mrcn_qp_config;

/* types.QPAttr (mrc.h struct mrc_qp_attr). */
typedef struct mrcn_qp_attr {
    uint32_t mpr, mpr_dest, max_wimm, max_wimm_dest, timeout, retry_linear_cnt, retry_exp_cnt;
} mrcn_qp_attr;

#define MRCN_RETRY_EXP_INFINITE 25u

/* The QP's events (types.WorkCompletion, ev.EVEvent, types.QPError). */
enum mrcn_event_kind {
    MRCN_EVENT_WRITE = 0,      /* requester WorkCompletion, opcode RDMA_WRITE */
    MRCN_EVENT_RECV = 1,       /* responder WorkCompletion, RECV_RDMA_WITH_IMM (mrcn_wc) */
    MRCN_EVENT_EV = 2,         /* EVEvent */
    MRCN_EVENT_ERROR = 3,      /* QPError */
};
enum mrcn_write_status {
    MRCN_WRITE_SUCCESS = 0,
    MRCN_WRITE_RETRY_EXC_ERR = 1,
    MRCN_WRITE_WR_FLUSH_ERR = 2,
};
#define MRCN_REASON_BYTES 112

typedef struct mrcn_event {
    int kind;                  /* enum mrcn_event_kind */
    double time;               /* s */
    union {
        struct {
            uint64_t wr_id;    /* the caller's u64 */
            uint64_t wr_index; /* the write's post index (mrcn_req.wr_tail at post) */
            uint64_t byte_len;
            int status;        /* enum mrcn_write_status */
        } write;
        mrcn_wc recv;
        mrcn_ev_event ev;
        char reason[MRCN_REASON_BYTES];   /* QPError.reason, NUL-terminated */
    } u;
} mrcn_event;

typedef struct mrcn_events {
    mrcn_event *buf;
    size_t head, n, cap;       /* ring, cap a power of two or 0 */
} mrcn_events;

void mrcn_events_free(mrcn_events *q);
/* A zeroed slot at the tail, or NULL (MRCN_ENOMEM). */
mrcn_event *mrcn_events_push(mrcn_events *q);
/* Move the EV events `set` (NULL: none) reported into `q`, in order. MRCN_ENOMEM. */
int mrcn_events_drain_ev_set(mrcn_events *q, mrcn_ev_set *set);
/* Pop the oldest into *e: 1, or 0 when empty. */
int mrcn_events_pop(mrcn_events *q, mrcn_event *e);
void mrcn_events_clear(mrcn_events *q);

/* One posted write (requester._WR). */
typedef struct mrcn_wr {
    uint64_t wr_id;
    const uint8_t *data;       /* the caller's bytes, borrowed */
    size_t size;               /* bytes */
    uint64_t remote_offset;    /* bytes */
    bool has_imm;
    uint32_t imm;
    uint32_t first_psn, last_psn;
} mrcn_wr;

/* The latest transmission of one PSN (requester._Tx). */
typedef struct mrcn_tx {
    uint64_t wr;               /* the write's post index */
    size_t pos;                /* payload offset in the write, bytes */
    uint32_t length;           /* payload bytes */
    uint8_t opcode;
    bool present;              /* in Python's ``outstanding`` */
    bool lost;
    uint32_t ev;
    int64_t ev_seq;            /* -1 once acknowledged */
    uint64_t ts_ns;
    double sent_at;            /* s */
    int64_t timeouts;
    int64_t loss_retries;      /* retries spent on loss evidence (RETRY_SPENT) */
    uint64_t rtx_count;
    int64_t gseq;              /* QP-wide transmission counter, -1 for RC */
} mrcn_tx;

typedef struct mrcn_req mrcn_req;
/* on_error(ctx, now, reason): a write's retries are exhausted (the QP enters ERR). */
typedef int (*mrcn_req_error_fn)(void *ctx, double now, const char *reason);

struct mrcn_req {
    uint32_t qpn;
    const mrcn_qp_config *cfg; /* the QP's, borrowed */
    mrcn_cc *cc;               /* the QP's controller, borrowed */
    int cc_sent;               /* the controller overrides on_packet_sent (DCQCN) */
    mrcn_rtt *rtt;             /* the QP's estimator, borrowed */
    mrcn_events *events;       /* the QP's event queue, borrowed */
    mrcn_req_error_fn on_error;
    void *on_error_ctx;
    mrcn_ev_set *evs;          /* set at INIT, borrowed */
    uint32_t dest_qpn;
    mrcn_qp_attr attr;
    uint64_t bad_packets;
    bool failed;               /* flushed: the QP is in ERR */
    mrcn_wr *wrs;              /* ring by post index & (cap_wrs - 1) */
    size_t cap_wrs;
    uint64_t wr_head;          /* oldest posted, not completed (Python _wrs[0]) */
    uint64_t wr_unsent;        /* oldest with packets not yet sent (Python _unsent[0]) */
    uint64_t wr_tail;          /* next post index */
    uint64_t psn_assign, next_psn, snd_una;
    mrcn_tx *txs;              /* by psn & (cap_txs - 1), valid over [tx_base, next_psn) */
    size_t cap_txs;
    uint64_t tx_base;
    uint32_t *rtx;             /* min-heap of lost PSNs awaiting retransmit */
    size_t n_rtx, cap_rtx;
    int64_t gseq;
    int64_t inflight_bytes;
    int64_t wimm_inflight;
    int64_t last_ts_ns;
    mrcn_loss loss;
    mrcn_probes probes;
    uint32_t *picks;           /* pick_many output, cfg->max_burst entries */
    uint32_t *touched;         /* records whose acked_seq moved (insertion order), */
    bool *touched_flag;        /*   per record; both cap_info entries (at INIT) */
    uint32_t *targets;         /* probe targets snapshot, cap_info entries */
    uint32_t *acked;           /* PSNs newly acknowledged by one SACK/NACK */
    size_t cap_acked;
    uint64_t tx_packets, tx_bytes, rtx_packets, rtx_bytes, lost_packets, acked_bytes;
    uint64_t ev_skips_ecn, ev_skips_trim, ev_skips_trim_lasthop, nacks_no_buffer;
};

/* Requester.__init__; ``wr_base``: the first post index (the QP keeps indices across RST).
 * MRCN_ENOMEM (then mrcn_req_free is still safe). */
int mrcn_req_init(mrcn_req *r, uint32_t qpn, const mrcn_qp_config *cfg, mrcn_cc *cc,
                   mrcn_rtt *rtt, mrcn_events *events, mrcn_req_error_fn on_error,
                   void *on_error_ctx, uint64_t wr_base);
void mrcn_req_free(mrcn_req *r);
/* Setting Requester.evs (at INIT): MRCN_ENOMEM. */
int mrcn_req_set_evs(mrcn_req *r, mrcn_ev_set *evs);
/* Requester.post: MRCN_EINVAL when the PSN space is exhausted (Python's ValueError). */
int mrcn_req_post(mrcn_req *r, uint64_t wr_id, const uint8_t *data, size_t len,
                  uint64_t remote_offset, bool has_imm, uint32_t imm);
/* Requester.send_data; ``limit`` < 0 is None. ``base``: out->count when the QP's
 * datagrams_to_send began (len(out) is counted from there). */
int mrcn_req_send_data(mrcn_req *r, double now, mrcn_txq *out, size_t base, int64_t limit);
int mrcn_req_on_sack(mrcn_req *r, const mrcn_sack *s, double now);
int mrcn_req_on_nack(mrcn_req *r, const mrcn_nack *n, double now);
int mrcn_req_flush_writes(mrcn_req *r, double now);
/* int(now * 1e9) as Python computes it (truncation), clamped to an int64. */
int64_t mrcn_stamp_of(double now);
/* Requester._stamp: a unique, increasing send stamp (ns) from now (s). */
uint64_t mrcn_req_stamp(mrcn_req *r, double now);
/* The loss detector's callbacks (Requester._declare_lost, _go_back_n). */
int mrcn_req_declare_lost(mrcn_req *r, uint32_t psn, double now, mrcn_loss_cause cause);
int mrcn_req_go_back_n(mrcn_req *r, uint64_t from_psn, double now, mrcn_loss_cause cause);
/* outstanding.get(psn): the transmission, or NULL. */
mrcn_tx *mrcn_req_outstanding(mrcn_req *r, uint64_t psn);
/* The _Tx of ``psn`` as a queue entry sees it (present or acknowledged), or NULL when it
 * is below the table (acknowledged long ago: ev_seq -1). */
mrcn_tx *mrcn_req_tx(mrcn_req *r, uint64_t psn);
/* Drain the EV set's reported events into the QP's queue (after every EV-set call). */
int mrcn_req_drain_ev(mrcn_req *r);
static inline mrcn_wr *mrcn_req_wr(mrcn_req *r, uint64_t index)
{
    return &r->wrs[index & (r->cap_wrs - 1)];
}
static inline bool mrcn_req_idle(const mrcn_req *r)
{
    return r->wr_head == r->wr_tail;
}

#endif
