"""The REPS EV selection: a non-spec variant of MRC's sprayer that measures what the spec's SKIP
rotation costs (``ev_select: reps``).

uet-htsim's default load balancer, ``UecMpMixed`` (``htsim/sim/uec_mp.cpp``): reuse the EV of each
ACK that came back unmarked (REPS), otherwise take the next EV of the rotation, passing over EVs
with a congestion penalty. The EV set (``evs``, an :class:`agents.mrc.ev.EVSet`, which imports this
module) keeps the rotation, the states and the queue; this module is the variant's pick and
feedback. The native engine repeats
both (``agents/mrc/core``), checked by the differential tests.
"""
from __future__ import annotations

REPS_ECN_PENALTY = 1
"""Penalty an ECN-echoing SACK adds to its EV (uet-htsim ``UecMpBitmap::processEv``, ``PATH_ECN``)."""
REPS_NACK_PENALTY = 4
"""Penalty a trim before the last hop adds to its EV (``PATH_NACK``; a last-hop trim is a good ACK)."""
REPS_MAX_PENALTY = 15
"""The most penalty an EV holds (``UecMpBitmap::_max_penalty``)."""
REPS_QUEUE_MAX = 4096
"""EVs of good ACKs kept for reuse; when full the oldest is forgotten (uet-htsim's deque is
unbounded; the native engine's ring is not)."""


def feedback(evs, ev: int, penalty: int) -> None:
    """An ACK for ``ev`` on the EV set ``evs`` (uet-htsim ``UecMpMixed::processEv``). ``penalty`` 0:
    a good ACK, so ``ev`` is queued for reuse; else :data:`REPS_ECN_PENALTY` or
    :data:`REPS_NACK_PENALTY` is added to its penalty (at most :data:`REPS_MAX_PENALTY`).
    Ignored for an unknown EV."""
    info = evs.info.get(ev)
    if info is None:
        return
    if penalty == 0:
        evs.reuse.append(ev)
    else:
        info.penalty = min(info.penalty + penalty, REPS_MAX_PENALTY)


def pick(evs, exclude: int | None, alive_since_ns: int) -> int | None:
    """The REPS variant's pick from the EV set ``evs`` (uet-htsim ``UecMpMixed::nextEntropy``): the oldest EV queued
    by a good ACK (:func:`feedback`), so that each path's share follows what it
    delivers unmarked; else the next EV of the seeded rotation, passing over EVs with a
    penalty (the first one passed over loses one point; after as many as there are EVs,
    the next is taken anyway: ``UecMpBitmap::nextEntropy``). Queued EVs no longer usable
    are dropped; one that is ``exclude`` or has not delivered since ``alive_since_ns``
    (:meth:`agents.mrc.ev.EVSet.pick`) stays queued and this pick takes the rotation. SKIP is not consulted.
    None when no EV is usable."""
    info = evs.info
    pickable = evs.PICKABLE
    if alive_since_ns and not any(i.delivered_ts_ns >= alive_since_ns and ev != exclude and i.state in pickable
                                  for ev, i in info.items()):
        alive_since_ns = 0
    q = evs.reuse
    while q:
        ev = q[0]
        i = info[ev]
        if i.state not in pickable:
            q.popleft()
            continue
        if ev == exclude or i.delivered_ts_ns < alive_since_ns:
            break
        q.popleft()
        evs._picks += 1
        evs.reused += 1
        return ev
    n = len(evs.order)
    passes, spent = n, False
    for _ in range(2 * n + 1):
        ev = evs._next_in_rotation()
        i = info[ev]
        if i.state not in pickable or ev == exclude or i.delivered_ts_ns < alive_since_ns:
            continue
        if i.penalty and passes:
            if not spent:
                i.penalty -= 1
                spent = True
            passes -= 1
            continue
        evs._picks += 1
        return ev
    for ev in evs.order:
        if info[ev].state in pickable:
            evs._picks += 1
            return ev
    return None
