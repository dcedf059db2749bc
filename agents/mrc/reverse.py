"""The responder's reverse EV set: which EV each SACK/NACK leaves on, and its own health view.

docs/mrc-spec.md, "Reliability": "ACKs need working paths too: the responder keeps a small reverse EV set". SACKs and
NACKs rotate over :attr:`ReverseEVs.evs` (the QP's EVs unless named at INIT), each still
echoing the forward EV it acknowledges, so a reverse-only failure costs the SACKs of one
reverse EV instead of every SACK of one forward EV (which made that forward EV look dead).
Health, judged by the responder alone (it has no RTT), on two clocks: packets arrived and
control packets sent:

* a reverse EV is used only while its forward EV delivered one of the last
  :data:`STALE_ROTATIONS` rotations' worth of packets arrived (data, trimmed headers,
  duplicates; one rotation: ``len(evs)`` packets): paths usually fail both ways, and the
  requester stops spraying on an EV it found dead. Counted in arrivals, not in SACKs sent
  (one per up to 8 packets), over 2 rotations, not 4: on the fake clock, a QP of 8 EVs
  doing small writes while 4 of its paths die both ways (30 failure times, the setting of
  ``tests/unit/test_mrc_window.py``) had 54 live EVs retired and 512 timeouts (tail SACKs
  lost on dead reverse EVs time out packets of live EVs); now 20 and 248. One rotation gave
  3 and 218 but slowed a healthy transfer over paths of unequal length by 20%;
* a retransmission (FLAG_RTX) of a PSN already received means the SACKs covering it were
  lost: the reverse EV of the latest SACK is marked bad for :data:`BAD_ROTATIONS` rotations,
  doubling each time it is marked again; duplicates within one rotation after a mark answer
  the same lost SACKs and mark nothing more; the last usable reverse EV is never marked.

With no usable reverse EV a SACK leaves on the forward EV it echoes.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

BAD_ROTATIONS = 16
"""A reverse EV marked bad is skipped for this many rotations of the set (doubling)."""
STALE_ROTATIONS = 2
"""A reverse EV whose forward EV delivered nothing for this many rotations of arrivals is not used."""


class ReverseEVs:
    """Reverse EV choice for one responder (module docstring); ``evs`` is set at INIT."""

    __slots__ = ("evs", "_pos", "_sent", "_bad", "_last", "_strikes", "_mark_at", "_seen",
                 "_rx", "marked_bad")

    def __init__(self):
        self.evs: list[int] = []
        self._pos = 0
        self._sent = 0                       # control packets sent: the clock of the rules
        self._bad: dict[int, int] = {}       # reverse EV -> _sent at which to retry it
        self._last = -1                      # reverse EV of the latest SACK
        self._strikes: dict[int, int] = {}   # reverse EV -> times marked bad
        self._mark_at = -(1 << 30)           # _sent when a reverse EV was last marked
        self._seen: dict[int, int] = {}      # forward EV -> _rx at its last arrival
        self._rx = 0                         # arrivals: the clock of staleness
        self.marked_bad = 0

    def arrived(self, ev: int) -> None:
        """A packet (data, trimmed header or duplicate) arrived on forward EV ``ev``."""
        rx = self._rx = self._rx + 1
        self._seen[ev] = rx

    def choose(self, fwd_ev: int) -> int:
        """The reverse EV for the next SACK/NACK, which echoes forward EV ``fwd_ev``."""
        rs = self.evs
        n = len(rs)
        if not n:
            return fwd_ev
        sent = self._sent = self._sent + 1
        bad, seen, stale = self._bad, self._seen, self._rx - STALE_ROTATIONS * n
        for _ in range(n):
            ev = rs[self._pos]
            self._pos = (self._pos + 1) % n
            if seen.get(ev, stale - 1) >= stale and (not bad or bad.get(ev, 0) <= sent):
                self._last = ev
                return ev
        self._last = fwd_ev
        return fwd_ev

    def ack_lost(self, qpn: int) -> None:
        """A retransmission of a PSN already received: the latest SACK's reverse EV lost it."""
        ev, bad, sent, rs = self._last, self._bad, self._sent, self.evs
        if ev < 0 or bad.get(ev, 0) > sent or sent - self._mark_at < len(rs):
            return
        self._mark_at = sent
        if ev not in rs or sum(1 for e in rs if bad.get(e, 0) <= sent) <= 1:
            return
        strikes = self._strikes[ev] = min(self._strikes.get(ev, 0) + 1, 16)
        bad[ev] = sent + (BAD_ROTATIONS << (strikes - 1)) * len(rs)
        self.marked_bad += 1
        log.debug("qpn %d: reverse EV %d marked bad (ACKs lost)", qpn, ev)

    def state(self) -> tuple:
        """Everything that decides the next choice (tests compare two responders)."""
        return (list(self.evs), self._pos, self._sent, dict(self._bad), self._last,
                dict(self._strikes), self._mark_at, dict(self._seen), self._rx, self.marked_bad)
