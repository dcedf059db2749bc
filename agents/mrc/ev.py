"""Entropy values (EVs): the per-path state machine and the set a QP sprays over.

State names and values follow OCP MRC 1.0 ``mrc_ctl.h`` (``enum
mrc_ctl_ev_state``: GOOD = 1<<0, ASSUMED_BAD = 1<<1, DENIED = 1<<2,
UNKNOWN = 1<<31) plus the NIC-internal SKIP. All transitions live in one
table, :data:`TRANSITIONS` (h11 style); an event a state does not accept
raises :class:`EVStateError` naming both.

Behaviour (docs/mrc-spec.md, "EV states", after the MRC paper and spec):

* loss on an EV without a congestion signal -> ASSUMED_BAD at once, unless
  that would leave fewer than ``ev_min_active`` usable EVs (the floor holds:
  the EV stays usable and ``floor_held`` is counted). Which losses count as
  an EV's failure (persistent loss, not congestion) is the requester's
  decision: ``agents.mrc.requester.Requester._charge_ev``;
* ASSUMED_BAD (and UNKNOWN) -> GOOD after ``probe_successes`` consecutive
  successful background EV probes;
* a congestion signal (ECN echo, trim NACK before the last hop) -> SKIP; SKIP -> GOOD
  after one rotation, bounded by a timeout of one SRTT. docs/mrc-spec.md ("EV states", after the MRC paper and
  spec): "back to GOOD after one rotation or a short timeout". One rotation: the sprayer
  has picked as many times as there were other usable EVs when the SKIP began (it went
  round them once), and the EV's next turn in the rotation restores it. The timeout is the
  QP's SRTT (``skip_timeout_fn``; ``skip_timeout_s`` before the first RTT sample), so a
  SKIP means something on a fabric whose RTT is tens of ms. ALWAYS_SKIP (the responder
  saw a run of CE marks on the EV) holds the SKIP, rotations and timeout aside, until a
  SACK for the EV arrives without ECN (:meth:`EVSet.clear_always_skip`), or at the latest
  :data:`ALWAYS_SKIP_TIMEOUTS` skip timeouts, so an EV with nothing left in flight to
  return a clean SACK is not lost for good;
* ASSUMED_BAD -> GOOD at once (DELIVERED) when a packet sent on the EV no earlier
  than its last charged loss is known to have reached the receiver (acknowledged,
  echoed, or its trimmed header NACKed): the losses were congestion or reordering
  inferred as loss before that evidence returned;
* DENIED and GOOD set only by the controller (:meth:`EVSet.set_state`);
  the operator's DENIED is honoured even below the floor.

EV selection (``select``): ``"rotation"``, the spec's, above; or ``"reps"``, a non-spec variant
that measures what the spec's SKIP rotation costs (:mod:`agents.mrc.reps`). SKIPs are still
entered and counted under REPS, but they do not steer.

Reported events (mrc_ctl.h ``ev_event_mask``: "Only EV_ASSUMED_BAD and EV_GOOD is
supported"): a change of the externally visible state (SKIP is GOOD to the controller)
to a state in the EV set's ``event_mask`` is appended as a frozen :class:`EVEvent` to
the sink; others (entering or leaving SKIP, DENIED) are not reported. SKIPs are counted
per EV (``skips`` in :meth:`EVSet.stats`).
"""
from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

from . import reps
from .rng import Pcg32

log = logging.getLogger(__name__)


class EVState(enum.IntEnum):
    GOOD = 1 << 0
    ASSUMED_BAD = 1 << 1
    DENIED = 1 << 2
    SKIP = 1 << 8  # NIC-internal, never reported by mrc_ctl
    UNKNOWN = 1 << 31


class EVCause(enum.Enum):
    """The inputs of the EV state machine (the ``cause`` of an EVEvent)."""

    LOSS = "loss"                    # a packet on the EV was lost (no trim)
    CONGESTION = "congestion"        # ECN echo or trim NACK on the EV
    SKIP_EXPIRED = "skip_expired"
    PROBES_OK = "probes_ok"          # k consecutive probe successes
    DELIVERED = "delivered"          # a packet sent on it after its last charged loss arrived
    CONTROLLER_GOOD = "controller_good"
    CONTROLLER_DENY = "controller_deny"


class EVStateError(RuntimeError):
    """An event the EV's current state does not accept (a bug, not a peer fault)."""

    def __init__(self, state: EVState, cause: EVCause):
        super().__init__(f"EV state {state.name} does not accept event {cause.value}")
        self.state = state
        self.cause = cause


G, B, D, S, U = EVState.GOOD, EVState.ASSUMED_BAD, EVState.DENIED, EVState.SKIP, EVState.UNKNOWN
_PICKABLE = (EVState.GOOD, EVState.SKIP)
"""States the sprayer may pick (:attr:`EVSet.PICKABLE` for :mod:`agents.mrc.reps`)."""
C = EVCause
TRANSITIONS: dict[tuple[EVState, EVCause], EVState] = {
    (G, C.LOSS): B, (G, C.CONGESTION): S, (G, C.PROBES_OK): G,
    (G, C.CONTROLLER_GOOD): G, (G, C.CONTROLLER_DENY): D,
    (S, C.LOSS): B, (S, C.CONGESTION): S, (S, C.SKIP_EXPIRED): G, (S, C.PROBES_OK): S,
    (S, C.CONTROLLER_GOOD): G, (S, C.CONTROLLER_DENY): D,
    (B, C.LOSS): B, (B, C.CONGESTION): B, (B, C.PROBES_OK): G,
    (B, C.CONTROLLER_GOOD): G, (B, C.CONTROLLER_DENY): D,
    (U, C.LOSS): B, (U, C.CONGESTION): U, (U, C.PROBES_OK): G,
    (U, C.CONTROLLER_GOOD): G, (U, C.CONTROLLER_DENY): D,
    (D, C.LOSS): D, (D, C.CONGESTION): D, (D, C.PROBES_OK): D,
    (D, C.CONTROLLER_GOOD): G, (D, C.CONTROLLER_DENY): D,
    (G, C.DELIVERED): G, (S, C.DELIVERED): S, (B, C.DELIVERED): G, (U, C.DELIVERED): G, (D, C.DELIVERED): D,
}
"""(state, cause) -> next state. Missing pairs are illegal (e.g. GOOD + SKIP_EXPIRED)."""

USABLE = frozenset({EVState.GOOD, EVState.SKIP})
"""States counted as active for the ``ev_min_active`` floor."""


def next_state(state: EVState, cause: EVCause) -> EVState:
    """Look up the transition table; raises EVStateError for an illegal event."""
    try:
        return TRANSITIONS[(state, cause)]
    except KeyError:
        raise EVStateError(state, cause) from None


@dataclass(frozen=True, slots=True)
class EVEvent:
    """One reported EV state change: ``time`` in seconds (the QP's clock).

    ``drop_count``: packets lost on this EV (charged to it) since its previous reported
    event. mrc_ctl.h's ``struct mrc_ctl_ev_event`` field of that name counts EV events
    the device dropped from the event queue; this queue never drops one, so the field
    carries the losses behind the change instead.

    ``loss_cause``: for a retirement on losses (cause LOSS), how the run of losses that retired
    the EV was found (a :class:`agents.mrc.loss.LossCause` value): ``"timeout"`` when any loss of
    the run was a retransmission timeout, else the last one's (``"ev_threshold"`` or ``"ooo"``:
    inferred from later packets' SACKs); None for any other event. Not in mrc_ctl.h: the testbed
    reports it so that a detection can be told from a timeout.
    """

    time: float
    qpn: int
    ev: int
    old: EVState
    new: EVState
    cause: EVCause
    drop_count: int = 0
    loss_cause: str | None = None


EVENT_MASK_ALLOWED = int(EVState.GOOD) | int(EVState.ASSUMED_BAD)
"""mrc_ctl.h: the EV event mask supports only GOOD and ASSUMED_BAD (also the default)."""
ALWAYS_SKIP_TIMEOUTS = 8
"""An ALWAYS_SKIP lasts at most this many skip timeouts (SRTTs) without a clean SACK."""


EV_SELECT = ("rotation", "reps")
"""EV selection modes (:class:`EVSet` ``select``): the spec's randomised rotation with SKIP, or the
non-spec REPS variant (module docstring)."""

def visible(state: EVState) -> EVState:
    """The state the controller sees: SKIP is NIC-internal, GOOD to mrc_ctl."""
    return EVState.GOOD if state is EVState.SKIP else state


class EVInfo:
    """Per-EV state and counters (mutable; read through :meth:`EVSet.stats`)."""

    __slots__ = ("ev", "state", "skip_until", "probe_ok", "probe_due", "probe_outstanding",
                 "bytes_sent", "packets_acked", "packets_lost",
                 "retransmits", "seq", "acked_seq", "last_ack_s", "rtt_last_s", "rtt_min_s",
                 "rtt_srtt_s", "rtt_samples", "probes_sent", "probes_ok_total",
                 "delivered_ts_ns", "delivered_at_s", "loss_run", "loss_run_ts_ns", "loss_run_timeout",
                 "losses_excused", "losses_chargeable",
                 "skip_picks", "always_skip", "skips", "drops_reported", "penalty")

    def __init__(self, ev: int, state: EVState):
        self.ev = ev
        self.state = state
        self.skip_until = 0.0
        self.probe_ok = 0            # consecutive probe successes
        self.probe_due = 0.0         # absolute time of the next probe
        self.probe_outstanding: tuple[int, float] | None = None  # (probe_id, deadline)
        self.bytes_sent = 0
        self.packets_acked = 0
        self.packets_lost = 0
        self.retransmits = 0
        self.seq = 0                 # per-EV transmission counter
        self.acked_seq = -1          # highest acknowledged per-EV transmission counter
        self.last_ack_s = float("-inf")  # last SACK of new data echoing this EV (timer restart)
        self.rtt_last_s: float | None = None
        self.rtt_min_s: float | None = None
        self.rtt_srtt_s: float | None = None  # EWMA (1/8) of the echoed-timestamp RTT
        self.rtt_samples = 0
        self.delivered_ts_ns = 0     # latest send stamp of a transmission on this EV known to arrive
        self.delivered_at_s = float("-inf")  # when delivered_ts_ns last grew (s)
        self.loss_run = 0            # losses on this EV since its last delivery (see requester)
        self.loss_run_ts_ns = 0      # send stamp of the last loss counted in loss_run
        self.loss_run_timeout = False  # a retransmission timeout among loss_run's losses
        self.losses_excused = 0      # losses not charged: a later packet on the EV arrived
        # losses of a cause the QP may charge to the EV (loss.CHARGED), excused or not: the
        # controller's drop rate leaves out trims and NACKs, which say nothing of the path
        self.losses_chargeable = 0
        self.probes_sent = 0
        self.probes_ok_total = 0
        self.skip_picks = 0          # EVSet pick count at which a SKIP has seen one rotation
        self.always_skip = False     # ALWAYS_SKIP: only a SACK without ECN (or a long bound) ends it
        self.skips = 0               # entries into SKIP (never reported as events)
        self.drops_reported = 0      # packets_lost when the last event was reported
        self.penalty = 0             # REPS variant: rotation turns this EV is still passed over

    @property
    def packets_sent(self) -> int:
        """Transmissions on this EV (first and retransmissions): the per-EV sequence counter."""
        return self.seq


class EVSet:
    """The EVs of one QP (one EV profile): states, spray order, probe bookkeeping.

    ``evs``: EV ids (u32, distinct). ``ev_min_active``: floor of usable EVs
    (mrc_ctl.h ``ev_min_active``, <= len(evs)). ``rng``: a seeded
    :class:`agents.mrc.rng.Pcg32` used for the randomised rotation. ``skip_timeout_fn()``: the
    SKIP timeout bound in seconds (the QP's SRTT) or None before it is known, then
    ``skip_timeout_s`` applies. ``event_mask``: the states whose changes are reported
    (GOOD and/or ASSUMED_BAD bits). ``sink``: a list-like that receives every reported
    EVEvent (default: the ``events`` list). ``select``: :data:`EV_SELECT` ("rotation", the
    spec's; "reps", the non-spec variant of the module docstring). Raises ValueError on a bad
    configuration.
    """

    PICKABLE = _PICKABLE

    def __init__(self, evs: Iterable[int], *, qpn: int, rng: Pcg32,
                 ev_min_active: int = 1, skip_timeout_s: float = 0.001,
                 initial_state: EVState = EVState.GOOD, sink: list | None = None,
                 skip_timeout_fn: Callable[[], float | None] | None = None,
                 event_mask: int = EVENT_MASK_ALLOWED, select: str = "rotation"):
        ev_list = list(evs)
        if not ev_list:
            raise ValueError("an EV set needs at least one EV")
        if len(set(ev_list)) != len(ev_list):
            raise ValueError(f"duplicate EVs in {ev_list}")
        if not 0 <= ev_min_active <= len(ev_list):
            raise ValueError(f"ev_min_active={ev_min_active} not in [0, {len(ev_list)}]")
        if event_mask & ~EVENT_MASK_ALLOWED:
            raise ValueError(f"event_mask {event_mask:#x}: only GOOD and ASSUMED_BAD (mrc_ctl.h)")
        if select not in EV_SELECT:
            raise ValueError(f"select={select!r}: expected one of {', '.join(EV_SELECT)}")
        self.qpn = qpn
        self.select = select
        self.reps = select == "reps"
        self.reuse: deque[int] = deque(maxlen=reps.REPS_QUEUE_MAX)   # REPS: EVs of good ACKs, oldest first
        self.reused = 0              # REPS: picks that reused a good ACK's EV
        self.rng = rng
        self.ev_min_active = ev_min_active
        self.skip_timeout_s = skip_timeout_s
        self.skip_timeout_fn = skip_timeout_fn
        self.event_mask = event_mask
        self._picks = 0              # EVs handed out by pick/pick_many (the rotation clock)
        self.info: dict[int, EVInfo] = {ev: EVInfo(ev, initial_state) for ev in ev_list}
        self.order = ev_list
        self._rotation: list[int] = []
        self._pos = 0
        self.events = sink if sink is not None else []  # EVEvents appended here
        self.floor_held = 0
        self._all_good = initial_state is EVState.GOOD

    # ---- state machine -------------------------------------------------
    def sample_rows(self) -> list[dict]:
        """Per EV in spray order, what an agent's sample reports of it: ``ev_id``, ``state``
        (the :class:`EVState` name), ``sent`` (transmissions), ``lost`` (every loss), ``rtx``
        (retransmissions), ``skips`` (entries into SKIP) and ``charged`` (the losses of a
        cause the QP may charge to the EV: :attr:`EVInfo.losses_chargeable`). Packet counts,
        cumulative."""
        info = self.info
        return [{"ev_id": ev, "state": (i := info[ev]).state.name, "sent": i.seq, "lost": i.packets_lost,
                 "rtx": i.retransmits, "skips": i.skips, "charged": i.losses_chargeable}
                for ev in self.order]

    def usable_count(self) -> int:
        info = self.info
        return sum(1 for ev in self.order if info[ev].state in USABLE)

    def _update_all_good(self) -> None:
        info = self.info
        self._all_good = all(info[ev].state is EVState.GOOD for ev in self.order)

    def replace(self, cur: int, new: int, now: float, state: EVState = EVState.GOOD) -> None:
        """mrc_ctl REPLACE_EV: EV ``new`` takes ``cur``'s slot with fresh counters, in ``state``
        (the op entry's required ``state``: GOOD or DENIED).

        ``cur``'s record stays (DENIED, out of the spray order and the stats) so that SACKs
        and timers of packets still in flight on it find it; no event is reported.
        ValueError for another ``state``, if ``cur`` is not in the set or ``new`` already is.
        """
        if state != EVState.GOOD and state != EVState.DENIED:
            raise ValueError(f"REPLACE_EV installs GOOD or DENIED, not {EVState(state).name}")
        if cur not in self.order:
            raise ValueError(f"EV {cur} is not in the EV set")
        if new in self.order:
            raise ValueError(f"EV {new} is already in the EV set")
        self.order[self.order.index(cur)] = new
        self.info[cur].state = EVState.DENIED
        self.info[new] = EVInfo(new, EVState(state))
        self._rotation, self._pos = [], 0
        self._update_all_good()
        log.info("qpn %d: EV %d replaced by EV %d", self.qpn, cur, new)

    def skip_bound_s(self) -> float:
        """How long a SKIP may last at most: one SRTT, ``skip_timeout_s`` before one is known."""
        fn = self.skip_timeout_fn
        t = fn() if fn is not None else None
        return self.skip_timeout_s if t is None else t

    def _start_skip(self, info: EVInfo, now: float, always: bool) -> None:
        bound = self.skip_bound_s()
        info.skip_until = now + (ALWAYS_SKIP_TIMEOUTS * bound if always else bound)
        info.skip_picks = self._picks + max(self.usable_count() - 1, 0)
        info.always_skip = info.always_skip or always

    def skip_over(self, info: EVInfo, now: float) -> bool:
        """The SKIP of ``info`` has run its course (rotation or timeout; module docstring)."""
        if now >= info.skip_until:
            return True
        return not info.always_skip and self._picks >= info.skip_picks

    def clear_always_skip(self, ev: int, now: float) -> None:
        """A SACK for ``ev`` arrived without ECN: an ALWAYS_SKIP on it ends now."""
        info = self.info.get(ev)
        if info is not None and info.always_skip:
            info.always_skip = False
            if info.state is EVState.SKIP:
                self.apply(ev, EVCause.SKIP_EXPIRED, now)

    def apply(self, ev: int, cause: EVCause, now: float, *, always: bool = False,
              drop_count: int | None = None, loss_cause: str | None = None) -> EVState:
        """Feed one event to EV ``ev``; returns its new state. KeyError for an unknown EV.

        ``always``: a CONGESTION that is an ALWAYS_SKIP. ``drop_count``: for a reported
        event, overrides the losses charged to the EV since its last reported event.
        ``loss_cause``: a reported event's :attr:`EVEvent.loss_cause`.
        """
        info = self.info[ev]
        old = info.state
        new = next_state(old, cause)
        if new == EVState.ASSUMED_BAD and old in USABLE and \
                self.usable_count() - 1 < self.ev_min_active:
            self.floor_held += 1
            log.debug("qpn %d ev %d: loss kept usable by ev_min_active floor", self.qpn, ev)
            return old
        if new is not old:
            info.state = new
            self._update_all_good()
            if new is EVState.SKIP:
                info.skips += 1
                self._start_skip(info, now, always)
            else:
                info.always_skip = False
            if new in (EVState.ASSUMED_BAD, EVState.UNKNOWN):
                info.probe_ok = 0
                info.probe_due = now
            shown = visible(new)
            if shown is not visible(old) and shown & self.event_mask:
                if drop_count is None:
                    drop_count = info.packets_lost - info.drops_reported
                info.drops_reported = info.packets_lost
                self.events.append(EVEvent(now, self.qpn, ev, old, new, cause, drop_count, loss_cause))
            log.info("qpn %d ev %d: %s -> %s (%s)", self.qpn, ev, old.name, new.name, cause.value)
        elif new is EVState.SKIP:
            self._start_skip(info, now, always)
        return new

    def set_state(self, ev: int, state: EVState, now: float) -> None:
        """Controller call (mrc_ctl MODIFY_EV_STATE): GOOD or DENIED only; ValueError otherwise."""
        if state == EVState.GOOD:
            self.apply(ev, EVCause.CONTROLLER_GOOD, now)
        elif state == EVState.DENIED:
            self.apply(ev, EVCause.CONTROLLER_DENY, now)
        else:
            raise ValueError(f"the controller may set GOOD or DENIED, not {state.name}")

    @property
    def all_good(self) -> bool:
        """Every EV is GOOD: nothing to probe, no SKIP to expire (kept on every transition)."""
        return self._all_good

    def expire_skips(self, now: float) -> None:
        if self._all_good:
            return
        for info in self.info.values():
            if info.state == EVState.SKIP and info.skip_until <= now:
                self.apply(info.ev, EVCause.SKIP_EXPIRED, now)

    def skip_deadline(self) -> float | None:
        """The earliest SKIP timeout, or None (the QP's timer)."""
        t = None
        for info in self.info.values():
            if info.state is EVState.SKIP and (t is None or info.skip_until < t):
                t = info.skip_until
        return t

    # ---- spraying ------------------------------------------------------
    def pick(self, now: float, exclude: int | None = None, alive_since_ns: int = 0) -> int | None:
        """Next GOOD EV in a seeded randomised rotation, avoiding ``exclude`` if another exists.

        ``alive_since_ns``: a retransmission's lost stamp; then only an EV known to have
        delivered a transmission sent no earlier (``delivered_ts_ns``) is taken, if any usable
        one has: a path that failed with the lost packet has not been retired yet when the
        packet is found lost (the run of losses that retires it is still short), and a
        retransmission sent there is lost again and waits for a backed-off RTO.
        Returns None when no EV is usable. A SKIP EV is skipped; if nothing
        is GOOD a SKIP EV is used rather than nothing. With ``select`` "reps":
        :func:`agents.mrc.reps.pick`.
        """
        if self.reps:
            return reps.pick(self, exclude, alive_since_ns)
        info = self.info
        n = len(self.order)
        if alive_since_ns and not any(i.delivered_ts_ns >= alive_since_ns and ev != exclude and i.state in _PICKABLE
                                      for ev, i in info.items()):
            alive_since_ns = 0
        for _ in range(2 * n + 1):
            ev = self._next_in_rotation()
            i = info[ev]
            st = i.state
            if st is EVState.GOOD and ev != exclude and i.delivered_ts_ns >= alive_since_ns:
                self._picks += 1
                return ev
            if st is EVState.SKIP and self.skip_over(i, now):
                self.apply(ev, EVCause.SKIP_EXPIRED, now)
                if ev != exclude and i.delivered_ts_ns >= alive_since_ns:
                    self._picks += 1
                    return ev
        for ev in self.order:
            if info[ev].state is EVState.GOOD:
                self._picks += 1
                return ev
        skipped = [ev for ev in self.order if info[ev].state is EVState.SKIP]
        if skipped:   # every usable EV skipped: spread over them, never pile onto the first
            ev = skipped[self._picks % len(skipped)]
            self._picks += 1
            return ev
        return None

    def reps_feedback(self, ev: int, penalty: int) -> None:
        """REPS variant: an ACK for ``ev`` (:func:`agents.mrc.reps.feedback`)."""
        if self.reps:
            reps.feedback(self, ev, penalty)

    def _next_in_rotation(self) -> int:
        """The rotation's next EV, drawing a new rotation when this one is spent."""
        if self._pos >= len(self._rotation):
            self._rotation = self._new_rotation()
            self._pos = 0
        ev = self._rotation[self._pos]
        self._pos += 1
        return ev

    def _new_rotation(self) -> list[int]:
        """A uniformly random ordering of the EVs (never mutated by the caller): PCG32's
        Fisher-Yates shuffle of the spray order, which the native engine repeats bit for bit."""
        rot = self.order[:]
        self.rng.shuffle(rot)
        return rot

    def pick_many(self, now: float, n: int) -> list[int]:
        """The next ``n`` picks of :meth:`pick` as a list (shorter if no EV is usable).

        Same rotation and RNG use as ``n`` calls of ``pick(now)``; while every
        EV is GOOD whole slices of the rotation are taken at once (the
        requester's hot path).
        """
        out: list[int] = []
        if self._all_good and not self.reps:
            rot, pos = self._rotation, self._pos
            while n > 0:
                if pos >= len(rot):
                    rot = self._new_rotation()
                    pos = 0
                take = rot[pos:pos + n]
                out += take
                pos += len(take)
                n -= len(take)
            self._rotation, self._pos = rot, pos
            self._picks += len(out)
            return out
        pick = self.pick
        for _ in range(n):
            ev = pick(now)
            if ev is None:
                break
            out.append(ev)
        return out

    # ---- probes --------------------------------------------------------
    def probe_targets(self) -> list[EVInfo]:
        """EVs that need background probes (ASSUMED_BAD, UNKNOWN)."""
        if self._all_good:   # the common case, asked 3 times per I/O wakeup
            return []
        return [i for i in self.info.values()
                if i.state in (EVState.ASSUMED_BAD, EVState.UNKNOWN)]

    def probe_result(self, ev: int, ok: bool, now: float, successes_needed: int) -> None:
        """Record one probe outcome; ``successes_needed`` consecutive successes restore the EV."""
        info = self.info[ev]
        info.probe_outstanding = None
        if not ok:
            info.probe_ok = 0
            return
        info.probe_ok += 1
        info.probes_ok_total += 1
        if info.probe_ok >= successes_needed and \
                info.state in (EVState.ASSUMED_BAD, EVState.UNKNOWN):
            self.apply(ev, EVCause.PROBES_OK, now)

    def stats(self) -> dict[int, dict]:
        """Per-EV snapshot: {ev: {state, packets_sent, packets_lost, ...}}."""
        out = {}
        for ev in self.order:
            i = self.info[ev]
            out[ev] = {
                "state": i.state.name, "packets_sent": i.packets_sent,
                "bytes_sent": i.bytes_sent, "packets_acked": i.packets_acked,
                "packets_lost": i.packets_lost, "retransmits": i.retransmits,
                "rtt_last_s": i.rtt_last_s, "rtt_min_s": i.rtt_min_s,
                "rtt_samples": i.rtt_samples, "probes_sent": i.probes_sent,
                "probes_ok": i.probes_ok_total, "losses_excused": i.losses_excused,
                "losses_chargeable": i.losses_chargeable, "skips": i.skips,
            }
        return out
