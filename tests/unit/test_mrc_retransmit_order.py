"""docs/conformance.md, "Selective retransmission, oldest first, on another EV" (Python engine):
lost PSNs leave oldest first (lowest PSN), whatever order their losses were found in, before any
new data, each on another EV than the one it was lost on."""

from __future__ import annotations

import random

from agents.mrc import packet as pk
from agents.mrc.loss import LossCause
from agents.mrc.qp import QP, connect_pair
from agents.mrc.types import QPAttr, QPConfig


def test_lost_psns_are_retransmitted_oldest_first_before_new_data_on_other_evs():
    config = QPConfig(cc="fixed", ack_delay_s=0.00005, min_rto_s=0.0)
    a = QP(1, rng=random.Random(1), config=config)
    b = QP(2, rng=random.Random(2), memory=bytearray(1 << 20), config=config)
    connect_pair(a, b, [0, 1, 2, 3], attr=QPAttr(timeout=12))
    size = 8 * a.config.payload_bytes
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    first = [(pk.parse(d), ev) for d, ev in a.datagrams_to_send(0.0)]
    assert len(first) == 8
    base = first[0][0].psn
    sent_on = {p.psn: ev for p, ev in first}
    a.post_write(wr_id=2, local=bytes(size), remote_offset=size)   # new data waiting behind them
    req = a.requester
    for k in (6, 1, 4):   # found lost newest first (e.g. NACKs arriving in that order)
        req._declare_lost(req._outstanding[base + k], 0.001, LossCause.NACK)
    out = [(pk.parse(d), ev) for d, ev in a.datagrams_to_send(0.001)]
    data = [(p, ev) for p, ev in out if isinstance(p, pk.DataPacket)]
    assert [p.psn - base for p, _ in data[:3]] == [1, 4, 6]
    assert all(p.flags & pk.FLAG_RTX and ev != sent_on[p.psn] for p, ev in data[:3])
    assert all(not p.flags & pk.FLAG_RTX and p.psn >= base + 8 for p, _ in data[3:])
