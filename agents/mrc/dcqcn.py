"""DCQCN, the RoCEv2 congestion control: rate-based reaction point and CNP pacing, sans-I/O.

Source: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015
(below "the paper"), section 3 (the algorithm: CP, NP and RP) and its parameter
discussion; the rate-increase state machine is QCN's (IEEE 802.1Qau), which the paper
adopts. Section and equation numbers and the paper's constants were checked against the
paper's descriptions in secondary sources (QCN, the mlx5 and ns-3 DCQCN models), not
against the PDF itself: re-check them before quoting. The three roles:

* CP (congestion point, the switch): RED-like ECN marking, in the fabric (the switch
  program; :class:`agents.mrc.sim.PathSpec` ``ecn_kmin_bytes``/``ecn_kmax_bytes``/``ecn_pmax``
  in the simulator);
* NP (notification point, the receiver): :class:`CnpPacer`, at most one CNP per
  ``cnp_interval_s`` per QP while CE-marked data arrives (the QP sends it, see
  :attr:`agents.mrc.types.QPConfig.cnp_interval_s`);
* RP (reaction point, the sender): :class:`DCQCN`, a :class:`agents.mrc.cc.CongestionControl`
  registered as ``"dcqcn"``: a current rate RC, a target rate RT and alpha; packets are
  paced at RC (:meth:`DCQCN.next_send_time`), there is no window.

Scaling to this emulator
------------------------
The paper's timers are microseconds on a 40 Gbit/s fabric whose RTT is microseconds; the
emulated fabric's base RTT is tens of milliseconds at megabits per second. Every constant
is scaled so that DCQCN's dynamics, counted in RTTs and in fractions of line rate, are the
paper's (:func:`scaled_params`):

* times (CNP interval N, alpha period K, rate-increase timer T) x ``base_rtt_s /``
  :data:`REF_RTT_S`;
* the byte counter B x ``BDP / REF_BDP`` (BDP = rate x base RTT; the reference is
  :data:`REF_RATE_BPS` x :data:`REF_RTT_S`): B is then the same number of BDPs, and B / (RC x T)
  is unchanged;
* R_AI and R_HAI as fractions of line rate (paper values / :data:`REF_RATE_BPS`).
"""
from __future__ import annotations

import math

from .cc import CongestionControl, register

REF_RATE_BPS = 40e9
"""Line rate of the paper's testbed (40 GbE ConnectX-3 Pro), bits/s: the reference for
scaling rates and bytes."""
REF_RTT_S = 12e-6
"""Reference base RTT of the paper's fabric, s. Not a figure of the paper: an assumption
for a 40 Gbit/s three-tier Clos (about 1 us per switch and NIC traversal each way, a few
hops), the "microsecond fabric" the paper's timers were tuned for. A parameter of
:func:`scaled_params` so that a caller may pick another."""

G = 1 / 256
"""Alpha gain g, paper section 3.1 (equation 1 and 2)."""
CNP_INTERVAL_S = 50e-6
"""N: at most one CNP per flow per N, paper section 3.1 (NP algorithm), 50 us."""
ALPHA_PERIOD_S = 55e-6
"""K: alpha decays once per K without a CNP, paper section 3.1 (equation 2), 55 us (K must
exceed N)."""
TIMER_S = 55e-6
"""T: the rate-increase timer period, paper's value 55 us. Later Mellanox firmware defaults
to 300 us (``rpg_time_reset``); pass ``timer_s`` to use it."""
BYTE_COUNTER_BYTES = 10e6
"""B: one rate-increase event per B bytes sent, paper's value 10 MB."""
FAST_RECOVERY_STAGES = 5
"""F: fast-recovery events per counter before additive increase, paper section 3.1 (from
QCN)."""
AI_RATE_BPS = 40e6
"""R_AI at :data:`REF_RATE_BPS`: 40 Mbit/s, the paper's additive-increase step (0.1 % of
line rate)."""
HAI_RATE_BPS = 400e6
"""R_HAI at :data:`REF_RATE_BPS`: 10 x R_AI, QCN's ratio (IEEE 802.1Qau: R_AI 5, R_HAI 50
Mbit/s; also mlx5's ``rpg_ai_rate``/``rpg_hai_rate`` defaults 5 and 50 Mbit/s)."""
MIN_RATE_FRACTION = 0.01
"""Rate floor as a fraction of line rate (ours: the paper gives none, mlx5 has
``rpg_min_rate``); 1 % keeps a QP from waiting seconds per packet after repeated cuts."""


def time_scale(base_rtt_s: float, ref_rtt_s: float = REF_RTT_S) -> float:
    """Factor applied to every DCQCN timer: ``base_rtt_s / ref_rtt_s`` (dimensionless).
    ValueError for a non-positive RTT."""
    if base_rtt_s <= 0 or ref_rtt_s <= 0:
        raise ValueError("base_rtt_s and ref_rtt_s must be positive")
    return base_rtt_s / ref_rtt_s


def scaled_cnp_interval_s(base_rtt_s: float, ref_rtt_s: float = REF_RTT_S) -> float:
    """The NP's CNP interval N for a fabric of base RTT ``base_rtt_s`` (s): 50 us x
    :func:`time_scale`."""
    return CNP_INTERVAL_S * time_scale(base_rtt_s, ref_rtt_s)


def scaled_params(rate_bps: float, base_rtt_s: float, ref_rtt_s: float = REF_RTT_S,
                  ref_rate_bps: float = REF_RATE_BPS) -> dict:
    """DCQCN's RP parameters for line rate ``rate_bps`` (bits/s) and base RTT ``base_rtt_s`` (s).

    Returns ``{"alpha_period_s", "timer_s", "byte_counter_bytes", "ai_rate_bps",
    "hai_rate_bps", "min_rate_bps"}`` (module docstring: times x RTT ratio, bytes x BDP
    ratio, rates x line-rate ratio). fat-tree-k4 at 10 Mbit/s (base RTT 22.7 ms): K = T =
    104 ms, B = 4.7 MB, R_AI = 10 kbit/s, R_HAI = 100 kbit/s. ValueError for a non-positive
    rate or RTT."""
    if rate_bps <= 0:
        raise ValueError("rate_bps must be positive")
    ts = time_scale(base_rtt_s, ref_rtt_s)
    bdp_ratio = rate_bps * base_rtt_s / (ref_rate_bps * ref_rtt_s)
    return {"alpha_period_s": ALPHA_PERIOD_S * ts, "timer_s": TIMER_S * ts,
            "byte_counter_bytes": BYTE_COUNTER_BYTES * bdp_ratio,
            "ai_rate_bps": AI_RATE_BPS * rate_bps / ref_rate_bps,
            "hai_rate_bps": HAI_RATE_BPS * rate_bps / ref_rate_bps,
            "min_rate_bps": MIN_RATE_FRACTION * rate_bps}


class DCQCN(CongestionControl):
    """DCQCN reaction point: rate RC paced, target RT, alpha (paper section 3.1).

    ``rate_bps``: line rate (bits/s), the start rate (DCQCN has no slow start: flows start
    at line rate, paper section 3.1) and the ceiling. ``base_rtt_s``: the fabric's base RTT;
    every parameter left None comes from :func:`scaled_params` for it, or, without it, for
    :data:`REF_RTT_S` (the paper's microsecond timers; B, R_AI, R_HAI still relative to line
    rate). DCQCN does not react to loss (RoCE expects PFC): ``on_packets_lost`` keeps the rate.

    On a CNP (:meth:`on_cnp`), equation (1)::

        RT = RC;  RC = RC * (1 - alpha / 2);  alpha = (1 - g) * alpha + g

    and the timer, byte counter and their stages restart. Without a CNP for
    ``alpha_period_s`` (K), equation (2): ``alpha = (1 - g) * alpha``, once per K.

    Rate increase (QCN's state machine, paper section 3.1): an event every ``timer_s`` (T)
    and every ``byte_counter_bytes`` (B) sent; with the counters' event counts t and b
    since the last cut, F = ``fast_recovery_stages``:

    * t <= F and b <= F: fast recovery, equation (3): ``RC = (RT + RC) / 2``;
    * one of them > F: additive increase, equation (4): ``RT += R_AI; RC = (RT + RC) / 2``;
    * both > F: hyper increase, ``RT += i * R_HAI; RC = (RT + RC) / 2``, i = min(t, b) - F
      (QCN's hyper-active increase; mlx5 and ns-3 models add R_HAI without i).

    RC and RT stay within [``min_rate_bps``, ``rate_bps``]. Pacing: a packet of s payload
    bytes occupies ``(s + overhead_bytes) * 8 / RC`` seconds; up to ``burst_bytes`` (default
    one ``mss_bytes``) of credit accumulate while idle, so an event loop that wakes late by
    less than a packet time loses no rate (a NIC paces in hardware; the emulation's loop
    cannot). All state changes take ``now`` (s, any monotonic clock). ValueError for
    non-positive rates, periods, or an alpha or g outside [0, 1].
    """

    name = "dcqcn"

    def __init__(self, *, mss_bytes: int, rate_bps: float, base_rtt_s: float | None = None,
                 g: float = G, initial_alpha: float = 1.0, alpha_period_s: float | None = None,
                 timer_s: float | None = None, byte_counter_bytes: float | None = None,
                 fast_recovery_stages: int = FAST_RECOVERY_STAGES,
                 ai_rate_bps: float | None = None, hai_rate_bps: float | None = None,
                 min_rate_bps: float | None = None, overhead_bytes: int = 0,
                 burst_bytes: float | None = None, ref_rtt_s: float = REF_RTT_S, **_ignored):
        super().__init__(mss_bytes=mss_bytes)
        if rate_bps is None or rate_bps <= 0:
            raise ValueError("rate_bps (the line rate) must be positive")
        d = scaled_params(rate_bps, base_rtt_s, ref_rtt_s) if base_rtt_s is not None else \
            scaled_params(rate_bps, REF_RTT_S)
        self.rate_bps = float(rate_bps)
        self.base_rtt_s = base_rtt_s
        self.g = g
        self.alpha_period_s = d["alpha_period_s"] if alpha_period_s is None else alpha_period_s
        self.timer_s = d["timer_s"] if timer_s is None else timer_s
        self.byte_counter_bytes = d["byte_counter_bytes"] if byte_counter_bytes is None \
            else byte_counter_bytes
        self.fast_recovery_stages = fast_recovery_stages
        self.ai_rate_bps = d["ai_rate_bps"] if ai_rate_bps is None else ai_rate_bps
        self.hai_rate_bps = d["hai_rate_bps"] if hai_rate_bps is None else hai_rate_bps
        self.min_rate_bps = d["min_rate_bps"] if min_rate_bps is None else min_rate_bps
        self.overhead_bytes = overhead_bytes
        self.burst_bytes = float(mss_bytes if burst_bytes is None else burst_bytes)
        if not 0 <= g <= 1 or not 0 <= initial_alpha <= 1:
            raise ValueError("g and initial_alpha must be in [0, 1]")
        if min(self.alpha_period_s, self.timer_s, self.byte_counter_bytes) <= 0 or \
                not 0 < self.min_rate_bps <= self.rate_bps or fast_recovery_stages < 0 or \
                self.ai_rate_bps < 0 or self.hai_rate_bps < 0 or overhead_bytes < 0 or \
                self.burst_bytes < 0:
            raise ValueError("DCQCN periods, byte counter and rates must be positive, "
                             "min_rate_bps <= rate_bps")
        self.rc_bps = self.rt_bps = self.rate_bps
        self.alpha = float(initial_alpha)
        self._started = False
        self._alpha_next = self._timer_next = 0.0
        self.t_stage = self.b_stage = 0
        self._bytes = 0.0                 # bytes towards the next byte-counter event
        self._next_tx = -math.inf         # earliest send time of the next packet
        self.cnps = self.cuts = 0
        self.fr_events = self.ai_events = self.hai_events = 0

    def counters(self) -> dict:
        """``{"rate_bps", "target_bps", "alpha", "cnps", "fr", "ai", "hai"}``: current and target
        rate (bits/s), alpha, CNPs taken, rate-increase events of each kind."""
        return {"rate_bps": self.rc_bps, "target_bps": self.rt_bps, "alpha": self.alpha,
                "cnps": self.cnps, "fr": self.fr_events, "ai": self.ai_events,
                "hai": self.hai_events}

    # ---- timers ------------------------------------------------------------
    def _start(self, now: float) -> None:
        self._started = True
        self._alpha_next = now + self.alpha_period_s
        self._timer_next = now + self.timer_s

    def advance(self, now: float) -> None:
        """Run the alpha and rate-increase timers due by ``now`` (s), in time order."""
        if not self._started:
            self._start(now)
            return
        if now >= self._alpha_next:       # equation (2), once per elapsed K
            n = int((now - self._alpha_next) // self.alpha_period_s) + 1
            self.alpha *= (1 - self.g) ** n
            self._alpha_next += n * self.alpha_period_s
        while now >= self._timer_next:
            if self.rc_bps >= self.rate_bps and self.rt_bps >= self.rate_bps:
                n = int((now - self._timer_next) // self.timer_s) + 1   # at the ceiling: count only
                self.t_stage += n
                self._timer_next += n * self.timer_s
                break
            self._timer_next += self.timer_s
            self.t_stage += 1
            self._increase()

    def _increase(self) -> None:
        """One rate-increase event after a stage counter moved (class docstring)."""
        f, t, b = self.fast_recovery_stages, self.t_stage, self.b_stage
        if t > f and b > f:
            self.rt_bps += (min(t, b) - f) * self.hai_rate_bps
            self.hai_events += 1
        elif t > f or b > f:
            self.rt_bps += self.ai_rate_bps
            self.ai_events += 1
        else:
            self.fr_events += 1
        self.rt_bps = min(self.rt_bps, self.rate_bps)
        self.rc_bps = min(max((self.rt_bps + self.rc_bps) / 2, self.min_rate_bps), self.rate_bps)

    # ---- CongestionControl -------------------------------------------------
    def on_cnp(self, *, now: float) -> None:
        """Equation (1): cut RC by alpha / 2 towards the floor, RT = old RC, raise alpha;
        restart the timer, the byte counter and alpha's period."""
        self.advance(now)
        self.cnps += 1
        self.rt_bps = self.rc_bps
        self.rc_bps = max(self.rc_bps * (1 - self.alpha / 2), self.min_rate_bps)
        self.alpha = (1 - self.g) * self.alpha + self.g
        self.t_stage = self.b_stage = 0
        self._bytes = 0.0
        self._start(now)

    def on_packet_sent(self, *, now: float, size_bytes: int) -> None:
        """Byte counter (one event per B bytes) and the pacing schedule of the next packet."""
        self.advance(now)
        self._bytes += size_bytes
        while self._bytes >= self.byte_counter_bytes:
            self._bytes -= self.byte_counter_bytes
            self.b_stage += 1
            self._increase()
        rate = self.rc_bps
        self._next_tx = max(self._next_tx, now - self.burst_bytes * 8 / rate) + \
            (size_bytes + self.overhead_bytes) * 8 / rate

    def next_send_time(self, *, now: float, size_bytes: int) -> float:
        """Earliest time (s) the next packet may be sent: ``<= now`` means now."""
        self.advance(now)
        return self._next_tx

    def can_send(self, *, inflight_bytes: int, size_bytes: int) -> bool:
        """No window: DCQCN limits the rate (:meth:`next_send_time`), not the bytes in flight."""
        return True


register(DCQCN.name, DCQCN)


class CnpPacer:
    """NP rate limit (paper section 3.1): a CNP for a CE-marked packet unless one was sent in
    the last ``interval_s`` seconds (N, per QP). ValueError for a negative interval."""

    __slots__ = ("interval_s", "_last", "sent", "suppressed")

    def __init__(self, interval_s: float):
        if interval_s < 0:
            raise ValueError("interval_s must be >= 0")
        self.interval_s = interval_s
        self._last = -math.inf
        self.sent = 0
        self.suppressed = 0

    def on_ce(self, now: float) -> bool:
        """A CE-marked data packet arrived at ``now`` (s): True if a CNP is due now."""
        if now - self._last >= self.interval_s:
            self._last = now
            self.sent += 1
            return True
        self.suppressed += 1
        return False
