"""Pluggable congestion control for MRC QPs, default a simplified NSCC (UET 1.0).

The QP default (:class:`agents.mrc.types.QPConfig` ``cc``) is
``"uet-1.0-nscc"`` with no parameters: it learns the base RTT and starts
from a 10-packet window, so a caller need not know the link rate.
``"fixed"`` (a constant, by default unbounded, window) stays available.

Interface in the style of aioquic's ``quic/congestion/base.py``: a base class
with keyword-only callbacks and a registry by name (the name the OCP MRC CC
profile uses: ``mrc_ctl.h`` lists ``"uet-1.0-nscc"``). ``"dcqcn"`` (RoCEv2's rate-based
controller, paced, driven by CNPs) lives in :mod:`agents.mrc.dcqcn`.

Signals
-------
NSCC is driven by ECN marks and packet trimming as well as delay. ECN
reaches the controller when the job enables it (job spec ``qp.ecn``: the
agents send ECT(0), read CE per datagram and build NSCC with
``ecn_capable=True``, see :mod:`agents.net.udp` and :mod:`agents.channels.qp`)
and the fabric marks (issue 11's switch program); trimming when the fabric
trims. Both inputs: ``ecn=True`` on ``on_packets_acked`` (the SACK's
ECN-echo flag, set when the responder saw a CE mark) and ``trimmed=True`` on
``on_packets_lost`` (a TRIMMED NACK). With ``ecn_capable=False`` (the
default: no ECN on the fabric) a delay of at least ``delay_md_factor`` (2)
times the target is treated as the "ECN and delay >= target" case, so the
window still decreases multiplicatively on large delay; between 1x and 2x
the target it grows by the fair increase, as NSCC does without ECN. That
fallback is this emulation's, not NSCC's.

Where this simplifies UET NSCC
------------------------------
Sources: the UET 1.0 specification's congestion management (NSCC) as
summarised in "Ultra Ethernet Transport" (arXiv:2508.08906), SMaRTT-REPS
(arXiv:2404.01630, the research algorithm NSCC grew from) and the UEC
reference simulator (uet-htsim, ``htsim/sim/uec.cpp``,
``updateCwndOnAck_NSCC``). The four cases (ECN x delay vs target), the
multiplicative decrease ``max(1 - gamma (d - target) / d, 0.5)`` at most once
per base RTT, the NOOP on ECN with low delay, ``max_cwnd = 1.5 BDP``, a
base RTT that only goes down and quick-adapt on a trim are as there.
Simplified:

* per-ACK adjustment: every increase is applied to cwnd on the ACK that
  earns it. uet-htsim accumulates increases and applies ``cwnd += inc / cwnd``
  once per adjustment period (8 MTUs acknowledged or one RTT); decreases are
  immediate in both. Here the fair increase is divided by cwnd per ACK (the
  same fairness), the proportional increase is not;
* no eta: uet-htsim adds ``eta`` (0.15 MSS, scaled) to cwnd once per
  adjustment period whatever the case;
* no fast increase: uet-htsim adds ``0.25 * acked`` (scaled) at once after a
  full window of ACKs with near-zero queueing delay (< 1 us);
* no delay filter by default (``delay_filter="ack"``): the decrease uses this
  ACK's delay; uet-htsim's uses a slow EWMA of the delay (weight 1/80,
  high-delay samples without ECN discounted), and picks the case from the raw
  delay, as here. ``delay_filter="ewma"`` (scenario ``qp: {nscc_delay_filter:
  ewma}``) is uet-htsim's rule, :meth:`NSCC._filter_delay`;
* quick-adapt: checked once per base-RTT epoch, armed by a trim only (as
  uet-htsim's NACK; a timeout or an inferred loss shrinks the window by its
  bytes, as its ``mark_packet_for_retransmission``), with "less than half the
  window acked" as its test; uet-htsim also triggers it on a delay above 4x
  the target, gates it on ``achieved < maxwnd / 8`` and waits base RTT + target
  between checks;
* decrease rate: the UET paper describes the decrease per ACK; here, as in
  uet-htsim, it is rate-limited to once per base RTT.
"""
from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger(__name__)


class CongestionControl:
    """Base class: a per-QP window in bytes. Subclasses override the callbacks.

    ``mss_bytes``: payload bytes of a full data packet.
    """

    name = "base"

    def __init__(self, *, mss_bytes: int, **_ignored):
        if mss_bytes <= 0:
            raise ValueError("mss_bytes must be positive")
        self.mss_bytes = mss_bytes
        self.cwnd_bytes = float("inf")

    def can_send(self, *, inflight_bytes: int, size_bytes: int) -> bool:
        """Send while inflight + packet <= cwnd (always allow one packet when idle)."""
        return inflight_bytes == 0 or inflight_bytes + size_bytes <= self.cwnd_bytes

    def on_packet_sent(self, *, now: float, size_bytes: int) -> None:
        pass

    def on_packets_acked(self, *, now: float, acked_bytes: int, rtt_s: float | None,
                         ecn: bool = False) -> None:
        pass

    def on_packets_lost(self, *, now: float, lost_bytes: int, trimmed: bool = False) -> None:
        pass

    def on_cnp(self, *, now: float) -> None:
        """A RoCEv2 CNP arrived (the responder saw CE marks: :mod:`agents.mrc.dcqcn`)."""

    def set_app_limited(self, limited: bool) -> None:
        """The requester ran out of new data to send (True) or was posted more (False)."""

    def next_send_time(self, *, now: float, size_bytes: int) -> float:
        """Earliest time (s) a packet of ``size_bytes`` may be sent; a window controller
        returns ``now``. The QP paces only when a subclass overrides this (no cost
        otherwise) and then wakes at the returned time (:meth:`agents.mrc.qp.QP.get_timer`)."""
        return now


class FixedWindow(CongestionControl):
    """A constant window (``window_bytes``; infinite by default): no congestion control."""

    name = "fixed"

    def __init__(self, *, mss_bytes: int, window_bytes: float = float("inf"), **_ignored):
        super().__init__(mss_bytes=mss_bytes)
        self.cwnd_bytes = window_bytes


DELAY_FILTERS = ("ack", "ewma")
"""NSCC's ``delay_filter`` values: ``"ack"`` (the decrease uses the marked ACK's own delay, this
emulation's simplification and the default) or ``"ewma"`` (uet-htsim's filtered delay)."""
DELAY_EWMA_WEIGHT = 0.0125
"""The filtered delay's weight per sample: uet-htsim's ``UecSrc::_delay_alpha`` (``htsim/sim/uec.cpp``;
its weight for samples above 5 base RTTs is the same 0.0125)."""


class NSCC(CongestionControl):
    """Simplified NSCC (UET 1.0), defaults from the UEC packet simulator (docs/mrc-spec.md, "Congestion control: NSCC").

    Window and delay, all in bytes and seconds:

    * base RTT: ``base_rtt_s`` if given (the fabric's configured base RTT, as
      a NIC's CC profile carries it: fixed); otherwise learnt as the minimum
      RTT sample seen so far (it only goes down). Measured on the emulated
      fabric: learning lowered BDP to the idle-path RTT and capped a 50 Mbit/s
      WRITE at 23 Mbit/s; configured 2 ms gave 46 Mbit/s;
    * BDP = ``rate_bps`` * base RTT / 8 and ``max_cwnd = 1.5 BDP`` when the
      link rate is known; without ``rate_bps`` there is no BDP and
      ``max_cwnd`` is ``max_cwnd_bytes`` (default unbounded: the delay
      signal and the QP's MPR window bound the window instead);
    * start: at ``max_cwnd`` when both ``rate_bps`` and ``base_rtt_s`` are
      given (NSCC's start at line rate); otherwise at
      ``initial_window_bytes`` (default 10 packets, RFC 6928's initial
      window of 10 segments);
    * target delay = max(``target_factor`` * base RTT, ``min_target_s``)
      (``target_factor`` default 1.0; no caller changes it). ``min_target_s``
      (default 0.5 ms) keeps timer jitter of a Python agent (~0.1-1 ms, see
      QPConfig) from reading as congestion on a path whose base RTT is tiny.

    On every ACK with ``d = rtt - base_rtt``:

    * no ECN, d < target: proportional increase
      ``cwnd += alpha * acked * (target - d) / target``;
    * no ECN, d >= target: fair increase ``cwnd += fi * mss * acked / cwnd``;
    * ECN (or, without ECN, d >= delay_md_factor * target), d >= target:
      multiplicative decrease at most once per base RTT,
      ``cwnd *= max(1 - gamma * (d - target) / d, 0.5)``, gamma 0.8;
    * ECN, d < target: no change (the QP skips that EV instead).

    ``delay_filter="ewma"``: the decrease uses uet-htsim's filtered delay instead of d
    (:meth:`_filter_delay`): ``cwnd *= max(1 - gamma * (avg - target) / avg, 0.5)``, and
    only while ``avg`` is above the target; a marked ACK above the target whose average is
    not is counted in ``md_filtered``. The case is still picked from this ACK's d.

    Loss or trim: ``cwnd -= lost bytes``; quick-adapt: at the end of an RTT
    epoch (one base RTT) in which a trim was seen, if less than half the
    window was acked, cwnd = bytes acked in that epoch. A loss found by a
    timeout or inferred from later deliveries does not arm it (uet-htsim:
    ``updateCwndOnNack_NSCC`` sets ``_trigger_qa``, ``mark_packet_for_retransmission``
    only shrinks the window): a random loss says nothing of the rate the path
    can carry, and on a 55 ms path a 0.1% loss per link quick-adapted ring QPs
    to 14-24% of their window. Not after an epoch
    in which the requester ran out of data (:meth:`set_app_limited`): what
    an application-limited sender got acked says nothing of the path (RFC
    7661's rule for windows, BBR's app-limited samples); ``qa_app_limited``
    counts the quick-adapts skipped so. A QP idle at a ring step that lost
    its tail to a plane failure was cut to one packet this way. cwnd stays within
    [mss, max_cwnd]. Raises ValueError for a non-positive rate, RTT or window.

    Counters: ``acks`` ACKs seen, ``ecn_count`` of them with an ECN echo, ``noop_count`` with an
    ECN echo and delay below target (no window change), ``md_count`` multiplicative
    decreases, ``qa_count`` quick-adapts, ``qa_app_limited`` quick-adapts skipped (:meth:`counters`);
    with ``delay_filter="ewma"`` also ``md_filtered`` and the filtered delay ``avg_delay_s`` (s).
    """

    name = "uet-1.0-nscc"

    def __init__(self, *, mss_bytes: int, rate_bps: float | None = None,
                 base_rtt_s: float | None = None, target_factor: float = 1.0,
                 alpha: float = 0.5, fi: float = 1.0, gamma: float = 0.8, md_floor: float = 0.5,
                 ecn_capable: bool = False, quick_adapt: bool = True,
                 delay_md_factor: float = 2.0, initial_window_bytes: float | None = None,
                 max_cwnd_bytes: float = float("inf"), min_target_s: float = 0.0005,
                 delay_filter: str = "ack", **_ignored):
        super().__init__(mss_bytes=mss_bytes)
        if delay_filter not in DELAY_FILTERS:
            raise ValueError(f"delay_filter={delay_filter!r}: expected one of {', '.join(DELAY_FILTERS)}")
        if (rate_bps is not None and rate_bps <= 0) or \
                (base_rtt_s is not None and base_rtt_s <= 0):
            raise ValueError("rate_bps and base_rtt_s must be positive")
        iw = 10.0 * mss_bytes if initial_window_bytes is None else float(initial_window_bytes)
        if iw <= 0 or max_cwnd_bytes <= 0 or min_target_s < 0:
            raise ValueError("initial_window_bytes and max_cwnd_bytes must be positive, "
                             "min_target_s >= 0")
        self.rate_bps = rate_bps
        self.target_factor = target_factor
        self.min_target_s = min_target_s
        self.max_cwnd_limit_bytes = max_cwnd_bytes
        self.min_cwnd_bytes = float(mss_bytes)
        self.base_rtt_s: float | None = None
        self.bdp_bytes: float | None = None
        self.max_cwnd_bytes = max(max_cwnd_bytes, 2.0 * mss_bytes)
        self.target_s = min_target_s
        self.base_rtt_fixed = base_rtt_s is not None
        if base_rtt_s is not None:
            self._set_base_rtt(base_rtt_s)
        self.cwnd_bytes = self.max_cwnd_bytes if self.bdp_bytes is not None else \
            min(max(iw, self.min_cwnd_bytes), self.max_cwnd_bytes)
        self.alpha, self.fi, self.gamma, self.md_floor = alpha, fi, gamma, md_floor
        self.ecn_capable = ecn_capable
        self.delay_md_factor = delay_md_factor
        self.quick_adapt = quick_adapt
        self.delay_filter = delay_filter
        self.avg_delay_s = 0.0        # uet-htsim's _avg_delay (delay_filter "ewma"), s
        self.md_filtered = 0
        self._last_md = -1.0
        self._epoch_start = 0.0
        self._epoch_acked = 0
        self._epoch_loss = False
        self._app_limited = False
        self._epoch_app_limited = False
        self.md_count = 0
        self.qa_count = 0
        self.qa_app_limited = 0
        self.ecn_count = 0
        self.acks = 0
        self.noop_count = 0

    def counters(self) -> dict:
        """``{"acks", "ecn", "noop", "md", "qa", "qa_app_limited"}`` and, with ``delay_filter``
        "ewma", ``"md_filtered"``: see the class docstring."""
        out = {"acks": self.acks, "ecn": self.ecn_count, "noop": self.noop_count, "md": self.md_count,
               "qa": self.qa_count, "qa_app_limited": self.qa_app_limited}
        if self.delay_filter == "ewma":
            out["md_filtered"] = self.md_filtered
        return out

    def set_app_limited(self, limited: bool) -> None:
        self._app_limited = limited
        if limited:
            self._epoch_app_limited = True

    def _set_base_rtt(self, base_rtt_s: float) -> None:
        self.base_rtt_s = base_rtt_s
        self.target_s = max(self.target_factor * base_rtt_s, self.min_target_s)
        if self.rate_bps is not None:
            self.bdp_bytes = self.rate_bps * base_rtt_s / 8
            self.max_cwnd_bytes = max(min(1.5 * self.bdp_bytes, self.max_cwnd_limit_bytes),
                                      2.0 * self.mss_bytes)

    def _clamp(self) -> None:
        self.cwnd_bytes = min(max(self.cwnd_bytes, self.min_cwnd_bytes), self.max_cwnd_bytes)

    def _epoch(self, now: float) -> None:
        if self.base_rtt_s is None or now - self._epoch_start < self.base_rtt_s:
            return
        if self.quick_adapt and self._epoch_loss and self._epoch_acked < self.cwnd_bytes / 2:
            if self._epoch_app_limited:
                self.qa_app_limited += 1
            else:
                self.cwnd_bytes = float(self._epoch_acked)
                self.qa_count += 1
                self._clamp()
        self._epoch_start = now
        self._epoch_acked = 0
        self._epoch_loss = False
        self._epoch_app_limited = self._app_limited

    def on_packets_acked(self, *, now: float, acked_bytes: int, rtt_s: float | None,
                         ecn: bool = False) -> None:
        if rtt_s is not None and rtt_s > 0 and not self.base_rtt_fixed and \
                (self.base_rtt_s is None or rtt_s < self.base_rtt_s):
            self._set_base_rtt(rtt_s)
        self._epoch_acked += acked_bytes
        self._epoch(now)
        self.acks += 1
        if ecn:
            self.ecn_count += 1
        if rtt_s is None or self.base_rtt_s is None:
            return
        base = self.base_rtt_s
        d = max(rtt_s - base, 0.0)
        target = self.target_s
        congested = ecn or (not self.ecn_capable and d >= self.delay_md_factor * target)
        filtered = self.delay_filter == "ewma"
        if filtered:
            if rtt_s >= base:
                self._filter_delay(d, congested)
            else:              # uet-htsim: a sample below the base RTT takes the average's place
                d = self.avg_delay_s
                congested = ecn or (not self.ecn_capable and d >= self.delay_md_factor * target)
        if not congested:
            if d < target:
                self.cwnd_bytes += self.alpha * acked_bytes * (target - d) / target
            else:
                self.cwnd_bytes += self.fi * self.mss_bytes * acked_bytes / self.cwnd_bytes
        elif d >= target:
            cut = self.avg_delay_s if filtered else d
            if filtered and cut <= target:
                self.md_filtered += 1
            elif now - self._last_md >= base:
                factor = max(1.0 - self.gamma * (cut - target) / cut, self.md_floor) if cut > 0 else 1.0
                self.cwnd_bytes *= factor
                self._last_md = now
                self.md_count += 1
        else:
            self.noop_count += 1
        self._clamp()

    def _filter_delay(self, sample_s: float, marked: bool) -> None:
        """One queueing-delay sample (s, >= 0) into ``avg_delay_s``, uet-htsim's ``_avg_delay``
        (``UecSrc::update_delay`` in ``htsim/sim/uec.cpp``, the NSCC that mrc_ctl.h names
        "uet-1.0-nscc"): an EWMA of weight :data:`DELAY_EWMA_WEIGHT` that an unmarked sample
        above the target moves towards a quarter of the base RTT instead, so that delay
        without ECN (a slow path the marks do not blame) does not drive the decrease.
        ``marked``: the ACK echoed ECN (or, on a fabric without ECN, the emulation's fallback
        took its delay for a mark). A trim NACK counts as a marked sample of one base RTT
        (uet-htsim's ``updateCwndOnNack_NSCC``: its network RTT, the trimming threshold's
        estimate)."""
        if not marked and sample_s > self.target_s:
            sample_s = self.base_rtt_s * 0.25
        w = DELAY_EWMA_WEIGHT
        self.avg_delay_s = w * sample_s + (1.0 - w) * self.avg_delay_s

    def on_packets_lost(self, *, now: float, lost_bytes: int, trimmed: bool = False) -> None:
        self.cwnd_bytes -= lost_bytes
        if trimmed:    # uet-htsim: a NACK (trim) arms quick-adapt; a timeout or inferred loss only shrinks
            self._epoch_loss = True
            if self.delay_filter == "ewma" and self.base_rtt_s is not None:
                self._filter_delay(self.base_rtt_s, True)
        self._clamp()
        self._epoch(now)


_REGISTRY: dict[str, Callable[..., CongestionControl]] = {}


def register(name: str, factory: Callable[..., CongestionControl]) -> None:
    """Register a congestion controller under ``name``; ValueError if taken."""
    if name in _REGISTRY:
        raise ValueError(f"congestion control {name!r} already registered")
    _REGISTRY[name] = factory


def create(name: str, **params) -> CongestionControl:
    """Instantiate a registered controller; ValueError for an unknown name."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}; known: {sorted(_REGISTRY)}") \
            from None
    return factory(**params)


def available() -> list[str]:
    return sorted(_REGISTRY)


register(FixedWindow.name, FixedWindow)
register(NSCC.name, NSCC)
