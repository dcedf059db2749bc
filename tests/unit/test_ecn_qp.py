"""ECN without sockets: the responder's echo, the requester's SKIP, NSCC's ECN cases, the job-spec key."""
from __future__ import annotations

import random

import pytest

from agents.jobspec import JobSpecError, parse_job
from agents.mrc import (EVEvent, EVState, QP, QPAttr, QPConfig, Transport, cc,
                        connect_pair)
from agents.mrc import packet as pk
from agents.channels.qp import qp_config_kwargs

EVS = [0, 1, 2, 3]


def pair(transport=Transport.MRC, **cc_params):
    cfg = QPConfig(transport=transport, sack_every=1, cc_params=cc_params)
    a = QP(1, rng=random.Random(1), config=cfg)
    b = QP(2, rng=random.Random(2), memory=bytearray(64 << 10), config=cfg)
    connect_pair(a, b, EVS, attr=QPAttr(timeout=12))
    return a, b


def one_packet_round_trip(a: QP, b: QP, *, ecn: bool, now: float = 0.001):
    """A sends one packet; B receives it (CE iff ``ecn``); A gets B's SACK. Returns
    (the SACK's parsed fields, the EV the data went on, A's EV events)."""
    a.post_write(wr_id=1, local=bytes(1000), remote_offset=0)
    ((data, ev),) = a.datagrams_to_send(0.0)
    b.receive_datagram(data, now / 2, ecn=ecn)
    ((sack, back_ev),) = b.datagrams_to_send(now / 2)
    assert back_ev == ev                    # the SACK leaves on the EV of its packet
    a.receive_datagram(sack, now)
    events = []
    while (e := a.next_event()) is not None:
        events.append(e)
    return pk.unpack_sack(sack), ev, [e for e in events if isinstance(e, EVEvent)]


def test_ecn_echo_puts_the_ev_in_skip_and_reaches_the_congestion_controller():
    a, b = pair(ecn_capable=True)
    f, ev, events = one_packet_round_trip(a, b, ecn=True)
    assert f[1] & pk.FLAG_ECN_ECHO and f[0] == pk.SackMode.SKIP_ONCE and f[6] == ev
    assert events == []                      # SKIP is internal: not in the event mask
    assert a.evs.info[ev].state is EVState.SKIP and a.stats()["ev_skips"]["ecn"] == 1
    assert a.cc.ecn_count == 1


def test_without_ce_no_echo_and_no_skip():
    a, b = pair(ecn_capable=True)
    f, ev, events = one_packet_round_trip(a, b, ecn=False)
    assert not f[1] & pk.FLAG_ECN_ECHO and f[0] == pk.SackMode.NONE
    assert events == [] and a.evs.info[ev].state is EVState.GOOD and a.cc.ecn_count == 0


def test_rc_echo_reaches_cc_but_has_no_ev_to_skip():
    a, b = pair(Transport.RC, ecn_capable=True)
    f, ev, events = one_packet_round_trip(a, b, ecn=True)
    assert f[1] & pk.FLAG_ECN_ECHO and events == [] and a.cc.ecn_count == 1


def nscc(**kw):
    return cc.create("uet-1.0-nscc", mss_bytes=1000, rate_bps=8e9, base_rtt_s=0.001, **kw)


def test_ecn_capable_nscc_decreases_on_ecn_with_delay_and_not_on_delay_alone():
    # d = 1.5 ms against a 1 ms target: with ECN the multiplicative decrease ...
    c = nscc(ecn_capable=True)
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.0025, ecn=True)
    assert c.md_count == 1 and c.cwnd_bytes == pytest.approx(1.5e6 * (1 - 0.8 * 0.5 / 1.5))
    # d = 3 ms (3x the target) without ECN: the fair increase, no delay-only fallback
    c = nscc(ecn_capable=True)
    c.cwnd_bytes = 500_000
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.004)
    assert c.md_count == 0 and c.cwnd_bytes == pytest.approx(500_000 + 1000 * 1000 / 500_000)
    # the fallback without ECN capability decreases on that delay alone
    c = nscc()
    c.on_packets_acked(now=0.01, acked_bytes=1000, rtt_s=0.004)
    assert c.md_count == 1


def job(qp: dict) -> dict:
    peer = {"rank": 1, "host": "h1", "ecmp_addr": "::1", "evs": [{"ev_id": 0, "address": "::1"}]}
    return {"run_id": "t", "rank": 0, "world": ["h0", "h1"], "host": "h0", "transport": "mrc",
            "control_socket": "/tmp/x.sock", "seed": 1, "sizes": [1024], "iterations": 1,
            "warmup": 0, "bind_addr": "::1", "send_to": [peer], "recv_from": [peer], "qp": qp}


def test_job_spec_ecn_key():
    assert parse_job(job({})).ecn is False
    spec = parse_job(job({"ecn": True, "cc_params": {"rate_bps": 1e9}}))
    assert spec.ecn is True and "ecn" not in spec.qp_config_kwargs()
    assert qp_config_kwargs(spec)["cc_params"] == {"ecn_capable": True, "rate_bps": 1e9}
    QPConfig(**qp_config_kwargs(spec)).validate()
    with pytest.raises(JobSpecError, match=r"qp\.ecn: expected bool, got 1"):
        parse_job(job({"ecn": 1}))


def test_ecn_off_leaves_the_qp_config_as_it_was():
    for qp in ({}, {"ecn": False}, {"cc": "fixed", "cc_params": {"window_bytes": 1 << 20}}):
        spec = parse_job(job(qp))
        assert qp_config_kwargs(spec) == spec.qp_config_kwargs()


def test_explicit_ecn_capable_wins_over_the_ecn_key():
    spec = parse_job(job({"ecn": True, "cc_params": {"ecn_capable": False}}))
    assert qp_config_kwargs(spec)["cc_params"] == {"ecn_capable": False}
