"""QP end to end over the deterministic multipath simulator, plus unit-level QP behaviour."""
import random

import pytest

from agents.mrc.ev import EVEvent, EVState
from agents.mrc.qp import QP, connect_pair
from agents.mrc.sim import MultipathNetwork, PathSpec
from agents.mrc.types import (QPAttr, QPConfig, QPError, QPState, QPStateError, Transport,
                              WCOpcode, WCStatus, WorkCompletion)

DELAY_S = 0.001
BASE_RTT_S = 2 * DELAY_S
SIZE = 8 << 20
# timeout 12 -> 4.19 ms; time_scale 1.5 -> RTO 6.3 ms ~ 3 base RTTs (queueing up to 1 RTT is
# NSCC's target, so the RTO must sit above 2 RTT).
ATTR = QPAttr(timeout=12, mpr=16, mpr_dest=16, retry_linear_cnt=3, retry_exp_cnt=2)


def config(transport=Transport.MRC, n_paths=4, **kw):
    base = dict(transport=transport, min_rto_s=0.0, time_scale=1.5, cc="uet-1.0-nscc",
                cc_params=dict(rate_bps=n_paths * 1e9, base_rtt_s=BASE_RTT_S),
                probe_timeout_s=3 * BASE_RTT_S, probe_interval_s=5 * BASE_RTT_S)
    base.update(kw)
    return QPConfig(**base)


def pair(cfg, evs, size=SIZE, seed=1, ev_min_active=2, attr=ATTR):
    a = QP(1, rng=random.Random(seed), config=cfg)
    b = QP(2, rng=random.Random(seed + 1), memory=bytearray(size), config=cfg)
    connect_pair(a, b, evs, attr=attr, ev_min_active=ev_min_active)
    return a, b


class Collector:
    def __init__(self, *qps):
        self.qps = qps
        self.events = {qp.qpn: [] for qp in qps}

    def drain(self):
        for qp in self.qps:
            while (e := qp.next_event()) is not None:
                self.events[qp.qpn].append(e)

    def of(self, qp, kind):
        self.drain()
        return [e for e in self.events[qp.qpn] if isinstance(e, kind)]


def payload(size, seed=0):
    return random.Random(seed).randbytes(size)


def transfer(paths, transport=Transport.MRC, evs=(0, 1, 2, 3), seed=1, until=5.0, **cfg):
    a, b = pair(config(transport, **cfg), evs, seed=seed)
    net = MultipathNetwork(a, b, paths, ev_ids=[0, 1, 2, 3][:len(paths)], seed=seed)
    src = payload(SIZE, seed)
    a.post_write(wr_id=42, local=src, remote_offset=0)
    col = Collector(a, b)
    progress = {"last_t": 0.0, "cum": 0, "gap": 0.0}

    def observe(now):
        if b.responder.rx_cum_psn != progress["cum"]:
            progress["gap"] = max(progress["gap"], now - progress["last_t"])
            progress["last_t"], progress["cum"] = now, b.responder.rx_cum_psn

    def done():
        return bool(col.of(a, WorkCompletion) or col.of(a, QPError))

    net.run(stop=done, until=until, observer=observe)
    return a, b, net, col, src, progress


def assert_complete(a, b, col, src):
    wcs = col.of(a, WorkCompletion)
    assert [(w.wr_id, w.status, w.byte_len) for w in wcs] == [(42, WCStatus.SUCCESS, SIZE)]
    assert b.responder.memory.tobytes() == src
    assert a.stats()["inflight_bytes"] == 0


def test_8mib_write_clean_network():
    a, b, net, col, src, _ = transfer([PathSpec(1e9, DELAY_S)] * 4)
    assert_complete(a, b, col, src)
    assert a.requester.rtx_packets == 0 and b.responder.rx_duplicates == 0
    sent = [v["packets_sent"] for v in a.stats()["evs"].values()]
    assert min(sent) > 0.2 * sum(sent)          # sprayed over all four EVs
    # line rate: 8 MiB over 4 x 1 Gb/s is ~17 ms plus the window ramp.
    assert net.now < 3 * (SIZE * 8 / 4e9) + 10 * BASE_RTT_S


def test_8mib_write_one_percent_loss():
    a, b, net, col, src, _ = transfer([PathSpec(1e9, DELAY_S, loss=0.01)] * 4)
    assert_complete(a, b, col, src)
    assert a.requester.rtx_packets > 0
    # full-size packets except a write's last one, so the bytes are the packets times the payload
    payload = a.config.payload_bytes
    assert (a.requester.rtx_packets - 1) * payload <= a.stats()["retransmitted_bytes"] <= a.requester.rtx_packets * payload
    assert sum(c["dropped_loss"] for c in net.counters().values()) > 0


def test_8mib_write_reordering_and_duplicates():
    # paths of unequal delay reorder across EVs; a few packets also overtake within a path.
    paths = [PathSpec(1e9, DELAY_S * (1 + i / 10), reorder=0.02, reorder_delay_s=DELAY_S / 5,
                      duplicate=0.05) for i in range(4)]
    a, b, net, col, src, _ = transfer(paths)
    assert_complete(a, b, col, src)
    assert b.responder.rx_duplicates > 0 and b.responder.rx_ooo > 0


def test_dead_path_mrc_fails_over_and_recovers_the_ev():
    t_down, t_up = 0.005, 0.060
    paths = [PathSpec(1e9, DELAY_S)] * 4
    paths[1] = PathSpec(1e9, DELAY_S, down=((t_down, t_up),))
    a, b, net, col, src, progress = transfer(paths)
    assert_complete(a, b, col, src)
    assert progress["gap"] <= 5 * BASE_RTT_S, progress
    ev_events = col.of(a, EVEvent)
    bad = [e for e in ev_events if e.ev == 1 and e.new is EVState.ASSUMED_BAD]
    assert bad and t_down <= bad[0].time <= t_down + 2 * a.rto_s
    # keep the clock running: background probes bring EV 1 back once the path returns.
    net.run(stop=lambda: bool([e for e in col.of(a, EVEvent)
                               if e.ev == 1 and e.new is EVState.GOOD]), until=t_up + 0.2)
    good = [e for e in col.of(a, EVEvent) if e.ev == 1 and e.new is EVState.GOOD]
    assert good and good[0].time >= t_up
    assert a.evs.info[1].state is EVState.GOOD
    assert all(e.ev == 1 for e in ev_events)     # the healthy EVs were never retired


def test_probes_wait_for_the_path_rtt_not_the_2ms_example():
    """Path RTT 40 ms, 20x mrc_ctl's 2 ms probe timeout (the QPConfig default): probes must
    still restore a revived EV, and a dead EV is probed about once per RTO, not every 5 ms."""
    delay, t_down, t_up = 0.020, 0.1, 1.0
    paths = [PathSpec(1e8, delay)] * 4
    paths[1] = PathSpec(1e8, delay, down=((t_down, t_up),))
    cfg = QPConfig(transport=Transport.MRC, min_rto_s=0.0, cc="uet-1.0-nscc",
                   cc_params=dict(rate_bps=4e8, base_rtt_s=2 * delay))
    assert cfg.probe_timeout_s < 2 * delay
    a, b = pair(cfg, [0, 1, 2, 3], size=64 << 20)
    net = MultipathNetwork(a, b, paths, ev_ids=[0, 1, 2, 3], seed=3)
    a.post_write(wr_id=1, local=payload(64 << 20), remote_offset=0)
    col = Collector(a, b)

    def ev1_back():
        return any(e.ev == 1 and e.new is EVState.GOOD for e in col.of(a, EVEvent))

    net.run(stop=ev1_back, until=t_up + 1.0)
    bad = [e for e in col.of(a, EVEvent) if e.ev == 1 and e.new is EVState.ASSUMED_BAD]
    good = [e for e in col.of(a, EVEvent) if e.ev == 1 and e.new is EVState.GOOD]
    assert bad and good, "EV 1 must go ASSUMED_BAD and come back"
    assert t_up <= good[0].time <= t_up + 4 * a.rto_s + 3 * cfg.probe_interval_s
    assert a.probe_timeout_s >= 2 * delay
    # while down (~0.9 s) at most one probe per RTO (>= 40 ms) plus the k successes after
    assert a.evs.info[1].probes_sent <= (t_up - t_down) / (2 * delay) + cfg.probe_successes + 2


def test_rc_baseline_completes_on_a_clean_path():
    a, b, net, col, src, _ = transfer([PathSpec(1e9, DELAY_S)] * 4, Transport.RC, evs=[2],
                                      n_paths=1)
    assert_complete(a, b, col, src)
    assert set(a.stats()["evs"]) == {2}


def test_rc_go_back_n_under_loss():
    a, b, net, col, src, _ = transfer([PathSpec(1e9, DELAY_S, loss=0.002)] * 4, Transport.RC,
                                      evs=[0], n_paths=1)
    assert_complete(a, b, col, src)
    assert a.requester.rtx_packets > 0
    assert b.responder.rx_ooo == 0                        # RC never accepts out of order


def test_rc_pinned_to_dead_path_stalls_then_errs():
    t_down = 0.005
    paths = [PathSpec(1e9, DELAY_S)] * 4
    paths[1] = PathSpec(1e9, DELAY_S, down=((t_down, 100.0),))
    a, b, net, col, src, _ = transfer(paths, Transport.RC, evs=[1], n_paths=1, until=10.0)
    errors = col.of(a, QPError)
    assert len(errors) == 1 and a.state is QPState.ERR
    wcs = col.of(a, WorkCompletion)
    assert [w.status for w in wcs] == [WCStatus.RETRY_EXC_ERR]
    # the retry ladder: the first RTO, 3 linear RTOs, then 2 exponential ones (2x, 4x), then
    # give up; the PSN that gives up was sent at most one RTT before the failure.
    ladder = a.rto_s * (1 + 3 + 2 + 4)
    assert t_down + ladder - 2 * DELAY_S <= errors[0].time <= t_down + ladder + a.rto_s
    assert b.responder.memory.tobytes() != src
    with pytest.raises(QPStateError):
        a.post_write(wr_id=1, local=b"x", remote_offset=0)


def test_mrc_with_every_path_dead_reaches_err():
    paths = [PathSpec(1e9, DELAY_S, down=((0.003, 100.0),))] * 4
    a, b, net, col, src, _ = transfer(paths, until=10.0)
    assert a.state is QPState.ERR and col.of(a, QPError)


def test_write_with_imm_completions_in_send_order():
    paths = [PathSpec(1e9, DELAY_S * (1 + i / 10), loss=0.01, reorder=0.05,
                      reorder_delay_s=DELAY_S / 5) for i in range(4)]
    a, b = pair(config(), (0, 1, 2, 3), size=64 * 16384)
    net = MultipathNetwork(a, b, paths, seed=5)
    chunks = [payload(16384 - 7 * i, i) for i in range(64)]
    for i in range(64):
        b.post_recv(500 + i)                  # receives posted up front
    for i, c in enumerate(chunks):
        a.post_write(wr_id=i, local=c, remote_offset=i * 16384, imm=1000 + i)
    col = Collector(a, b)
    net.run(stop=lambda: len(col.of(b, WorkCompletion)) == 64, until=5.0)
    recv = col.of(b, WorkCompletion)
    assert [w.imm for w in recv] == [1000 + i for i in range(64)]
    assert [w.wr_id for w in recv] == [500 + i for i in range(64)]
    assert all(w.opcode is WCOpcode.RECV_RDMA_WITH_IMM for w in recv)
    net.run(stop=lambda: len(col.of(a, WorkCompletion)) == 64, until=5.0)
    assert [w.wr_id for w in col.of(a, WorkCompletion)] == list(range(64))
    mem = b.responder.memory.tobytes()
    assert all(mem[i * 16384:i * 16384 + len(c)] == c for i, c in enumerate(chunks))


def test_runs_replay_exactly_with_the_same_seeds():
    paths = [PathSpec(1e9, DELAY_S, loss=0.01)] * 4
    s1 = transfer(paths, seed=9)[0].stats()
    s2 = transfer(paths, seed=9)[0].stats()
    assert s1 == s2
