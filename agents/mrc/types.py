"""Shared QP types: states, attributes (mrc.h), emulation config, completions and errors."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .ev import EV_SELECT
from .packet import DEFAULT_PAYLOAD_BYTES

EV_EVENT_MASK_DEFAULT = 0b11
"""mrc_ctl.h ``ev_event_mask``: GOOD (1 << 0) | ASSUMED_BAD (1 << 1), the only reportable states."""

RETRY_EXP_INFINITE = 25
"""OCP MRC 1.0, mrc.h: ``retry.exp_cnt`` 25 = infinite."""

MAX_ACK_DELAY_RTO_FRACTION = 0.25
"""``ack_delay_s`` may be at most this fraction of the RTO floor.

A SACK held back by the responder is indistinguishable, at the requester,
from a lost packet: the tail of a write (fewer than ``sack_every`` packets)
waits the full ``ack_delay_s``. With the delay above the floor (0.5 ms vs
timeout 8 = 262 us) the simulator retired 7 of 8 healthy EVs at the tail of a
fault-free 32 MB write (issue 11). TCP keeps the same order: delayed ACKs
within 500 ms (RFC 5681 section 4.2) under an RTO of at least 1 s (RFC 6298
rule 2.4), ratio 1/2; QUIC adds ``max_ack_delay`` (25 ms) to its probe
timeout instead (RFC 9002 section 6.2.1). 1/4 leaves SRTT up to 3/4 of the
floor before a tail SACK can race the timer.
"""


class QPState(enum.Enum):
    RST = "RST"
    INIT = "INIT"
    RTR = "RTR"
    RTS = "RTS"
    ERR = "ERR"


class QPStateError(RuntimeError):
    """A call the QP's current state does not allow (misuse, not a peer fault)."""


class Transport(enum.Enum):
    MRC = "mrc"   # multipath, selective retransmit
    RC = "rc"     # RoCEv2-like RC baseline: one EV, go-back-N


class WCStatus(enum.Enum):
    """Completion status, as ``enum ibv_wc_status``."""

    SUCCESS = "SUCCESS"
    RETRY_EXC_ERR = "RETRY_EXC_ERR"
    WR_FLUSH_ERR = "WR_FLUSH_ERR"


class WCOpcode(enum.Enum):
    RDMA_WRITE = "RDMA_WRITE"                  # requester side
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"  # responder side


@dataclass(frozen=True, slots=True)
class WorkCompletion:
    """One completion (like ``struct ibv_wc``); ``time`` in seconds.

    Requester: ``wr_id`` of the posted write, ``byte_len`` its size.
    Responder (WRITE_WITH_IMM only): ``wr_id`` of the posted receive it consumed
    (``QP.post_recv``), ``imm`` the immediate, ``psn`` the PSN of the message's last
    packet; WR_FLUSH_ERR for receives still posted when the QP enters ERR.
    """

    time: float
    qpn: int
    opcode: WCOpcode
    status: WCStatus
    wr_id: int | None = None
    byte_len: int = 0
    imm: int | None = None
    psn: int | None = None


@dataclass(frozen=True, slots=True)
class QPError:
    """The QP entered ERR (the "job crash"): ``reason`` says why."""

    time: float
    qpn: int
    reason: str


@dataclass(frozen=True, slots=True)
class QPAttr:
    """QP attributes of OCP MRC 1.0 ``struct mrc_qp_attr`` (mrc.h).

    ``mpr``/``mpr_dest``: requester/responder PSN window in units of 128
    PSNs. ``max_wimm``/``max_wimm_dest``: outstanding WRITE_WITH_IMM limits.
    ``timeout``: local ACK timeout exponent, 1.024 us * 2**timeout, 0..24.
    ``retry_linear_cnt`` (0..7) fixed-interval retries, then
    ``retry_exp_cnt`` (0..25, 25 = infinite) exponential back-off retries.
    """

    mpr: int = 8
    mpr_dest: int = 8
    max_wimm: int = 128
    max_wimm_dest: int = 128
    timeout: int = 8
    retry_linear_cnt: int = 7
    retry_exp_cnt: int = 7

    def validate(self) -> None:
        """Raise ValueError for a value outside mrc.h's ranges."""
        checks = [("mpr", self.mpr, 1, 255), ("mpr_dest", self.mpr_dest, 1, 255),
                  ("max_wimm", self.max_wimm, 1, 65535),
                  ("max_wimm_dest", self.max_wimm_dest, 1, 65535),
                  ("timeout", self.timeout, 0, 24),
                  ("retry_linear_cnt", self.retry_linear_cnt, 0, 7),
                  ("retry_exp_cnt", self.retry_exp_cnt, 0, RETRY_EXP_INFINITE)]
        for name, value, lo, hi in checks:
            if not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name}={value!r} outside [{lo}, {hi}] (mrc.h)")


@dataclass(frozen=True)
class QPConfig:
    """Emulation parameters that mrc.h leaves to the NIC.

    Timeout mapping: ``rto_s = max(time_scale * 1.024e-6 * 2**timeout,
    min_rto_s)``. The OCP value (timeout 8 = 262 us) is far below what a
    Python agent can time: its event loop wakes with ~0.1-1 ms granularity
    and the scheduler on a shared 2-core host adds milliseconds of jitter,
    while an emulated fabric RTT is itself ~0.1-1 ms. ``time_scale`` stretches
    the whole retry ladder (linear then exponential) uniformly; ``min_rto_s``
    is a floor so that a small exponent cannot cause spurious timeouts. In
    the deterministic simulator the fake clock is exact, so tests may use
    ``time_scale=1`` and ``min_rto_s=0``.

    Other fields: ``payload_bytes`` per data packet (default fits a 1500-byte
    MTU), ``sack_every`` (coalesce one SACK per N data packets),
    ``ack_delay_s`` (max SACK delay; at most :data:`MAX_ACK_DELAY_RTO_FRACTION`
    of the RTO floor, checked by :meth:`validate` against ``min_rto_s`` and
    by :meth:`check_ack_delay` against the floor of the QP ``timeout``),
    ``ack_coalesce_s`` (the longer SACK hold used while data packets arrive at most
    that far apart, adaptive coalescing: see :mod:`agents.mrc.responder`; 0: off;
    bounded as ``ack_delay_s`` is),
    ``reorder_threshold`` (a packet is lost when this many later packets on
    the same EV were acked), loss inference across EVs (``ooo_threshold``
    packets sent later on any EV acknowledged, and ``ooo_time_frac``, the
    time guard; see :mod:`agents.mrc.requester`), ``ev_loss_run`` (losses
    in a row on one EV, none of its later packets delivered, before it is
    ASSUMED_BAD), ``loss_inference`` (default True; False turns off fast loss inference: no
    loss is declared from SACK reordering, neither by the per-EV ``reorder_threshold`` rule,
    LossCause.EV_THRESHOLD, nor by the cross-EV out-of-order rule, LossCause.OOO, so a
    dropped packet is found only by an explicit NACK, trimmed or not, or by its RTO; the EV
    state machine is unchanged, so an EV on a dead path is retired from charged timeouts
    alone: the control that shows what detection costs without inference), probe
    parameters (``probe_interval_s``, ``probe_timeout_s`` — mrc_ctl example
    2 ms, a floor: the effective timeout is ``max(probe_timeout_s, RTO)``,
    see ``QP.probe_timeout_s`` — and ``probe_successes`` k), ``ev_min_active``, ``skip_timeout_s``
    (the SKIP bound before the first RTT sample; after it one SRTT, see :mod:`agents.mrc.ev`),
    ``always_skip_ce_run`` (CE-marked arrivals in a row on one EV before the responder's
    SACK says ALWAYS_SKIP, see :mod:`agents.mrc.responder`), ``ev_event_mask`` (EV states
    whose changes are reported as EVEvents: GOOD and/or ASSUMED_BAD bits, mrc_ctl.h),
    congestion control name and parameters (default ``"uet-1.0-nscc"`` with
    no parameters: base RTT learnt, 10-packet initial window, see
    :class:`agents.mrc.cc.NSCC`; ``"fixed"`` is the unbounded window),
    ``max_burst`` datagrams per ``datagrams_to_send`` call, ``initial_rto_s``
    (the RTO before the first RTT sample when above the floor: RFC 6298 rule 2.1's 1 s;
    0 keeps the floor, as the simulator's tests do), ``cnp_interval_s`` (DCQCN's notification
    point: the responder answers CE-marked data with a RoCEv2 CNP, at most one per this many
    seconds per QP; 0, the default, sends none. Set it on both ends of a ``"dcqcn"`` QP
    pair, :func:`agents.mrc.dcqcn.scaled_cnp_interval_s`; other controllers ignore CNPs),
    ``ev_select`` (how the requester picks an EV, :data:`agents.mrc.ev.EV_SELECT`: ``"rotation"``,
    the spec's randomised rotation with SKIP, the default; ``"reps"``, a non-spec variant after
    uet-htsim's REPS load balancer, see :mod:`agents.mrc.ev`; MRC only).

    RTO: the mapping above is the floor of an RFC 6298 estimator
    (``SRTT + 4 * RTTVAR``), see :mod:`agents.mrc.rto`.
    """

    transport: Transport = Transport.MRC
    payload_bytes: int = DEFAULT_PAYLOAD_BYTES
    time_scale: float = 1.0
    min_rto_s: float = 0.010
    initial_rto_s: float = 0.0
    sack_every: int = 8
    ack_delay_s: float = 0.0005
    ack_coalesce_s: float = 0.0
    reorder_threshold: int = 3
    ooo_threshold: int = 5
    ooo_time_frac: float = 0.25
    ev_loss_run: int = 2
    loss_inference: bool = True
    probe_interval_s: float = 0.005
    probe_timeout_s: float = 0.002
    probe_successes: int = 3
    ev_min_active: int = 1
    skip_timeout_s: float = 0.001
    always_skip_ce_run: int = 8
    ev_event_mask: int = EV_EVENT_MASK_DEFAULT
    cc: str = "uet-1.0-nscc"
    cc_params: dict = field(default_factory=dict)
    max_burst: int = 256
    cnp_interval_s: float = 0.0
    ev_select: str = "rotation"

    def validate(self) -> None:
        if self.payload_bytes <= 0 or self.sack_every < 1 or self.reorder_threshold < 1:
            raise ValueError("payload_bytes, sack_every and reorder_threshold must be >= 1")
        if self.time_scale <= 0 or self.min_rto_s < 0 or self.ack_delay_s < 0 or self.initial_rto_s < 0 \
                or self.ack_coalesce_s < 0:
            raise ValueError("time_scale must be > 0; min_rto_s, initial_rto_s, ack_delay_s and ack_coalesce_s "
                             ">= 0")
        if self.probe_successes < 1 or self.probe_interval_s <= 0 or self.max_burst < 1:
            raise ValueError("probe_successes, probe_interval_s and max_burst must be positive")
        if self.ooo_threshold < 1 or self.ev_loss_run < 1 or self.ooo_time_frac < 0:
            raise ValueError("ooo_threshold and ev_loss_run must be >= 1, ooo_time_frac >= 0")
        if not isinstance(self.loss_inference, bool):
            raise ValueError(f"loss_inference={self.loss_inference!r}: expected True or False")
        if self.cnp_interval_s < 0:
            raise ValueError("cnp_interval_s must be >= 0 (0: no CNPs)")
        if self.ev_select not in EV_SELECT:
            raise ValueError(f"ev_select={self.ev_select!r}: expected one of {', '.join(EV_SELECT)}")
        if self.always_skip_ce_run < 1 or self.skip_timeout_s < 0:
            raise ValueError("always_skip_ce_run must be >= 1 and skip_timeout_s >= 0")
        if not isinstance(self.ev_event_mask, int) or self.ev_event_mask & ~EV_EVENT_MASK_DEFAULT:
            raise ValueError(f"ev_event_mask={self.ev_event_mask!r}: only GOOD (1) and "
                             f"ASSUMED_BAD (2) may be reported (mrc_ctl.h)")
        if self.min_rto_s > 0:
            self.check_ack_delay(self.min_rto_s, "min_rto_s")

    def check_ack_delay(self, rto_floor_s: float, what: str = "the RTO floor") -> None:
        """Raise ValueError unless ``ack_delay_s`` and ``ack_coalesce_s`` are both at most
        MAX_ACK_DELAY_RTO_FRACTION * ``rto_floor_s``.

        ``rto_floor_s``: seconds, the floor the retransmission timer never goes
        below (``min_rto_s``, or the mrc.h mapping of the QP ``timeout``).
        """
        bound = MAX_ACK_DELAY_RTO_FRACTION * rto_floor_s
        for name, hold in (("ack_delay_s", self.ack_delay_s), ("ack_coalesce_s", self.ack_coalesce_s)):
            if hold > bound:
                raise ValueError(
                    f"{name}={hold * 1e6:.0f} us exceeds "
                    f"{MAX_ACK_DELAY_RTO_FRACTION:g} x {what} ({rto_floor_s * 1e6:.0f} us): a held "
                    f"SACK would look like a lost packet and retire healthy EVs; lower {name} "
                    f"to <= {bound * 1e6:.0f} us or raise the timeout")
