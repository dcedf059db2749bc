"""Pluggable congestion control for MRC QPs, default a simplified NSCC (UET 1.0).

Interface in the style of aioquic's ``quic/congestion/base.py``: a base class
with keyword-only callbacks and a registry by name (the name the OCP MRC CC
profile uses: ``mrc_ctl.h`` lists ``"uet-1.0-nscc"``).

Signals this emulation cannot give
-----------------------------------
NSCC is driven by ECN marks and packet trimming as well as delay. The Linux
kernel of this testbed has no ECN-marking qdisc (no RED, no fq_codel) and no
switch can trim a packet, so in practice only delay (echoed timestamps) and
loss reach the controller. Both inputs are still accepted: ``ecn=True`` on
``on_packets_acked`` (the SACK's ECN-echo flag, set when the responder saw a
CE mark) and ``trimmed=True`` on ``on_packets_lost`` (a TRIMMED NACK) take
the NSCC branches described below. With ``ecn_capable=False`` (the default
here) a delay of at least ``delay_md_factor`` (2) times the target is treated
as the "ECN and delay >= target" case, so the window still decreases
multiplicatively on large delay; between 1x and 2x the target it grows by the
fair increase, as NSCC does without ECN.
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


class FixedWindow(CongestionControl):
    """A constant window (``window_bytes``; infinite by default): no congestion control."""

    name = "fixed"

    def __init__(self, *, mss_bytes: int, window_bytes: float = float("inf"), **_ignored):
        super().__init__(mss_bytes=mss_bytes)
        self.cwnd_bytes = window_bytes


class NSCC(CongestionControl):
    """Simplified NSCC (UET 1.0), defaults from the UEC packet simulator (MRC.md).

    ``rate_bps`` and ``base_rtt_s`` give BDP = rate * base_rtt / 8 bytes;
    ``max_cwnd = 1.5 BDP``; the window starts at ``max_cwnd``; target delay
    = ``target_factor * base_rtt`` (1.0; 0.75 with trimming). On every ACK
    with ``d = rtt - base_rtt``:

    * no ECN, d < target: proportional increase
      ``cwnd += alpha * acked * (target - d) / target``;
    * no ECN, d >= target: fair increase ``cwnd += fi * mss * acked / cwnd``;
    * ECN (or, without ECN, d >= delay_md_factor * target), d >= target:
      multiplicative decrease at most
      once per RTT, ``cwnd *= max(1 - gamma * (d - target) / d, 0.5)``,
      gamma 0.8;
    * ECN, d < target: no change (the QP skips that EV instead).

    Loss or trim: ``cwnd -= lost bytes``; quick-adapt: at the end of an RTT
    epoch in which loss was seen, if less than half the window was acked,
    cwnd = bytes acked in that epoch. cwnd stays within [mss, max_cwnd].
    """

    name = "uet-1.0-nscc"

    def __init__(self, *, mss_bytes: int, rate_bps: float, base_rtt_s: float,
                 target_factor: float = 1.0, alpha: float = 0.5, fi: float = 1.0,
                 gamma: float = 0.8, md_floor: float = 0.5, ecn_capable: bool = False,
                 quick_adapt: bool = True, delay_md_factor: float = 2.0, **_ignored):
        super().__init__(mss_bytes=mss_bytes)
        if rate_bps <= 0 or base_rtt_s <= 0:
            raise ValueError("rate_bps and base_rtt_s must be positive")
        self.base_rtt_s = base_rtt_s
        self.bdp_bytes = rate_bps * base_rtt_s / 8
        self.max_cwnd_bytes = max(1.5 * self.bdp_bytes, 2.0 * mss_bytes)
        self.min_cwnd_bytes = float(mss_bytes)
        self.cwnd_bytes = self.max_cwnd_bytes
        self.target_s = target_factor * base_rtt_s
        self.alpha, self.fi, self.gamma, self.md_floor = alpha, fi, gamma, md_floor
        self.ecn_capable = ecn_capable
        self.delay_md_factor = delay_md_factor
        self.quick_adapt = quick_adapt
        self._last_md = -1.0
        self._epoch_start = 0.0
        self._epoch_acked = 0
        self._epoch_loss = False
        self.md_count = 0
        self.qa_count = 0

    def _clamp(self) -> None:
        self.cwnd_bytes = min(max(self.cwnd_bytes, self.min_cwnd_bytes), self.max_cwnd_bytes)

    def _epoch(self, now: float) -> None:
        if now - self._epoch_start < self.base_rtt_s:
            return
        if self.quick_adapt and self._epoch_loss and self._epoch_acked < self.cwnd_bytes / 2:
            self.cwnd_bytes = float(self._epoch_acked)
            self.qa_count += 1
            self._clamp()
        self._epoch_start = now
        self._epoch_acked = 0
        self._epoch_loss = False

    def on_packets_acked(self, *, now: float, acked_bytes: int, rtt_s: float | None,
                         ecn: bool = False) -> None:
        self._epoch_acked += acked_bytes
        self._epoch(now)
        if rtt_s is None:
            return
        d = max(rtt_s - self.base_rtt_s, 0.0)
        target = self.target_s
        congested = ecn or (not self.ecn_capable and d >= self.delay_md_factor * target)
        if not congested:
            if d < target:
                self.cwnd_bytes += self.alpha * acked_bytes * (target - d) / target
            else:
                self.cwnd_bytes += self.fi * self.mss_bytes * acked_bytes / self.cwnd_bytes
        elif d >= target and now - self._last_md >= self.base_rtt_s:
            factor = max(1.0 - self.gamma * (d - target) / d, self.md_floor) if d > 0 else 1.0
            self.cwnd_bytes *= factor
            self._last_md = now
            self.md_count += 1
        self._clamp()

    def on_packets_lost(self, *, now: float, lost_bytes: int, trimmed: bool = False) -> None:
        self.cwnd_bytes -= lost_bytes
        self._epoch_loss = True
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
