"""The mrc.h retry ladder on a fake clock: retry.linear_cnt fixed-interval retries, then
retry.exp_cnt doubling ones (25 = infinite), then ERR."""
from __future__ import annotations

import random

from agents.mrc.qp import QP, connect_pair
from agents.mrc.types import QPAttr, QPConfig, QPState


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
