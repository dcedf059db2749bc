"""The mrc.h retry ladder on a fake clock: retry.linear_cnt fixed-interval retries, then
retry.exp_cnt doubling ones (25 = infinite), then ERR. Retransmissions on loss evidence (a
NACK other than a trim, the per-EV threshold, the out-of-order scan, RC's SEQ_ERR) spend the
same per-PSN retries without lengthening the back-off; trims spend none.

tests/unit/test_native_qp_unit.py runs every test here on each engine (``QP`` swapped)."""
from __future__ import annotations

import random

import pytest

from agents.mrc import packet as pk
from agents.mrc.qp import QP, connect_pair
from agents.mrc.types import QPAttr, QPConfig, QPError, QPState, Transport, WCStatus, WorkCompletion


def cfg():
    return QPConfig(cc="fixed", ack_delay_s=0.00005, min_rto_s=0.0)


def retry_times(linear, exp, *, limit=40):
    """Send one packet into a dead path; return (send times, ERR time) in units of the RTO."""
    a = QP(1, rng=random.Random(1), config=cfg())
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 16), config=cfg())
    connect_pair(a, b, [0], attr=QPAttr(timeout=10, retry_linear_cnt=linear, retry_exp_cnt=exp))
    rto = a.rto_s
    a.post_write(wr_id=1, local=bytes(100), remote_offset=0)
    sent = [0.0 for _ in a.datagrams_to_send(0.0)]
    err = None
    for _ in range(limit):
        t = a.get_timer()
        if t is None:
            break
        a.handle_timer(t)
        if a.state is QPState.ERR:
            err = t
            break
        sent += [t for _ in a.datagrams_to_send(t)]
    return [round(s / rto, 6) for s in sent], None if err is None else round(err / rto, 6)


def test_retry_ladder_linear_then_doubling():
    """linear_cnt 3 retries each timed by one RTO, then exp_cnt 2 retries timed 2, 4 RTOs."""
    sent, err = retry_times(3, 2)
    assert sent == [0, 1, 2, 3, 4, 6]
    assert err == 10


def test_retry_ladder_without_linear_retries():
    sent, err = retry_times(0, 2)
    assert sent == [0, 1, 3]
    assert err == 7


def test_retry_exp_cnt_25_never_gives_up():
    sent, err = retry_times(1, 25, limit=40)
    assert err is None and len(sent) > 30


def _nack(p, reason) -> bytes:
    """The NACK a responder would send for data packet ``p`` (to QPN 1)."""
    return pk.encode(pk.NackPacket(1, p.psn, p.ev, p.timestamp_ns, reason))


def nacked_then_dead(linear, exp, nacks, *, reason=pk.NackReason.PSN_OOR_WINDOW, limit=60):
    """One packet on two EVs: its first ``nacks`` transmissions are NACKed (``reason``) at once,
    later ones lost silently. Returns (send times and ERR time in RTOs, stats, events)."""
    a = QP(1, rng=random.Random(1), config=cfg())
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 16), config=cfg())
    connect_pair(a, b, [0, 1], attr=QPAttr(timeout=10, retry_linear_cnt=linear, retry_exp_cnt=exp))
    rto = a.rto_s
    a.post_write(wr_id=1, local=bytes(100), remote_offset=0)
    t, sent, err = 0.0, [], None
    for _ in range(limit):
        out = [pk.parse(d) for d, _ in a.datagrams_to_send(t)]
        sent += [t for _ in out]
        nacked = False
        for p in out:
            if nacks:
                nacks, nacked = nacks - 1, True
                a.receive_datagram(_nack(p, reason), t)
        if a.state is QPState.ERR:
            err = t
            break
        if nacked:
            continue                                  # the retransmission goes at once
        t = a.get_timer()
        if t is None:
            break
        a.handle_timer(t)
        if a.state is QPState.ERR:
            err = t
            break
    events = []
    while (e := a.next_event()) is not None:
        events.append(e)
    return [round(s / rto, 6) for s in sent], None if err is None else round(err / rto, 6), \
        a.stats(), events


def test_nack_losses_spend_the_retries_without_lengthening_the_backoff():
    """linear 3, exp 2: two NACKed sends spend two of the five retries at once; the dead path
    then times the next ones by one RTO each (the ladder's own position: 0 timeouts so far)
    and ERR comes at the fourth timeout, 6 losses in all (it was sends at 1, 2, 3, 4, 6 RTOs
    more and ERR at 10: NACKed retransmissions were free)."""
    sent, err, stats, events = nacked_then_dead(3, 2, 2)
    assert sent == [0, 0, 0, 1, 2, 3]
    assert err == 4
    assert stats["loss_retries"] == 2 and stats["timeouts"] == 4
    errors = [e for e in events if isinstance(e, QPError)]
    assert len(errors) == 1
    assert errors[0].reason == "retry exhausted: PSN 0 lost 6 times, 4 by timeout, last by timeout (EV 1)"
    assert [(e.wr_id, e.status) for e in events if isinstance(e, WorkCompletion)] == \
        [(1, WCStatus.RETRY_EXC_ERR)]


@pytest.mark.parametrize("reason", [pk.NackReason.PSN_OOR_WINDOW, pk.NackReason.NO_BITMAP])
def test_nacks_alone_exhaust_the_retries(reason):
    """A PSN NACKed on every send reaches ERR after 1 + linear_cnt + exp_cnt sends, at once
    (it used to be resent forever, the QP never in ERR)."""
    sent, err, stats, events = nacked_then_dead(3, 2, 100, reason=reason)
    assert sent == [0] * 6 and err == 0
    assert stats["loss_retries"] == 6 and stats["timeouts"] == 0
    reason_text = next(e.reason for e in events if isinstance(e, QPError))
    assert reason_text.startswith("retry exhausted: PSN 0 lost 6 times, 0 by timeout, last by nack (EV ")
    assert [(e.wr_id, e.status) for e in events if isinstance(e, WorkCompletion)] == \
        [(1, WCStatus.RETRY_EXC_ERR)]


@pytest.mark.parametrize("reason", [pk.NackReason.TRIMMED, pk.NackReason.TRIMMED_LASTHOP])
def test_trim_nacks_spend_no_retry(reason):
    """A trim is congestion (the receiver saw the header), not a fault: resent on every trim
    NACK past the retry limit, no ERR; the ladder is untouched for what follows."""
    sent, err, stats, _ = nacked_then_dead(3, 2, 20, reason=reason)
    assert sent[:21] == [0] * 21 and stats["loss_retries"] == 0
    assert sent[21:] == [1, 2, 3, 4, 6] and err == 10     # then the dead-path ladder, whole


def stream_losing_one_psn(linear, exp, *, victim=0, transport=Transport.MRC, seq_err=False,
                          steps=60):
    """A steady stream (4 packets every ms, 4 EVs; RC: one) over a 0.2 ms path whose SACKs
    come back 0.2 ms later; every transmission of PSN ``victim`` is dropped. Later packets are
    acknowledged long before the RTO (16.8 ms), so the victim is found lost by the per-EV
    threshold or the out-of-order scan (RC: ``seq_err``, the test NAKs SEQ_ERR at each burst).
    Returns (the victim's send count, stats, events, steps run)."""
    c = QPConfig(cc="fixed", ack_delay_s=0.00005, min_rto_s=0.0, payload_bytes=1024,
                 transport=transport)
    a = QP(1, rng=random.Random(1), config=c)
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 18), config=c)
    connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=14, retry_linear_cnt=linear,
                                                retry_exp_cnt=exp))
    victim_sends, events = 0, []
    for k in range(steps):
        now = k * 0.001
        a.post_write(wr_id=k, local=bytes(4096), remote_offset=(k % 64) * 4096)
        t = a.get_timer()
        if t is not None and t <= now:
            a.handle_timer(now)
        ev = None
        for data, _ in a.datagrams_to_send(now):
            p = pk.parse(data)
            if isinstance(p, pk.DataPacket) and p.psn == victim:
                victim_sends += 1
                ev = p.ev
                continue
            b.receive_datagram(data, now + 0.0002)
        back = [d for d, _ in b.datagrams_to_send(now + 0.0002)]
        b.handle_timer(now + 0.0003)
        back += [d for d, _ in b.datagrams_to_send(now + 0.0003)]
        if seq_err and ev is not None:
            back.append(pk.encode(pk.NackPacket(1, victim, ev, 0, pk.NackReason.SEQ_ERR)))
        for d in back:
            a.receive_datagram(d, now + 0.0004)
        while (e := a.next_event()) is not None:
            events.append(e)
        if a.state is QPState.ERR:
            return victim_sends, a.stats(), events, k
    return victim_sends, a.stats(), events, steps


def test_a_psn_lost_again_and_again_by_inference_reaches_err():
    """Losses inferred from later ACKs (per-EV threshold, out-of-order scan) spend the PSN's
    retries: 1 + 3 + 2 sends, then ERR with RETRY_EXC_ERR for its write and WR_FLUSH_ERR for
    the rest, no timeout involved (it used to be resent every millisecond forever)."""
    sends, stats, events, k = stream_losing_one_psn(3, 2)
    assert sends == 6 and k < 20
    assert stats["state"] == "ERR" and stats["timeouts"] == 0 and stats["loss_retries"] == 6
    reason = next(e.reason for e in events if isinstance(e, QPError))
    assert reason.startswith("retry exhausted: PSN 0 lost 6 times, 0 by timeout, last by ")
    statuses = [(e.wr_id, e.status) for e in events if isinstance(e, WorkCompletion)
                and e.status is not WCStatus.SUCCESS]
    assert statuses[0] == (0, WCStatus.RETRY_EXC_ERR)
    assert {s for _, s in statuses[1:]} == {WCStatus.WR_FLUSH_ERR}


def test_exp_cnt_25_lets_inferred_losses_retry_forever():
    """Past the largest finite limit (1 + 7 + 24 sends) and still in RTS."""
    sends, stats, events, k = stream_losing_one_psn(1, 25, steps=80)
    assert k == 80 and sends > 32 and stats["state"] == "RTS"
    assert stats["loss_retries"] in (sends - 1, sends)   # the last loss may not be resent yet


def test_rc_seq_err_naks_spend_the_nakd_psns_retries():
    """RC: each SEQ_ERR NAK for the PSN the responder waits for is one retry of that PSN (as
    IBTA's retry_cnt, Linux rxe: rxe_comp.c); the PSNs after it, resent by go-back-N, spend
    none."""
    sends, stats, events, k = stream_losing_one_psn(2, 1, transport=Transport.RC, seq_err=True)
    assert sends == 4 and k < 20
    assert stats["state"] == "ERR" and stats["timeouts"] == 0 and stats["loss_retries"] == 4
    reason = next(e.reason for e in events if isinstance(e, QPError))
    assert reason == "retry exhausted: PSN 0 lost 4 times, 0 by timeout, last by seq_err (EV 0)"


def _denied_after_loss(linear, exp, *, restore_at_rto=None, limit=40):
    """Send a write into a dead network, then DENY every EV (a controller's act): the lost
    PSNs have no path. Returns (the QP, ERR time in RTOs or None, completions)."""
    from agents.mrc.ev import EVState
    from agents.mrc.types import WorkCompletion
    a = QP(1, rng=random.Random(1), config=cfg())
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 16), config=cfg())
    connect_pair(a, b, [0, 1], attr=QPAttr(timeout=10, retry_linear_cnt=linear, retry_exp_cnt=exp))
    rto = a.rto_s
    a.post_write(wr_id=1, local=bytes(3000), remote_offset=0)
    assert list(a.datagrams_to_send(0.0))            # lost: never handed to b
    for ev in (0, 1):
        a.set_ev_state(ev, EVState.DENIED, 0.0)
    err, restored, done = None, False, []
    for _ in range(limit):
        t = a.get_timer()
        if restore_at_rto is not None and not restored and (t is None or t >= restore_at_rto * rto):
            t = restore_at_rto * rto
            a.set_ev_state(1, EVState.GOOD, t)
            restored = True
        if t is None:
            break
        a.handle_timer(t)
        if a.state is QPState.ERR:
            err = round(t / rto, 6)
            break
        for data, _ in a.datagrams_to_send(t):       # after the restore the path works
            b.receive_datagram(data, t)
        for data, _ in b.datagrams_to_send(t):
            a.receive_datagram(data, t)
        while (e := a.next_event()) is not None:
            if isinstance(e, WorkCompletion):
                done.append(e)
        if done:
            break
    return a, err, done


def test_all_denied_qp_runs_the_retry_ladder_to_err():
    """Every EV DENIED with lost PSNs queued: the retries that cannot be sent are still timed
    on the ladder, and the QP reaches ERR when they run out (it used to wait with no timer)."""
    a, err, done = _denied_after_loss(3, 2)
    assert err == 10 and not done                     # the dead-path ladder: ERR at 10 RTOs
    assert a.stats()["no_path_timeouts"] == 5


def test_all_denied_qp_resumes_when_an_ev_comes_back():
    a, err, done = _denied_after_loss(3, 2, restore_at_rto=2.5)
    assert err is None and a.state is QPState.RTS
    assert [d.wr_id for d in done] == [1]
