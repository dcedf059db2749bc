"""MRC transport (OCP MRC 1.0), sans-I/O: queue pairs, EVs, SACK, congestion control.

Stable public surface (everything else is internal):

Create a connected pair (both ends in one process, e.g. tests or the sim)::

    import random
    from agents.mrc import QP, QPAttr, QPConfig, connect_pair
    a = QP(1, rng=random.Random(seed), config=QPConfig())
    b = QP(2, rng=random.Random(seed + 1), memory=bytearray(size), config=QPConfig())
    connect_pair(a, b, evs=[0, 1, 2, 3], attr=QPAttr(timeout=12))

Across hosts each side does the same steps itself, with the peer's QPN learnt
out of band: ``qp.modify_qp(QPState.INIT, evs=[...], ev_min_active=k)``,
``qp.modify_qp(QPState.RTR, dest_qpn=peer_qpn, mpr_dest=8, max_wimm_dest=128)``,
``qp.modify_qp(QPState.RTS, mpr=8, max_wimm=128, timeout=12,
retry_linear_cnt=7, retry_exp_cnt=7)``.

Post writes and read completions::

    qp.post_write(wr_id=7, local=buf, remote_offset=0)            # RDMA WRITE
    qp.post_write(wr_id=8, local=buf, remote_offset=0, imm=123)   # WRITE_WITH_IMM
    ev = qp.next_event()   # WorkCompletion | EVEvent | QPError | None

Requester completions have ``opcode=WCOpcode.RDMA_WRITE`` and the ``wr_id``;
the responder gets ``WCOpcode.RECV_RDMA_WITH_IMM`` with ``imm``, in send order, each
taking a receive posted up front with ``qp.post_recv(wr_id)`` (mrc_post_recv; none
posted: the write is NACKed NO_PKT_BUFFER and retried).

Drive it (``agents.net.udp.Endpoint`` does this over UDP; ``agents.mrc.sim`` on a
fake clock): ``receive_datagram(data, now)`` (or ``receive_datagrams(batch, now)``:
the same result, in-order data placed on a fast path), ``handle_timer(now)`` when
``now >= get_timer()``, and send every ``(bytes, ev)`` of
``datagrams_to_send(now)``.

Structure: a :class:`QP` owns a :class:`agents.mrc.requester.Requester` (``qp.requester``:
packetising, spraying, loss detection, retransmission, probes) and a
:class:`agents.mrc.responder.Responder` (``qp.responder``: placement, PSN tracking, SACKs),
each with explicit inputs and outputs; the QP keeps the state machine and what both
share. Live counters are the halves' (``qp.requester.acked_bytes``,
``qp.responder.rx_bytes``, ...).

Metrics: ``qp.stats()`` returns a JSON-ready dict: ``state``, ``tx_packets``,
``tx_bytes``, ``retransmissions``, ``retransmitted_bytes``, ``timeouts``, ``loss_retries``
(retries spent on NACKs and inferred losses, :data:`agents.mrc.loss.RETRY_SPENT`), ``lost_packets``,
``acked_bytes``, ``inflight_bytes``, ``cwnd_bytes``, ``srtt_s``, ``cnp_sent``,
``cnp_received`` (DCQCN's CNPs, :mod:`agents.mrc.dcqcn`), responder
counters (``rx_packets``, ``rx_bytes``, ``rx_duplicates``, ``rx_ooo``,
``rx_cum_psn``) and ``evs``: per EV ``{state, packets_sent, bytes_sent,
packets_acked, packets_lost, retransmits, rtt_last_s, rtt_min_s,
rtt_samples, probes_sent, probes_ok, losses_excused, losses_chargeable, skips}``
(``losses_chargeable``: the losses of a cause the QP may charge to the EV, timeouts and
inferred ones, not trims or NACKs), ``ev_skips`` ({ecn, trim, trim_lasthop}), ``cc``
(the controller's name and counters).
Changes of an EV's visible state into ``QPConfig.ev_event_mask`` (GOOD, ASSUMED_BAD;
SKIP is internal) arrive as :class:`EVEvent` (time, qpn, ev, old, new, cause,
drop_count) through ``next_event()``; the controller calls are
``qp.set_ev_state(ev, EVState.DENIED | EVState.GOOD, now)`` and ``qp.replace_ev(cur,
new, now)``, or through an EV profile (:mod:`agents.mrc.profiles`).

RC baseline: ``QPConfig(transport=Transport.RC)``; only the first EV of the
profile is used (pinned path), go-back-N, same timeout/retry rules. RoCE's DCQCN:
``QPConfig(transport=Transport.RC, cc="dcqcn", cc_params={"rate_bps": ..., "base_rtt_s": ...},
cnp_interval_s=...)`` on both ends (:mod:`agents.mrc.dcqcn`).
"""
from .cc import NSCC, CongestionControl, FixedWindow, available as cc_available, \
    create as cc_create, register as cc_register
from .ev import EVCause, EVEvent, EVState, EVStateError
from .packet import DEFAULT_PAYLOAD_BYTES, ProtocolError, payload_bytes_for_mtu, peek_dest_qpn
from .qp import QP, bring_up, connect_pair
from .types import (QPAttr, QPConfig, QPError, QPState, QPStateError, Transport, WCOpcode,
                    WCStatus, WorkCompletion)

__all__ = [
    "QP", "bring_up", "connect_pair", "QPAttr", "QPConfig", "QPState", "QPStateError", "QPError",
    "Transport", "WCOpcode", "WCStatus", "WorkCompletion", "EVEvent", "EVState", "EVCause",
    "EVStateError", "ProtocolError", "DEFAULT_PAYLOAD_BYTES", "payload_bytes_for_mtu",
    "peek_dest_qpn", "CongestionControl", "NSCC", "FixedWindow", "cc_create", "cc_register",
    "cc_available",
]
