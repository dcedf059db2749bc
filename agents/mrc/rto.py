"""Retransmission timeout: RFC 6298 estimator with the mrc.h timeout mapping as its least margin.

Sources:

* RFC 6298 ("Computing TCP's Retransmission Timer") section 2: on the first
  RTT sample R, ``SRTT = R``, ``RTTVAR = R / 2``; on each later sample R',
  ``RTTVAR = (1 - beta) * RTTVAR + beta * |SRTT - R'|`` then
  ``SRTT = (1 - alpha) * SRTT + alpha * R'`` with alpha = 1/8, beta = 1/4;
  ``RTO = SRTT + max(G, K * RTTVAR)`` with K = 4. Rule 2.4 puts a floor
  under RTO (1 s in TCP). Here the QP's mrc.h mapping,
  ``max(time_scale * 1.024 us * 2**timeout, min_rto_s)`` (the "floor"), is
  the least margin above SRTT, as Linux applies ``tcp_rto_min``
  (``net/ipv4/tcp_input.c``: ``tcp_rtt_estimator`` never lets the RTTVAR
  term drop below ``tcp_rto_min``, and ``tcp_set_rto`` adds it to SRTT):
  ``RTO = SRTT + max(floor, K * RTTVAR)``, so the adaptive value can only
  lengthen the configured timeout, never shorten it. Rule 2.5's optional
  ceiling is :data:`MAX_RTO_S` (RFC 6298: at least 60 s). Why a margin and
  not RFC 6298's absolute floor: with samples on every SACK, RTTVAR decays to
  a few percent of SRTT on a steady queue, and the absolute floor then sat
  within one packet time of SRTT. Measured on fat-tree-k4 (5 Mbit/s,
  baseline, mrc, no packet dropped anywhere): 14 timeouts, 5 EV
  retirements, all spurious, on ACK gaps of 68-100 ms with SRTT 55-61 ms,
  RTTVAR 1.6-12 ms and RTO 68-101 ms (a 9-packet window timed out at once
  68 ms after its last ACK).
* What is timed (RFC 6298 section 3: from sending a segment to the arrival
  of the ACK that covers it, delayed ACKs included): per SACK, the lowest
  newly acknowledged PSN, from its send time to the SACK's arrival, so SACK
  coalescing (``sack_every``, ``ack_delay_s``) is inside the sample, as the
  timer needs. The echoed timestamp (the latest arrival only, coalescing
  excluded) is the path-delay signal for congestion control instead.
  Karn's rule: a retransmitted PSN is never timed.
* Back-off (RFC 6298 rule 5.5, adapted to OCP MRC 1.0 mrc.h retry rules,
  ``retry.linear_cnt`` "Linear (fixed interval) retry limit", ``exp_cnt``
  "Exponential backoff retry limit"): per PSN, the first transmission and the
  first ``linear_cnt`` retries are each timed by one RTO; retry
  ``linear_cnt + j`` (j = 1..``exp_cnt``) is timed by ``RTO * 2**j``, capped
  at :data:`MAX_RTO_S` (or the floor, if that is larger). With linear 3, exp
  2 a dead path sees sends at 0, 1, 2, 3, 4, 6 RTOs and ERR at 10. Only
  timeouts move a PSN up this ladder; the limit also counts retries spent on
  loss evidence (:data:`agents.mrc.loss.RETRY_SPENT`).

Samples arrive once per SACK (several per RTT): RFC 6298 requires at least
one per RTT and allows more; the constants are used unscaled. Timer restart
(rule 5.3) is the requester's, per EV: see
``agents.mrc.requester.Requester.on_timer``.
"""
from __future__ import annotations

ALPHA = 1 / 8
"""RFC 6298 section 2.3: SRTT gain."""
BETA = 1 / 4
"""RFC 6298 section 2.3: RTTVAR gain."""
K = 4
"""RFC 6298 section 2.3: RTO = SRTT + K * RTTVAR."""
INITIAL_RTO_S = 1.0
"""RFC 6298 rule 2.1: RTO before the first RTT measurement, s."""
MAX_RTO_S = 60.0
"""RFC 6298 rule 2.5: an upper bound on RTO may be placed, at least 60 s."""


def mrc_timeout_s(timeout: int, time_scale: float = 1.0, min_rto_s: float = 0.0) -> float:
    """The mrc.h local ACK timeout in seconds: max(time_scale * 1.024e-6 * 2**timeout, min_rto_s).

    OCP MRC 1.0, mrc.h: ``timeout`` exponent, 1.024 us * 2**timeout (0..24).
    """
    return max(time_scale * 1.024e-6 * (1 << timeout), min_rto_s)


class RttEstimator:
    """RFC 6298 SRTT/RTTVAR/RTO in seconds, with ``floor_s`` (the mrc.h mapping) the least margin
    above SRTT (module docstring).

    ``rto_s`` is ``max(floor_s, initial_s)`` until the first sample: RFC 6298 rule 2.1
    sets 1 s there, so a timer armed before any RTT is known does not fire on packets
    that are merely queued behind a start-up burst (``initial_s`` 0: the floor, as the
    in-process simulator uses). Raises ValueError for a negative floor or initial value.
    """

    __slots__ = ("floor_s", "initial_s", "rto_s", "rttvar_s", "samples", "srtt_s")

    def __init__(self, floor_s: float, initial_s: float = 0.0):
        if initial_s < 0:
            raise ValueError("the initial RTO must be >= 0 s")
        self.srtt_s: float | None = None
        self.rttvar_s = 0.0
        self.samples = 0
        self.floor_s = 0.0
        self.initial_s = initial_s
        self.rto_s = 0.0
        self.set_floor(floor_s)

    def set_floor(self, floor_s: float) -> None:
        """Change the floor (a new mrc.h ``timeout``) and recompute ``rto_s``."""
        if floor_s < 0:
            raise ValueError("the RTO floor must be >= 0 s")
        self.floor_s = floor_s
        self._update()

    def sample(self, rtt_s: float) -> None:
        """Feed one RTT measurement (seconds, >= 0); recomputes ``rto_s``."""
        srtt = self.srtt_s
        if srtt is None:
            self.srtt_s = rtt_s
            self.rttvar_s = rtt_s / 2
        else:
            self.rttvar_s = (1 - BETA) * self.rttvar_s + BETA * abs(srtt - rtt_s)
            self.srtt_s = (1 - ALPHA) * srtt + ALPHA * rtt_s
        self.samples += 1
        self._update()

    def _update(self) -> None:
        srtt = self.srtt_s
        rto = max(self.floor_s, self.initial_s) if srtt is None else \
            srtt + max(K * self.rttvar_s, self.floor_s)
        self.rto_s = min(rto, max(MAX_RTO_S, self.floor_s))

    def backoff_s(self, timeouts: int, linear_cnt: int) -> float:
        """Timer for a PSN that has timed out ``timeouts`` times already (mrc.h retry ladder).

        ``timeouts`` is the retry number of the transmission being timed (0: the first
        transmission). ``timeouts <= linear_cnt``: one RTO (the linear retries); after
        that ``RTO * 2**(timeouts - linear_cnt)``; capped as described in the module
        docstring.
        """
        rto = self.rto_s
        if timeouts <= linear_cnt:
            return rto
        return min(rto * (1 << min(timeouts - linear_cnt, 30)), max(MAX_RTO_S, rto))
