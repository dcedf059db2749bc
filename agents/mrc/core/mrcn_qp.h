/* The MRC queue pair: the twin of agents/mrc/qp.py (QP), whose module docstring documents the
 * driving loop, the states (RST -> INIT -> RTR -> RTS, any -> ERR, any -> RST) and the
 * attributes each step takes. The QP owns its requester (mrcn_requester.h) and responder
 * (mrcn_responder.h), the congestion controller, the RTT estimator, the PCG32 of the EV
 * rotation and the EV set, and ONE event queue that both halves and the EV set feed in the
 * order things happen (as the Python QP's shared deque).
 *
 * Times are double seconds on the caller's clock; functions return 0 (or a count/flag as
 * documented) or a negative MRCN_E* code, never abort, keep no global state. A caller of
 * mrcn_qp_receive / _receive_batch / _handle_timer / _datagrams_to_send drains events with
 * mrcn_qp_next_event(). Writes are referenced, not copied (see mrcn_qp_post_write). */
#ifndef MRCN_QP_H
#define MRCN_QP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mrcn.h"
#include "mrcn_cc.h"
#include "mrcn_ev.h"
#include "mrcn_requester.h"
#include "mrcn_responder.h"
#include "mrcn_rng.h"
#include "mrcn_rtt.h"
#include "mrcn_txq.h"

/* types.QPState. */
enum mrcn_qp_state {
    MRCN_QPS_RST = 0,
    MRCN_QPS_INIT = 1,
    MRCN_QPS_RTR = 2,
    MRCN_QPS_RTS = 3,
    MRCN_QPS_ERR = 4,
};

/* EV records an EV set holds beyond its EVs (REPLACE_EV adds one per new EV id). */
#define MRCN_QP_EV_SPARE 256u

typedef struct mrcn_qp {
    uint32_t qpn;
    int state;                     /* enum mrcn_qp_state */
    mrcn_qp_config cfg;
    mrcn_cc cc;                    /* stays across RST, as the Python QP's controller */
    int paced;                     /* the controller paces (DCQCN): _send_paced */
    mrcn_rng rng;                  /* the EV rotation's PCG32 */
    mrcn_qp_attr attr;
    uint32_t dest_qpn;
    mrcn_ev_set *evs;              /* NULL before INIT (Python None) */
    mrcn_events events;
    uint64_t bad_packets;          /* the QP's own (Python _bad_packets) */
    mrcn_rtt rtt;
    mrcn_req req;
    mrcn_responder resp;
    uint8_t *mem;                  /* the registered region (caller-owned) */
    size_t mem_len;
    int has_mem;
    int has_cnp;                   /* cnp_interval_s > 0: a CnpPacer */
    mrcn_cnp_pacer cnp;
    mrcn_ctrl *cnp_out;            /* CNPs queued for datagrams_to_send */
    size_t n_cnp_out, cap_cnp_out;
    int has_pace_at;
    double pace_at;                /* s: when the paced controller lets the next packet go */
    uint64_t cnp_received;
} mrcn_qp;

/* QP(qpn, rng=..., memory=..., config=...): ``cfg`` (validated by the caller as
 * QPConfig.validate does; MRCN_EINVAL for payload_bytes or max_burst 0), ``cc`` an
 * initialised controller (copied), the PCG32 state and increment (Pcg32.state/inc),
 * ``mem``/``mem_len`` the region the peer writes into (``has_mem`` 0: none). */
int mrcn_qp_create(mrcn_qp **out, uint32_t qpn, const mrcn_qp_config *cfg, const mrcn_cc *cc,
                   uint64_t rng_state, uint64_t rng_inc, uint8_t *mem, size_t mem_len,
                   int has_mem);
/* Frees everything; the writes it referenced are released (the caller frees them). */
void mrcn_qp_destroy(mrcn_qp *qp);

/* ---- state machine (QP.modify_qp's steps; the binding checks the attribute names) ---- */
/* 1 if (from, to) is in qp.TRANSITIONS or ``to`` is ERR or RST, else 0. */
int mrcn_qp_transition_ok(int from, int to);
/* RST -> INIT's EV set: ``evs`` (count >= 1, distinct; already cut to one for RC),
 * ``ev_min_active`` (<= count), ``event_mask``. MRCN_ESTATE unless in RST, MRCN_EINVAL as
 * EVSet's ValueErrors, MRCN_ENOMEM. The state does not change (mrcn_qp_set_attr does). */
int mrcn_qp_init_evs(mrcn_qp *qp, const uint32_t *evs, uint32_t count, uint32_t ev_min_active,
                     uint32_t event_mask);
/* The responder's reverse EVs (already cut to one for RC). MRCN_ENOMEM. */
int mrcn_qp_set_reverse_evs(mrcn_qp *qp, const uint32_t *evs, size_t count);
/* INIT -> RTR's peer QPN (QP, requester and responder). */
void mrcn_qp_set_dest_qpn(mrcn_qp *qp, uint32_t dest_qpn);
/* ibv_qp_attr's rq_psn (INIT -> RTR: the first PSN the responder expects) and sq_psn
 * (RTR -> RTS: the first PSN the requester sends), as QP.modify_qp's. MRCN_EINVAL for a PSN
 * above MRCN_MAX_PSN, or once something was received / posted. */
int mrcn_qp_set_rq_psn(mrcn_qp *qp, uint32_t psn);
int mrcn_qp_set_sq_psn(mrcn_qp *qp, uint32_t psn);
/* The end of every modify_qp step: the new attributes (validated by the caller), then the
 * RTO floor and the state. MRCN_EINVAL for an illegal transition or mpr_dest > 255. */
int mrcn_qp_set_attr(mrcn_qp *qp, int to, const mrcn_qp_attr *attr);
/* QP._enter_error (modify_qp(ERR) with reason "moved to ERR by the application"). */
int mrcn_qp_enter_error(mrcn_qp *qp, double now, const char *reason);
/* Hand the EV set to the caller (it then owns it; the QP has none): the binding keeps a
 * reset QP's old set alive in its view, as a Python EVSet outlives its QP's reset. */
mrcn_ev_set *mrcn_qp_detach_evs(mrcn_qp *qp);
/* Move the events ``set`` reported into the QP's queue (the QP's set or a detached one). */
int mrcn_qp_drain_ev_set(mrcn_qp *qp, mrcn_ev_set *set);
/* QP._reset (modify_qp(RST)): fresh halves and estimator, events dropped, writes released. */
int mrcn_qp_reset(mrcn_qp *qp);

/* ---- API -------------------------------------------------------------------------------- */
/* QP.post_write: ``data`` is referenced until the write's completion, a flush, a reset or
 * destroy: mrcn_qp_writes_released() tells which. MRCN_ESTATE unless RTS, MRCN_EINVAL when
 * the PSN space is exhausted. *index (may be NULL) gets the write's post index. */
int mrcn_qp_post_write(mrcn_qp *qp, uint64_t wr_id, const uint8_t *data, size_t len,
                       uint64_t remote_offset, bool has_imm, uint32_t imm, uint64_t *index);
/* Every write with a post index below this is no longer referenced by the QP. */
uint64_t mrcn_qp_writes_released(const mrcn_qp *qp);
/* QP.post_recv: MRCN_ESTATE in RST or ERR. */
int mrcn_qp_post_recv(mrcn_qp *qp, uint64_t wr_id);

/* QP.receive_datagram (``ecn``: the IP header carried CE). Malformed datagrams are counted
 * in bad_packets and dropped (0). */
int mrcn_qp_receive(mrcn_qp *qp, const uint8_t *data, size_t len, double now, int ecn);
/* QP.receive_datagrams: the same result as n calls of mrcn_qp_receive. */
int mrcn_qp_receive_batch(mrcn_qp *qp, const uint8_t *const *data, const size_t *lens,
                          const uint8_t *ce /* NULL or one per datagram */, size_t n,
                          double now);
/* QP.handle_timer. */
int mrcn_qp_handle_timer(mrcn_qp *qp, double now);
/* QP.get_timer: 1 and *deadline (s), or 0 for None. Logically const: it drops only stale
 * timer entries, as the Python deadline() does. */
int mrcn_qp_get_timer(const mrcn_qp *qp, double *deadline);
/* QP.datagrams_to_send: appends to ``out`` the same datagrams, in the same order, as the
 * Python list. */
int mrcn_qp_datagrams_to_send(mrcn_qp *qp, double now, mrcn_txq *out);
/* QP.next_event: 1 and *event, or 0. */
int mrcn_qp_next_event(mrcn_qp *qp, mrcn_event *event);
size_t mrcn_qp_events_pending(const mrcn_qp *qp);
/* QP.set_ev_state / QP.replace_ev (controller calls): MRCN_ESTATE before INIT, else the EV
 * set's codes (MRCN_EINVAL unknown EV or state, MRCN_ENOSPC no record left). */
int mrcn_qp_set_ev_state(mrcn_qp *qp, uint32_t ev, mrcn_ev_state state, double now);
int mrcn_qp_replace_ev(mrcn_qp *qp, uint32_t cur, uint32_t new_ev, mrcn_ev_state state,
                       double now);
/* QP.expire_skips on the EV set with its events queued (EVSet.expire_skips). */
int mrcn_qp_expire_skips(mrcn_qp *qp, double now);

uint32_t mrcn_qp_num(const mrcn_qp *qp);
uint32_t mrcn_qp_max_burst(const mrcn_qp *qp);
/* QP.bad_packets: the QP's plus both halves'. */
uint64_t mrcn_qp_bad_packets(const mrcn_qp *qp);
/* QP.probe_timeout_s, s. */
double mrcn_qp_probe_timeout_s(const mrcn_qp *qp);

#endif
