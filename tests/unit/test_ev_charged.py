"""Per-EV ``charged`` (issue 46): the losses of a cause the QP may charge to an EV, on both engines.

``lost`` counts every loss declared on an EV; ``charged`` (:attr:`agents.mrc.ev.EVInfo.losses_chargeable`,
``charged`` in :meth:`agents.mrc.ev.EVSet.sample_rows` and the agents' ``ev_stats``) only those of a
cause in :data:`agents.mrc.loss.CHARGED`: a retransmission timeout, or a loss inferred from later
packets acknowledged (per EV or across EVs). A trimmed packet (its header crossed the path) and a
NACKed one (PSN_OOR_WINDOW: the receiver's window) are not evidence against the path. The
controller's drop rate (:meth:`testbed.controller.policy.Connection.drop_rate`) reads ``charged``
when the agents report it; the last test feeds it what an agent sends.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.agent import EV_STATS_KEYS, Agent
from agents.mrc import packet as pk
from agents.mrc.qp import connect_pair
from agents.mrc.sim import MultipathNetwork, PathSpec
from agents.mrc.types import QPAttr, QPConfig, QPState
from agents.protocol import TO_CONTROLLER, LineFramer, encode
from testbed.controller.policy import CONFIRM_S, DROP_RATE, Controller
from tests.unit.qp_diff import make_qp
from tests.unit.test_controller_evidence import connection

ENGINES = ["python", "native"]


def pair(engine: str, evs=(0, 1), **kw):
    """QP a (sender) and b on ``evs`` with a fixed window; ``kw`` overrides QPConfig keywords."""
    cfg = QPConfig(**{**dict(cc="fixed", ack_delay_s=0.00005, min_rto_s=0.0), **kw})
    a = make_qp(engine, 1, seed=1, memory=None, config=cfg)
    b = make_qp(engine, 2, seed=2, memory=bytearray(1 << 20), config=cfg)
    connect_pair(a, b, list(evs), attr=QPAttr(timeout=10, retry_linear_cnt=3, retry_exp_cnt=2))
    return a, b


def counts(qp) -> dict:
    """EV -> (lost, charged) from the sample rows, checked against stats()."""
    rows = {r["ev_id"]: (r["lost"], r["charged"]) for r in qp.evs.sample_rows()}
    st = qp.stats()["evs"]
    assert rows == {ev: (s["packets_lost"], s["losses_chargeable"]) for ev, s in st.items()}
    return rows


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("reason", [pk.NackReason.TRIMMED, pk.NackReason.TRIMMED_LASTHOP,
                                    pk.NackReason.PSN_OOR_WINDOW])
def test_a_nacked_loss_is_lost_not_charged_and_its_timeout_is_both(engine, reason):
    """One packet NACKed (a trim or PSN_OOR_WINDOW): ``lost`` 1 on its EV, ``charged`` 0. Its
    retransmission is then lost silently and times out: ``lost`` and ``charged`` 1 on that EV."""
    a, _ = pair(engine)
    a.post_write(wr_id=1, local=bytes(100), remote_offset=0)
    [(data, ev)] = a.datagrams_to_send(0.0)
    p = pk.parse(data)
    a.receive_datagram(pk.encode(pk.NackPacket(1, p.psn, p.ev, p.timestamp_ns, reason)), 0.0001)
    assert counts(a) == {ev: (1, 0), 1 - ev: (0, 0)}
    [(_, ev2)] = a.datagrams_to_send(0.0001)       # the retransmission, never delivered
    for _ in range(10):                            # a SKIP's end may come first
        if a.stats()["timeouts"]:
            break
        a.handle_timer(a.get_timer())
    assert a.stats()["timeouts"] == 1 and a.state is QPState.RTS
    want = {ev: (1, 0), 1 - ev: (0, 0)}
    lost, charged = want[ev2]
    want[ev2] = (lost + 1, charged + 1)
    assert counts(a) == want


@pytest.mark.parametrize("engine", ENGINES)
def test_an_inferred_loss_is_lost_and_charged(engine):
    """The first of 8 packets on 2 EVs never arrives; the SACKs for the rest find it lost (the
    per-EV threshold, one later packet on its EV): ``lost`` and ``charged`` 1, no timeout."""
    a, b = pair(engine, reorder_threshold=1, sack_every=1)
    size = 8 * a.config.payload_bytes
    a.post_write(wr_id=1, local=bytes(size), remote_offset=0)
    out = a.datagrams_to_send(0.0)
    victim = out[0][1]
    for data, _ in out[1:]:
        b.receive_datagram(data, 0.0005)
    for data, _ in b.datagrams_to_send(0.0005):
        a.receive_datagram(data, 0.001)
    assert a.stats()["timeouts"] == 0
    assert counts(a) == {victim: (1, 1), 1 - victim: (0, 0)}


def run_reporting(engine: str, paths, *, report_s: float, until: float):
    """A 4 MiB-a-time write from a to b over ``paths`` (EVs 0, 1) on the fake clock; every
    ``report_s`` the ``ev_stats`` event an agent sends of a's EVs (:meth:`Agent._ev_stats` on
    a's sample rows), encoded and decoded as on the control socket. Returns the events."""
    cfg = QPConfig(cc="fixed", cc_params={"window_bytes": 64 * 1024.0}, min_rto_s=0.0,
                   probe_interval_s=0.01, probe_timeout_s=0.006)
    a = make_qp(engine, 1, seed=1, memory=None, config=cfg)
    b = make_qp(engine, 2, seed=2, memory=bytearray(4 << 20), config=cfg)
    connect_pair(a, b, [0, 1], attr=QPAttr(timeout=12, retry_linear_cnt=7, retry_exp_cnt=25))
    net = MultipathNetwork(a, b, paths, seed=3)
    sent: list = []
    agent = SimpleNamespace(spec=SimpleNamespace(transport="mrc", agent=0), wall=lambda t: t,
                            send=sent.append)
    framer = LineFramer(TO_CONTROLLER)
    events, t, wr = [], 0.0, 0
    while t < until:
        if a.idle:
            wr += 1
            a.post_write(wr_id=wr, local=bytes(4 << 20), remote_offset=0)
        t += report_s
        net.run(until=t)
        while a.next_event() is not None:
            pass
        flows = [{"peer": "h1", "dir": "tx", "evs": a.evs.sample_rows()}]
        Agent._ev_stats(agent, flows, t)
        events += framer.feed(b"".join(encode(m) for m in sent))
        sent.clear()
    return events


@pytest.mark.parametrize("engine", ENGINES)
def test_the_controller_reads_charged_from_an_agents_ev_stats(engine):
    """EV 0's link runs at half EV 1's rate behind a 2-packet queue that trims at the last hop:
    most of its losses are trims (``lost``, not ``charged``; a last-hop trim is no SKIP), a few
    are its queue's reordering inferred as loss (``charged``, under the drop rate). EV 1 drops
    20% (a gray failure: every loss inferred or timed out, ``charged``). Fed the ``ev_stats`` an
    agent sends (every key of :data:`agents.agent.EV_STATS_KEYS`), the replace policy swaps EV 1
    only. With ``charged`` stripped (an agent that does not report it) EV 0's trims reach the
    drop rate too. Over the run (python, seed 3): EV 0 8,359 lost and 252 charged of 16,037
    first transmissions, EV 1 4,789 and 4,789 of 19,445."""
    paths = [PathSpec(5e7, 0.001, queue_bytes=2 * 4096, trim=True, trim_lasthop=True),
             PathSpec(1e8, 0.001, loss=0.2)]
    events = run_reporting(engine, paths, report_s=0.05, until=3.0)
    assert all(set(e["ev_id"] for e in ev.evs) == {0, 1} and
               all(set(r) == set(EV_STATS_KEYS) for r in ev.evs) for ev in events)
    last = {r["ev_id"]: r for r in events[-1].evs}
    first = {e: r["sent"] - r["rtx"] for e, r in last.items()}
    assert last[0]["lost"] >= 10 * DROP_RATE * first[0] > last[0]["charged"] * 10 > 0
    assert last[0]["skips"] == 0
    assert last[1]["charged"] == last[1]["lost"] >= 3 * DROP_RATE * first[1]

    def decide(evs_of) -> list:
        c = Controller([connection(0, "h1")], "replace")
        for ev in events:
            ev = type(ev)(**{**ev.as_dict(), "evs": evs_of(ev)}) if evs_of else ev
            c.on_event(ev, ev.t)
            c.on_timer(ev.t)
        c.on_timer(events[-1].t + CONFIRM_S)
        # no agent acknowledges the commands here: their time-outs ("failed") are left out
        return sorted({(d["ev_id"], d["decision"]) for d in c.decisions if d["decision"] != "failed"})

    assert decide(None) == [(1, "replace")]
    without = decide(lambda ev: [{k: v for k, v in r.items() if k != "charged"} for r in ev.evs])
    assert {e for e, _ in without} == {0, 1}, without
