"""The native QP (agents.mrc._core.QP) against the Python QP's own unit tests and in lockstep.

1. The scenarios of test_mrc_qp.py, test_mrc_retry.py, test_mrc_loss.py, test_mrc_profiles.py
   and test_mrc_qp_unit.py that use only the QP's public interface run with each engine (the
   module's ``QP`` name swapped for the native class; expectations unchanged). Left out, for
   reading or poking Python internals: :data:`PRIVATE`.
2. Lifetime: a QP torn down with a timer pending and writes in flight; write buffers held
   (not resizable) while in flight and released once on completion, flush, reset or teardown.
3. Datagrams shorter than their header, one by one and in a batch: counted, as Python.
4. A lockstep run over agents.mrc.sim (Python pair and native pair, same seeds): every call's
   result, every event, both QPs' stats(), timers and every EV record field at every step.
"""
from __future__ import annotations

import gc
import importlib
import itertools
import logging
import random

import pytest

from agents.mrc import native
from agents.mrc import packet as pk
from agents.mrc.qp import QP as PyQP
from agents.mrc.qp import connect_pair
from agents.mrc.sim import MultipathNetwork, PathSpec
from agents.mrc.types import QPAttr, QPConfig, QPState, WCOpcode, WCStatus, WorkCompletion

core = native.load()
if core is None or not hasattr(core, "QP"):
    pytest.skip("agents.mrc._core (with QP) is not built", allow_module_level=True)
NQP = core.QP

MODULES = ("test_mrc_qp", "test_mrc_retry", "test_mrc_loss", "test_mrc_profiles", "test_mrc_qp_unit")
PRIVATE = {
    "test_sack_bitmap_acknowledges_out_of_order_psns": "reads requester._outstanding",
    "test_batch_receive_matches_one_by_one": "reads the responder's private fields",
    "test_a_trim_nack_does_not_restore_an_ev_retired_for_losses_sent_after_it":
        "calls requester.loss.delivered",
    "test_reordering_guard_counts_from_the_configured_base_rtt_not_a_burst_sample":
        "sets requester.loss.rtt_min_s",
}


def _cases():
    """(module, test name, kwargs) for every public-interface test and parameter set."""
    out = []
    for mod in MODULES:
        m = importlib.import_module(f"tests.unit.{mod}")
        for name in sorted(n for n in dir(m) if n.startswith("test_")):
            if name in PRIVATE:
                continue
            fn = getattr(m, name)
            grids = [{}]
            for mark in getattr(fn, "pytestmark", []):
                if mark.name != "parametrize":
                    continue
                names = [s.strip() for s in mark.args[0].split(",")]
                grids = [{**g, **dict(zip(names, v if len(names) > 1 else (v,)))}
                         for g in grids for v in mark.args[1]]
            out += [pytest.param(mod, name, kw, id=f"{mod}.{name}{list(kw.values()) or ''}")
                    for kw in grids]
    return out


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("mod,name,kw", _cases())
def test_python_unit_scenarios_pass_on_each_engine(monkeypatch, engine, mod, name, kw):
    m = importlib.import_module(f"tests.unit.{mod}")
    monkeypatch.setattr(m, "QP", PyQP if engine == "python" else NQP)
    getattr(m, name)(**kw)


def test_the_unit_scenarios_ran_native_qps(monkeypatch):
    """The swap reaches the QPs those tests build (not a vacuous pass)."""
    m = importlib.import_module("tests.unit.test_mrc_qp_unit")
    monkeypatch.setattr(m, "QP", NQP)
    a, b = m.pair()
    assert type(a) is NQP and type(b) is NQP


# ---- lifetime ---------------------------------------------------------------------------------
def _pair(cls, size=1 << 16, **kw):
    cfg = QPConfig(min_rto_s=0.0, cc="fixed", ack_delay_s=0.00005, **kw)
    a = cls(1, rng=random.Random(1), config=cfg)
    b = cls(2, rng=random.Random(2), memory=bytearray(size), config=cfg)
    connect_pair(a, b, [0, 1, 2, 3])
    return a, b


def _round(a, b, now):
    for data, _ in a.datagrams_to_send(now):
        b.receive_datagram(data, now)
    for data, _ in b.datagrams_to_send(now):
        a.receive_datagram(data, now)
    b.handle_timer(now + 1)
    for data, _ in b.datagrams_to_send(now + 1):
        a.receive_datagram(data, now + 1)


def _events(qp):
    out = []
    while (e := qp.next_event()) is not None:
        out.append(e)
    return out


def test_a_qp_torn_down_with_a_timer_pending_frees_cleanly():
    a, b = _pair(NQP)
    buf = bytearray(50_000)
    a.post_write(wr_id=1, local=buf, remote_offset=0)
    a.datagrams_to_send(0.0)
    assert a.get_timer() is not None and not a.idle
    with pytest.raises(BufferError):
        buf.extend(b"x")
    del a
    gc.collect()
    buf.extend(b"x")          # the torn-down QP let go of it
    assert len(buf) == 50_001


def test_an_in_flight_write_buffer_is_held_and_released_once_by_its_completion():
    a, b = _pair(NQP)
    buf = bytearray(b"\xab" * 9000)
    mine = memoryview(buf)   # the caller's own view stays usable after the QP releases its own
    a.post_write(wr_id=7, local=mine, remote_offset=0)
    sent = a.datagrams_to_send(0.0)
    assert sent and a.requester.tx_packets == len(sent)
    with pytest.raises(BufferError):   # a packet still references it: no resize under the QP
        buf.extend(b"x")
    for data, _ in sent:
        b.receive_datagram(data, 0.001)
    b.handle_timer(1.0)
    for data, _ in b.datagrams_to_send(1.0):
        a.receive_datagram(data, 1.0)
    assert _events(a) == [WorkCompletion(1.0, 1, WCOpcode.RDMA_WRITE, WCStatus.SUCCESS, 7, 9000)]
    assert a.idle and b.responder.memory.tobytes()[:9000] == bytes(buf)
    mine.release()
    buf.extend(b"x")                  # completed: the QP holds it no more
    assert len(buf) == 9001


@pytest.mark.parametrize("how", ["reset", "error"])
def test_reset_and_error_release_in_flight_buffers(how):
    a, b = _pair(NQP)
    bufs = [bytearray(5000) for _ in range(3)]
    for i, buf in enumerate(bufs):
        a.post_write(wr_id=i, local=buf, remote_offset=i * 5000)
    a.datagrams_to_send(0.0)
    for buf in bufs:
        with pytest.raises(BufferError):
            buf.extend(b"x")
    if how == "reset":
        a.modify_qp(QPState.RST)
        assert _events(a) == [] and a.get_timer() is None
    else:
        a.modify_qp(QPState.ERR, 0.5)
        assert [type(e).__name__ for e in _events(a)] == ["QPError"] + ["WorkCompletion"] * 3
    for buf in bufs:
        buf.extend(b"x")


def test_a_write_of_a_non_byte_buffer_is_held_and_sent_as_its_bytes():
    import array
    a, b = _pair(NQP)
    arr = array.array("I", range(1000))
    a.post_write(wr_id=1, local=arr, remote_offset=0)
    with pytest.raises(BufferError):
        arr.append(1)
    _round(a, b, 0.0)
    assert [e.status for e in _events(a)] == [WCStatus.SUCCESS]
    assert b.responder.memory.tobytes()[:4000] == arr.tobytes()
    arr.append(1)


@pytest.mark.parametrize("cls", [PyQP, NQP], ids=["python", "native"])
def test_datagrams_shorter_than_their_header_are_counted(cls):
    a, b = _pair(cls)
    a.post_write(wr_id=1, local=bytes(3000), remote_offset=0)
    data = a.datagrams_to_send(0.0)[0][0]
    short = [b"", b"\x01", data[:2], data[:8], data[:35], data[:-1],
             pk.encode(pk.NackPacket(2, 0, 0, 1, pk.NackReason.TRIMMED))[:-3],
             b"\x01\x02" + bytes(20)]
    for d in short:
        b.receive_datagram(d, 0.0)
    b.receive_datagrams(short, 0.0)
    # the SACK type on the requester side too
    a.receive_datagram(b"\x01\x02" + bytes(10), 0.0)
    assert b.bad_packets == 2 * len(short) and a.bad_packets == 1
    assert b.responder.rx_packets == 0


def test_short_datagrams_count_the_same_on_both_engines():
    counts = []
    for cls in (PyQP, NQP):
        a, b = _pair(cls)
        a.post_write(wr_id=1, local=bytes(3000), remote_offset=0)
        data = a.datagrams_to_send(0.0)[0][0]
        for n in range(len(data)):
            b.receive_datagram(data[:n], 0.0)
        cuts = [data[:n] for n in range(0, len(data), 7)]
        b.receive_datagrams(cuts, 0.0, ce=[n % 2 == 0 for n in range(len(cuts))])
        counts.append((b.bad_packets, b.stats()))
    assert counts[0] == counts[1]


# ---- lockstep over the simulator ---------------------------------------------------------------
_INFO_FIELDS = ("ev", "state", "skip_until", "probe_ok", "probe_due", "probe_outstanding",
                "packets_sent", "bytes_sent", "packets_acked", "packets_lost", "retransmits",
                "acked_seq", "last_ack_s", "rtt_last_s", "rtt_min_s", "rtt_srtt_s",
                "rtt_samples", "probes_sent", "probes_ok_total", "delivered_ts_ns", "delivered_at_s", "loss_run",
                "loss_run_ts_ns", "loss_run_timeout", "losses_excused", "losses_chargeable", "always_skip", "skips",
                "drops_reported")


class _Rec:
    """The QP as the simulator sees it, every call and result logged."""

    def __init__(self, qp, log):
        self.qp, self.log = qp, log

    def get_timer(self):
        t = self.qp.get_timer()
        self.log.append(("timer", self.qp.qpn, t))
        return t

    def receive_datagram(self, data, now, ecn=False):
        self.log.append(("rx", self.qp.qpn, bytes(data), now, ecn))
        self.qp.receive_datagram(data, now, ecn=ecn)

    def receive_datagrams(self, datagrams, now, ce=None):
        self.log.append(("rxb", self.qp.qpn, [bytes(d) for d in datagrams], now, ce))
        self.qp.receive_datagrams(datagrams, now, ce=ce)

    def handle_timer(self, now):
        self.log.append(("timer!", self.qp.qpn, now))
        self.qp.handle_timer(now)

    def datagrams_to_send(self, now):
        out = self.qp.datagrams_to_send(now)
        self.log.append(("tx", self.qp.qpn, now, out))
        return out

    def __getattr__(self, name):
        return getattr(self.qp, name)


def _view(qp):
    infos = [] if qp.evs is None else [
        tuple(_plain(getattr(i, f)) for f in _INFO_FIELDS) for i in qp.evs.info.values()]
    return (qp.state, qp.rto_s, qp.srtt_s, qp.idle, qp.bad_packets, qp.probe_timeout_s,
            qp.cnp_received, qp.stats(), infos, qp.evs.order if qp.evs else None,
            qp.evs.all_good if qp.evs else None, qp.cc.cwnd_bytes,
            qp.responder.memory.tobytes() if qp.responder.memory is not None else None)


def _plain(x):
    return x if not hasattr(x, "name") else x.name


def _run(cls, sc, steps=4000):
    cfg, paths, writes, evs, seed = sc["cfg"], sc["paths"], sc["writes"], sc["evs"], sc["seed"]
    log, trace = [], []
    a = cls(1, rng=random.Random(seed), config=cfg)
    b = cls(2, rng=random.Random(seed + 1), memory=bytearray(sc["mem"]), config=cfg)
    connect_pair(a, b, evs, attr=sc["attr"], ev_min_active=sc.get("ev_min_active", 1))
    rnd = random.Random(seed)
    for w, (size, imm) in enumerate(writes):
        a.post_write(wr_id=w, local=rnd.randbytes(size), remote_offset=w * 1000, imm=imm)
        if imm is not None:
            b.post_recv(100 + w)
    net = MultipathNetwork(_Rec(a, log), _Rec(b, log), paths, ev_ids=evs, seed=seed)
    net.drain()
    trace.append((list(log), _events(a), _events(b), _view(a), _view(b)))
    log.clear()
    for i in range(steps):
        if i == sc.get("deny_at"):
            a.set_ev_state(evs[0], sc["deny_state"], net.now)
        if not net.step():
            break
        trace.append((list(log), _events(a), _events(b), _view(a), _view(b)))
        log.clear()
    return trace


D = 0.0002
RATE = 1e8
BASE = 2 * D + 1124 * 8 / RATE
ATTR = QPAttr(timeout=12, mpr=16, mpr_dest=16, retry_linear_cnt=3, retry_exp_cnt=2)


def _cfg(**kw):
    c = dict(payload_bytes=1024, min_rto_s=0.0, time_scale=1.5, cc="uet-1.0-nscc",
             cc_params={"rate_bps": 4 * RATE, "base_rtt_s": BASE}, probe_timeout_s=3 * BASE,
             probe_interval_s=5 * BASE)
    c.update(kw)
    return QPConfig(**c)


def _scenarios():
    from agents.mrc.ev import EVState
    from agents.mrc.types import Transport
    lossy = PathSpec(rate_bps=RATE, delay_s=D, loss=0.03, reorder=0.1, reorder_delay_s=2 * D,
                     duplicate=0.02)
    return {
        "lossy_mrc": dict(cfg=_cfg(), paths=[lossy] * 4, evs=[0, 1, 2, 3], seed=3, mem=1 << 18,
                          attr=ATTR, writes=[(60_000, None), (3000, 5), (1, None), (0, 9)]),
        "dead_path": dict(cfg=_cfg(), evs=[0, 1, 2, 3], seed=4, mem=1 << 18, attr=ATTR,
                          paths=[PathSpec(rate_bps=RATE, delay_s=D)] * 3 +
                          [PathSpec(rate_bps=RATE, delay_s=D, down=((0.001, 0.03),))],
                          writes=[(120_000, None)] * 2),
        "ecn_queues": dict(cfg=_cfg(always_skip_ce_run=2), evs=[0, 1], seed=5, mem=1 << 18,
                           attr=ATTR, writes=[(90_000, 1)],
                           paths=[PathSpec(rate_bps=RATE / 2, delay_s=D, ecn_kmin_bytes=2000,
                                           ecn_kmax_bytes=8000, queue_bytes=20_000)] * 2),
        "dcqcn_paced": dict(cfg=_cfg(cc="dcqcn", cc_params={"rate_bps": 2 * RATE, "base_rtt_s": BASE},
                                     cnp_interval_s=BASE / 4),
                            evs=[0, 1], seed=6, mem=1 << 18, attr=ATTR, writes=[(80_000, None)],
                            paths=[PathSpec(rate_bps=RATE, delay_s=D, ecn_kmin_bytes=1000,
                                            ecn_kmax_bytes=6000)] * 2),
        "rc_lossy": dict(cfg=_cfg(transport=Transport.RC, cc="fixed", cc_params={}), evs=[0],
                         seed=7, mem=1 << 18, attr=ATTR, writes=[(50_000, None), (2000, 3)],
                         paths=[PathSpec(rate_bps=RATE, delay_s=D, loss=0.05)]),
        "all_denied_to_err": dict(cfg=_cfg(), evs=[0], seed=8, mem=1 << 16,
                                  attr=QPAttr(timeout=11, retry_linear_cnt=1, retry_exp_cnt=1),
                                  writes=[(200_000, None)], deny_at=1, deny_state=EVState.DENIED,
                                  paths=[PathSpec(rate_bps=RATE, delay_s=D,
                                                  down=((0.0005, float("inf")),))]),
    }


@pytest.mark.parametrize("name", list(_scenarios()))
def test_native_pair_runs_in_lockstep_with_the_python_pair(name):
    sc = _scenarios()[name]
    py, nat = _run(PyQP, sc), _run(NQP, sc)
    for i, (x, y) in enumerate(itertools.zip_longest(py, nat)):
        assert x == y, f"{name}: step {i} differs"
    assert len(py) > 10
    events = [e for step in py for e in step[1] + step[2]]
    assert events, "the scenario completes or fails something"


def test_qp_fuzz_corpus_is_generated_and_its_datagrams_are_real_packets(tmp_path):
    """agents/mrc/core/corpus/qp/ is what make_qp_corpus.py writes, and its records carry valid
    datagrams for the fuzzed QP (QPN 7), so the fuzzer starts from the protocol's real paths."""
    import importlib.util
    import struct
    from pathlib import Path
    from agents.mrc import packet as pk
    corpus = Path(__file__).resolve().parents[2] / "agents" / "mrc" / "core" / "corpus"
    spec = importlib.util.spec_from_file_location("make_qp_corpus", corpus / "make_qp_corpus.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(["make_qp_corpus", str(tmp_path)])
    made = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert made == {p.name: p.read_bytes() for p in (corpus / "qp").iterdir()} and made
    kinds = set()
    for blob in made.values():
        at = 0
        while at < len(blob):
            op, n = struct.unpack_from("!BH", blob, at)
            at += 3
            if op & 3 == 2:          # a clock tick: no bytes
                continue
            data, at = blob[at:at + n], at + n
            if op & 4:               # the CRC is fixed by the target
                continue
            parts = [data[:n // 2], data[n // 2:]] if op & 3 == 3 else [data]
            for part in parts:
                pkt = pk.parse(part)
                assert pkt.dest_qpn == 7
                kinds.add(type(pkt).__name__)
    assert kinds == {"DataPacket", "SackPacket", "NackPacket", "ProbePacket", "CnpPacket"}
