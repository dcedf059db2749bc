"""Loss detection for a QP's requester: which transmissions are lost, and which losses are an
EV's failure. The counterpart of aioquic's ``QuicPacketRecovery``, with a narrow interface.

A :class:`LossDetector` is owned by its :class:`agents.mrc.requester.Requester`. It keeps the
per-EV queues of transmissions (``ev_q``: every transmission on an EV, in its per-EV order;
``ev_fresh``: first transmissions, for the per-EV timer), the QP-wide send order
(``sent_order``, MRC only) and the backed-off timers of retransmissions (``timers``). The
requester appends to those queues as it sends (the hot path writes them directly) and calls:

* :meth:`on_retransmit` after each retransmission (its timer and queues);
* :meth:`on_acked` with the EVs whose per-EV acknowledged sequence moved and the latest-sent
  newly acknowledged first transmission (per-EV packet threshold, cross-EV out-of-order
  scan);
* :meth:`on_timer` / :meth:`deadline` (RTO per EV and the mrc.h retry ladder);
* :meth:`charge_ev` for every loss that may be the EV's failure, :meth:`delivered` when a
  transmission is known to have reached the receiver, :meth:`rtt_sample` per echoed RTT.

The detector reports through ``on_lost(tx, now, cause)`` (the requester retransmits and tells
congestion control), ``go_back_n(psn, now, cause)`` (RC) and ``on_error(now, reason)`` (retries
exhausted). Loss causes are :class:`LossCause`; the requester declares losses from NACKs
through :meth:`LossDetector.lose` and :meth:`LossDetector.spend_retry`, so that every
retransmission but a trim's spends one of the PSN's mrc.h retries (:data:`RETRY_SPENT`).
Detection rules (docs/mrc-spec.md, "Reliability"): a transmission is
lost when ``reorder_threshold`` later transmissions on the same EV were acknowledged (only
never-retransmitted PSNs count: their ACK is unambiguous), when enough transmissions sent
after it on any EV were acknowledged (:meth:`ooo_scan`), or when its timer fires: the RFC 6298
RTO (:mod:`agents.mrc.rto`, floored by the QP ``timeout``), restarted per EV by ACKs, then the
linear and exponential retry ladder. ``config.loss_inference`` False (a control) turns the first
two off: only NACKs and timers find losses.
"""
from __future__ import annotations

import enum
import heapq
import logging
from collections import defaultdict, deque

from .ev import EVCause, EVState
from .types import RETRY_EXP_INFINITE, QPAttr, Transport

log = logging.getLogger(__name__)

_INF = float("inf")
_USABLE = (EVState.GOOD, EVState.SKIP)


class LossCause(enum.Enum):
    """Why a transmission was declared lost."""

    EV_THRESHOLD = "ev_threshold"    # reorder_threshold later packets on its EV acknowledged
    OOO = "ooo"                      # later packets on any EV acknowledged (cross-EV scan)
    TIMEOUT = "timeout"              # its retransmission timer fired
    TRIMMED = "trimmed"              # a switch trimmed it (TRIMMED / TRIMMED_LASTHOP NACK)
    NACK = "nack"                    # another NACK (e.g. PSN_OOR_WINDOW)
    SEQ_ERR = "seq_err"              # RC: the responder's go-back-N NAK


STALLED_KEPT = 16
"""Stalled timeouts a QP keeps until a later delivery confirms them (:meth:`LossDetector.charge_ev`):
two per dead EV of a plane of 8, the most a one-packet window loses before one is confirmed."""
CHARGED = frozenset({LossCause.TIMEOUT, LossCause.EV_THRESHOLD, LossCause.OOO})
"""Causes that may count against the EV (untrimmed losses); see :meth:`LossDetector.charge_ev`."""

RETRY_SPENT = frozenset({LossCause.EV_THRESHOLD, LossCause.OOO, LossCause.NACK,
                         LossCause.SEQ_ERR})
"""Loss evidence whose retransmission spends one of the PSN's retries, as a timeout does
(:meth:`LossDetector.spend_retry`).

mrc.h: ``MRC_QP_RETRY_CNT`` "Linear + exponential retry counter" replaces
``IBV_QP_RETRY_CNT`` (``IBV_QP_RNR_RETRY`` is not supported). In IBTA RC that counter is
spent by a local ACK timeout and by a NAK PSN sequence error alike (Linux rxe,
``drivers/infiniband/sw/rxe/rxe_comp.c``: both take the retry path and decrement
``retry_cnt``); only RNR NAKs have their own count. So here a PSN lost again and again by
NACKs or inference reaches ERR too. Trims (TRIMMED, TRIMMED_LASTHOP) spend none: a switch
cut the payload for congestion and the receiver saw the header, the analog of RNR rather
than of a loss. Only timeouts lengthen the back-off
(:meth:`agents.mrc.rto.RttEstimator.backoff_s` takes ``timeouts``)."""


class LossDetector:
    """Loss detection state and rules (module docstring).

    ``qpn``, ``config``, ``transport``: the QP's; ``rtt``: its RTT estimator; ``cc``: its
    congestion controller (read for its fixed base RTT); ``outstanding``: the requester's
    PSN -> transmission map (shared, read only here); ``on_lost``, ``go_back_n``,
    ``on_error``: the callbacks above. ``evs`` and ``attr`` are set by the requester.
    """

    def __init__(self, *, qpn: int, config, transport: Transport, rtt, cc, outstanding,
                 on_lost, go_back_n, on_error):
        self.qpn, self.config, self.transport = qpn, config, transport
        self._rtt, self.cc, self._outstanding = rtt, cc, outstanding
        self._on_lost, self._go_back_n, self.on_error = on_lost, go_back_n, on_error
        self.evs = None
        self.attr = QPAttr()
        # First transmissions per EV in send order (ev -> deque of tx), for the per-EV timer;
        # every transmission per EV as (ev_seq, tx); retransmission timers (deadline, psn, ts).
        self.ev_fresh: defaultdict[int, deque] = defaultdict(deque)
        self.ev_q: defaultdict[int, deque] = defaultdict(deque)
        self.timers: list[tuple[float, int, int]] = []
        # Loss inference across EVs (MRC only): every transmission in send order as
        # (gseq, tx), and the latest-sent unambiguously acknowledged one.
        self.sent_order: deque = deque()
        self.hi_acked_gseq = -1
        self.hi_acked_sent_at = -_INF
        self.hi_acked_at = -_INF          # when hi_acked_gseq last moved (s)
        self.rtt_min_s = _INF             # lowest echoed-timestamp RTT over all EVs
        self.timeouts = 0
        self.loss_retries = 0             # retries spent on RETRY_SPENT evidence
        self.ooo_losses = 0
        self.ev_losses_excused = 0
        self.ev_losses_stalled = 0        # timeouts not charged: nothing sent later had arrived
        self.ev_losses_confirmed = 0      # stalled timeouts charged once something sent later arrived
        self.ev_losses_live = 0           # out-of-order losses not charged: their EV still delivers
        # Stalled timeouts as (stamp at the timeout, ts_ns, ev), oldest first, until a
        # transmission sent after the timeout is known to arrive (:meth:`delivered`); at most
        # STALLED_KEPT (the oldest is forgotten).
        self.stalled: deque = deque()
        # A lost PSN that no usable EV can carry (every EV DENIED or retired): its retry timer
        # as (deadline, psn, ts_ns, timeouts), so that the ladder still runs out to ERR.
        self.no_path: tuple[float, int, int, int] | None = None
        self.no_path_timeouts = 0

    def clear(self) -> None:
        """The QP entered ERR: forget every transmission."""
        self.no_path = None
        self.stalled.clear()
        self.timers.clear()
        self.ev_q.clear()
        self.ev_fresh.clear()
        self.sent_order.clear()

    def on_retransmit(self, tx, seq: int, now: float) -> None:
        """``tx`` was just retransmitted as transmission ``seq`` of its EV at ``now``."""
        if self.config.loss_inference:   # the inference rules' queues (none without inference)
            if self.transport is Transport.MRC:
                self.sent_order.append((tx.gseq, tx))
            self.ev_q[tx.ev].append((seq, tx))
        heapq.heappush(self.timers, (now + self._rtt.backoff_s(tx.timeouts, self.attr.retry_linear_cnt),
                                     tx.psn, tx.ts_ns))

    def on_acked(self, touched, hi_gseq: int, hi_sent_at: float, now: float) -> None:
        """After an ACK: ``touched``, EVs whose ``acked_seq`` moved (walked in the order they moved:
        an ordered dict, so the native twin walks them alike); ``hi_gseq``/``hi_sent_at``,
        the latest-sent newly acknowledged first transmission (or the previous ones).

        Without ``config.loss_inference`` the queues the two rules read stay empty (the
        requester and :meth:`on_retransmit` fill them only with inference on): nothing is
        declared lost here, and ``hi_acked_gseq`` still moves (:meth:`charge_ev` reads it)."""
        if touched and self.config.loss_inference:   # per-EV packet threshold
            ev_q, threshold, infos = self.ev_q, self.config.reorder_threshold, self.evs.info
            for e in touched:
                q = ev_q[e]
                limit = infos[e].acked_seq - threshold
                while q and q[0][0] <= limit:
                    seq, tx = q.popleft()
                    if tx.ev_seq == seq and tx.ev == e and not tx.lost and \
                            not self.lose(tx, now, LossCause.EV_THRESHOLD):   # acked: ev_seq -1
                        return                   # retries exhausted: the QP is in ERR
        if hi_gseq > self.hi_acked_gseq:
            self.hi_acked_gseq, self.hi_acked_sent_at, self.hi_acked_at = hi_gseq, hi_sent_at, now
            self.ooo_scan(now)

    def charge_ev(self, tx, info, now: float, cause: LossCause = LossCause.TIMEOUT) -> None:
        """Charge an untrimmed loss to its EV: ASSUMED_BAD only if the loss persists there.

        A timeout is evidence against its EV only when the QP knows that a
        transmission sent after it, on any EV, arrived (acknowledged, first
        transmissions only). Otherwise the whole QP is waiting, not one path:
        queues that grew after the RTO was set (start-up, where the first
        samples cross idle paths: incast-trim's seed 1 timed out 33 packets
        of 7 QPs in its first 0.25 s, srtt 12 ms against 100-250 ms of
        start-up queue, with no packet dropped anywhere, and retired 9 EVs),
        or every path down, where retiring EVs tells nothing. The packet is
        still retransmitted and the window reacts; ``ev_losses_stalled``
        counts these. Such a timeout is kept (:data:`STALLED_KEPT`) and
        charged once a transmission sent after it fired is known to arrive
        (``ev_losses_confirmed``): with a window of one packet nothing later
        is in flight when a timer fires, so a dead EV was never retired (a
        plane failure stalled a QP for 14 s that way). The same evidence test makes RACK (RFC 8985) mark a
        packet lost only from a later delivery, and F-RTO (RFC 5682) undo a
        timeout that later ACKs show spurious.

        Rule: a loss is excused (congestion, not failure) when a transmission
        sent on the same EV after it is known to have arrived (its stamp
        echoed in a SACK, or it was acknowledged): the path delivers, it
        only dropped from a full queue. Otherwise it extends the EV's run of
        losses since its last delivery, and ``config.ev_loss_run`` losses in
        a row retire the EV. A dead EV loses every packet, so its run grows
        with each packet on it that is detected lost (one spray rotation
        apart); a drop-tail burst on a healthy EV is cut short by the next
        packet on that EV that gets through.

        Measured on :mod:`agents.mrc.sim` (15 kB drop-tail queues, congestion
        only, 4 MB, ``tests/unit/test_mrc_loss.py``): GOOD->ASSUMED_BAD 4 -> 0
        on 4 x 1 Gb/s 1 ms paths (write 36-60 ms -> 21 ms), 12 -> 0 on 8 such
        paths (89 -> 47 ms), 7 -> 1-2 on 8 x 1 Gb/s 100 us paths (tail
        drops: no later packet on the EV exists). ev_loss_run 1, 2 and 3
        gave the same counts there (the excuse rule does the work); the
        default 2 tolerates one unexcused loss, e.g. an EV's last packet of
        a write dropped by a full queue, for one more lost packet (one spray
        rotation) on a dead EV, still retired in ~1.3-1.5 base RTTs.

        An out-of-order loss (:meth:`ooo_scan`) is not charged while its EV
        still delivers: something on it, sent later than all it had
        delivered before, arrived less than :meth:`ooo_guard_s` ago
        (``delivered_at_s``; ``ev_losses_live`` counts these). The cross-EV
        rule reads a packet overtaken on another EV as lost; a path that
        keeps delivering is queueing behind it, not dead, and its own order
        (the per-EV threshold) still finds its drops. When a plane came back
        on leaf-spine-4plane-8-bdp64, its empty paths overtook the 100 ms
        queues a write's first burst had built on the other planes, and a QP
        retired all 12 of their EVs at once, 48 ms after readmission (each
        back 15-30 ms later, cause DELIVERED); 23-34 false retirements per
        run. A dead EV delivers nothing after its last survivor's ACK, so
        its losses are charged as before.
        """
        if info.delivered_ts_ns >= tx.ts_ns:     # it, or a later packet on the EV, arrived
            info.losses_excused += 1
            self.ev_losses_excused += 1
            return
        if cause is LossCause.OOO and now - info.delivered_at_s < self.ooo_guard_s():
            self.ev_losses_live += 1       # the EV still delivers: a queue, not a failure
            return
        if cause is LossCause.TIMEOUT and self.hi_acked_gseq < tx.gseq:
            self.ev_losses_stalled += 1
            if len(self.stalled) == STALLED_KEPT:
                self.stalled.popleft()
            self.stalled.append((int(now * 1e9), tx.ts_ns, tx.ev))
            return
        self._charge_run(tx.ev, tx.ts_ns, info, now, cause)

    def _charge_run(self, ev: int, ts_ns: int, info, now: float, cause: LossCause) -> None:
        """Extend ``ev``'s run of unexcused losses with the transmission stamped ``ts_ns``, found
        by ``cause``; ``config.ev_loss_run`` in a row retire it (:meth:`charge_ev`), the event
        saying how the run was found (:attr:`agents.mrc.ev.EVEvent.loss_cause`)."""
        if info.loss_run_ts_ns < info.delivered_ts_ns:   # a delivery since the last counted loss
            info.loss_run = 0
            info.loss_run_timeout = False
        if ts_ns <= info.loss_run_ts_ns:
            return                                       # counted already (RC rewinds, races)
        info.loss_run += 1
        info.loss_run_ts_ns = ts_ns
        info.loss_run_timeout = info.loss_run_timeout or cause is LossCause.TIMEOUT
        if info.loss_run >= self.config.ev_loss_run:
            found = LossCause.TIMEOUT if info.loss_run_timeout else cause
            if self.evs.apply(ev, EVCause.LOSS, now, loss_cause=found.value) is not EVState.GOOD and \
                    info.state is EVState.ASSUMED_BAD:
                info.loss_run = 0

    def _confirm_stalled(self, ts_ns: int, now: float) -> None:
        """The transmission stamped ``ts_ns`` arrived: every stalled timeout that fired before
        it was sent is now evidence (RACK's rule, RFC 8985: a packet is lost once one sent
        later is delivered), charged in the order the timeouts fired, unless its own EV
        delivered it or a later packet since. Evidence sent only after the timeout, not
        merely after the packet: a packet that sat in a start-up queue arrives before what
        was sent at its timeout, and so is excused instead."""
        due = [e for e in self.stalled if e[0] <= ts_ns]   # split first: charging may add entries
        self.stalled = deque(e for e in self.stalled if e[0] > ts_ns)
        for _, ts, ev in due:
            info = self.evs.info.get(ev)
            if info is None:
                continue
            if info.delivered_ts_ns >= ts:
                info.losses_excused += 1
                self.ev_losses_excused += 1
                continue
            self.ev_losses_confirmed += 1
            self._charge_run(ev, ts, info, now, LossCause.TIMEOUT)

    def _exhausted(self, tx, now: float, cause: LossCause) -> bool:
        """True, with the QP sent to ERR, when ``tx``'s retries (timeouts and
        :data:`RETRY_SPENT` losses together) exceed mrc.h ``retry.linear_cnt +
        retry.exp_cnt`` (``exp_cnt`` 25: never). ``cause``: the loss that spent the last one.
        The reason stays under the native engine's 111 bytes (``MRCN_REASON_BYTES``)."""
        exp = self.attr.retry_exp_cnt
        n = tx.timeouts + tx.loss_retries
        if exp == RETRY_EXP_INFINITE or n <= self.attr.retry_linear_cnt + exp:
            return False
        if tx.loss_retries:
            reason = (f"retry exhausted: PSN {tx.psn} lost {n} times, {tx.timeouts} by timeout, "
                      f"last by {cause.value} (EV {tx.ev})")
        else:
            reason = f"retry exhausted: PSN {tx.psn} timed out {n} times (EV {tx.ev})"
        self.on_error(now, reason)
        return True

    def spend_retry(self, tx, now: float, cause: LossCause) -> bool:
        """Spend one retry of ``tx`` on loss evidence ``cause`` (:data:`RETRY_SPENT`); its
        back-off is unchanged. False if that exhausts its retries (QP now in ERR)."""
        tx.loss_retries += 1
        self.loss_retries += 1
        return not self._exhausted(tx, now, cause)

    def lose(self, tx, now: float, cause: LossCause) -> bool:
        """Declare ``tx`` (not lost yet) lost on evidence ``cause``, spending a retry if
        ``cause`` is in :data:`RETRY_SPENT`; False if the QP went to ERR instead."""
        if cause in RETRY_SPENT and not self.spend_retry(tx, now, cause):
            return False
        self._on_lost(tx, now, cause)
        return True

    def _timeout(self, tx, now: float) -> bool:
        """One timer expiry of ``tx``; False if the retries are exhausted (QP now in ERR)."""
        tx.timeouts += 1
        self.timeouts += 1
        if self._exhausted(tx, now, LossCause.TIMEOUT):
            return False
        info = self.evs.info.get(tx.ev)
        log.info("qpn %d psn %d timed out on ev %d: sent %.1f ms ago, ev last ack %.1f ms ago, "
                 "rto %.1f ms, srtt %.1f ms, rttvar %.1f ms", self.qpn, tx.psn, tx.ev,
                 (now - tx.sent_at) * 1e3, (now - info.last_ack_s) * 1e3 if info else -1,
                 self._rtt.rto_s * 1e3, (self._rtt.srtt_s or 0) * 1e3, self._rtt.rttvar_s * 1e3)
        if self.transport is Transport.RC:
            self._go_back_n(tx.psn, now, LossCause.TIMEOUT)
        else:
            self._on_lost(tx, now, LossCause.TIMEOUT)
        return True

    def on_no_path(self, tx, now: float) -> None:
        """``tx`` is due for retransmission but no EV is usable: time the retry that could not
        be sent as if it had been (mrc.h retry ladder from ``now``), once per retry number.

        A NIC retries a PSN on its timer whether or not a path is left; a retry it cannot
        send is still spent, so an all-DENIED QP reaches ERR ("retry exhausted") instead of
        waiting with no timer."""
        key = (tx.psn, tx.ts_ns, tx.timeouts)
        if self.no_path is not None and self.no_path[1:] == key:
            return
        deadline = now + self._rtt.backoff_s(tx.timeouts, self.attr.retry_linear_cnt)
        self.no_path = (deadline, *key)

    def _fire_no_path(self, now: float) -> bool:
        """The no-path retry timer, if due; False if it exhausted the retries (ERR)."""
        entry = self.no_path
        if entry is None or entry[0] > now:
            return True
        self.no_path = None
        tx = self._outstanding.get(entry[1])
        if tx is None or not tx.lost or tx.ts_ns != entry[2] or tx.timeouts != entry[3]:
            return True
        self.no_path_timeouts += 1
        return self._timeout(tx, now)

    def _ev_head(self, ev: int):
        """Oldest first transmission on ``ev`` still waiting for its ACK (None if none)."""
        q = self.ev_fresh[ev]
        while q:
            tx = q[0]
            if tx.ev_seq >= 0 and not tx.lost and not tx.rtx_count:   # acked: ev_seq -1
                return tx
            q.popleft()
        return None

    def _ev_deadline(self, ev: int, tx) -> float:
        return max(tx.sent_at, self.evs.info[ev].last_ack_s) + self._rtt.rto_s

    def on_timer(self, now: float) -> None:
        """Fire due timers: first transmissions per EV, then backed-off retransmissions.

        A first transmission on EV e times out at max(its send time, e's
        ``last_ack_s``) + RTO: RFC 6298 rule 5.3 ("when an ACK is received that
        acknowledges new data, restart the retransmission timer"), applied per
        EV so that a queue building on a working path is not a timeout while a
        dead EV still is. ``last_ack_s`` is the latest of: the arrival of a SACK
        echoing e (a packet on e just arrived), and send time + SRTT of any
        packet on e newly acknowledged (e delivered it; a late cumulative ACK
        for a packet sent before a failure restarts nothing past it); a retransmission at its send time plus
        the mrc.h retry ladder (:meth:`agents.mrc.rto.RttEstimator.backoff_s`).
        """
        if not self._fire_no_path(now):
            return
        for ev in list(self.ev_fresh):
            while (tx := self._ev_head(ev)) is not None and self._ev_deadline(ev, tx) <= now:
                self.ev_fresh[ev].popleft()
                if not self._timeout(tx, now):
                    return
        timers = self.timers
        outstanding = self._outstanding
        while timers and timers[0][0] <= now:
            _, psn, ts = heapq.heappop(timers)
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                continue
            if not self._timeout(tx, now):
                return
        if self.transport is Transport.MRC:
            self.ooo_scan(now)

    def deadline(self) -> float | None:
        timers = self.timers
        outstanding = self._outstanding
        while timers:
            _, psn, ts = timers[0]
            tx = outstanding.get(psn)
            if tx is None or tx.ts_ns != ts or tx.lost:
                heapq.heappop(timers)
                continue
            break
        t = timers[0][0] if timers else None
        if self.no_path is not None and (t is None or self.no_path[0] < t):
            t = self.no_path[0]
        for ev in self.ev_fresh:
            tx = self._ev_head(ev)
            if tx is not None:
                d = self._ev_deadline(ev, tx)
                if t is None or d < t:
                    t = d
        if self.transport is Transport.MRC:
            d = self._ooo_deadline()
            if d is not None and (t is None or d < t):
                t = d
        return t

    def _ooo_head(self):
        """The first transmission in send order still waiting (stale entries dropped), if
        ``config.ooo_threshold`` transmissions sent after it are acknowledged; else None."""
        q = self.sent_order
        while q:
            g, tx = q[0]
            if tx.gseq != g or tx.ev_seq < 0 or tx.lost:    # resent, acked or lost already
                q.popleft()
                continue
            return tx if g <= self.hi_acked_gseq - self.config.ooo_threshold else None
        return None

    def _ooo_deadline(self) -> float | None:
        """When the first transmission the cross-EV rule waits on is lost by time alone (RACK's
        reordering timer, :meth:`ooo_scan`), or None (none waits, or no RTT sample yet)."""
        tx = self._ooo_head()
        if tx is None:
            return None
        guard = self.ooo_guard_s()
        if guard == _INF:
            return None
        return tx.sent_at + ((self.hi_acked_at - self.hi_acked_sent_at) + guard)

    def ooo_guard_s(self) -> float:
        """The time guard of the cross-EV rule in seconds (inf before any RTT sample).

        ``(max over usable EVs of their smoothed RTT - min RTT) + ooo_time_frac
        * min RTT``. The first term is the reordering that spraying itself
        causes: a packet on the longest (or most queued) path is overtaken by
        packets sent up to that long after it on the shortest one. The second
        is RACK's reordering window, min_RTT / 4 (RFC 8985 section 6.2, step
        4), for jitter the smoothed values hide. RTTs are the echoed
        timestamps (path delay, SACK coalescing excluded).

        min RTT is the lowest sample, raised to the base RTT the congestion
        control was configured with (NSCC's ``base_rtt_s``: the fabric's
        unloaded RTT, a CC-profile parameter) when that is higher. On the
        emulated fabric an idle path's first packets pass HTB's bucket at
        wire speed, so the lowest sample (~2 ms on a 5 Mbit/s k4 path whose
        base RTT is 43.5 ms) counted the queueing every EV shares (the host
        link's) as reordering: a ~50 ms guard, and a dead EV found 76-144 ms
        after a core-link failure, the later ones only by the RTO.
        """
        rmin = self.rtt_min_s
        if rmin == _INF:
            return _INF
        base = getattr(self.cc, "base_rtt_s", None)
        if base is not None and getattr(self.cc, "base_rtt_fixed", False) and base > rmin:
            rmin = base
        hi = rmin
        for info in self.evs.info.values():
            r = info.rtt_srtt_s
            if r is not None and r > hi and info.state in _USABLE:
                hi = r
        return hi - rmin + self.config.ooo_time_frac * rmin

    def ooo_scan(self, now: float) -> None:
        """Infer losses from later transmissions acknowledged on any EV (MRC only).

        A transmission is lost once (1) at least ``config.ooo_threshold``
        transmissions sent after it, on any EV, have been acknowledged
        (the latest-sent acknowledged one is ``ooo_threshold`` or more
        transmissions later in send order), and (2) it was sent at least
        :meth:`ooo_guard_s` before that latest-sent acknowledged one, or
        ``now`` is at least its send time + that one's RTT (its ACK's
        arrival - its send time) + the guard: RACK's reordering timer (RFC
        8985 sections 6.2 step 5 and 6.3), which :meth:`deadline` arms, so
        that the tail of a write lost on a dead EV is found an RTT and a
        guard after it left instead of at the RTO, when no later ACK comes
        to run this scan. Such a loss is charged to its EV as any other
        (:meth:`charge_ev`: excused if its EV has delivered anything sent
        since).
        (1) is UET's out-of-order threshold as uet-htsim models it
        (``UecSrc::runSleek`` in ``htsim/sim/src/protocols/uec.cpp``:
        retransmit from the cumulative ACK once the SACK's out-of-order count
        reaches ``max(min(1.5 * cwnd, maxwnd), 5 packets)``), in the form of
        RFC 9002 section 6.1.1 (largest acknowledged minus the packet >=
        kPacketThreshold); the floor, 5 packets, is uet-htsim's
        ``min_retx_config``. The cwnd-sized part is replaced by (2), a
        RACK-style time condition (RFC 8985): spraying reorders by the spread
        of path RTTs, not by a packet count. Only never-retransmitted
        transmissions serve as the reference (their ACK is unambiguous), and
        retransmissions whose own stamp a SACK echoes (the requester's
        ``_account_acked``); retransmissions are judged like first transmissions, so a lost
        retransmission is found too. Scanning stops at the first
        transmission that is not yet lost: both conditions are monotone in
        send order.
        """
        limit_t = None
        while (tx := self._ooo_head()) is not None:
            if limit_t is None:
                guard = self.ooo_guard_s()
                limit_t = self.hi_acked_sent_at - guard
                wait = (self.hi_acked_at - self.hi_acked_sent_at) + guard
            if tx.sent_at > limit_t and now < tx.sent_at + wait:
                return
            self.sent_order.popleft()
            self.ooo_losses += 1
            if not self.lose(tx, now, LossCause.OOO):
                return

    def rtt_sample(self, info, rtt: float) -> None:
        info.rtt_last_s = rtt
        info.rtt_samples += 1
        if info.rtt_min_s is None or rtt < info.rtt_min_s:
            info.rtt_min_s = rtt
            if rtt < self.rtt_min_s:
                self.rtt_min_s = rtt
        srtt = info.rtt_srtt_s         # RFC 6298's alpha, 1/8, per EV
        info.rtt_srtt_s = rtt if srtt is None else srtt + (rtt - srtt) * 0.125

    def delivered(self, ev: int, ts_ns: int, now: float) -> None:
        """The transmission stamped ``ts_ns`` on EV ``ev`` reached the receiver: acknowledged,
        its stamp echoed, or its header NACKed after a switch trimmed it. Losses on the EV
        sent before it are excused (:meth:`charge_ev`), and an EV retired for a loss run no
        newer than it comes back at once (cause DELIVERED): the run was congestion or
        reordering inferred as loss (out-of-order threshold) before the evidence returned.
        Measured on incast-trim (fat-tree-k4-trim): 3 EVs retired that way in the first
        0.15 s with no packet dropped anywhere. A path that died after ``ts_ns`` is not
        restored: its charged losses were sent later."""
        info = self.evs.info.get(ev)
        if info is None:
            return
        if ts_ns > info.delivered_ts_ns:
            info.delivered_ts_ns = ts_ns
            info.delivered_at_s = now
        if info.state is EVState.ASSUMED_BAD and 0 < info.loss_run_ts_ns <= ts_ns \
                and self.transport is Transport.MRC:
            info.loss_run = 0
            self.evs.apply(ev, EVCause.DELIVERED, now)
        if self.stalled:
            self._confirm_stalled(ts_ns, now)
